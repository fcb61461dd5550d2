#include "server/placement/xid_health.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "server/placement/backends.h"
#include "server/placement/device_state.h"

namespace devplace::placement {

bool IsApplicationXid(uint64_t xid) { return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68; }

void ApplyXidReadings(const std::vector<XidReading>& readings, v1::Inventory& inventory) {
  if (readings.empty()) return;
  for (v1::Backend& b : *inventory.mutable_backends()) {
    if (b.row() != v1::ROW_CUDA_NVIDIA) continue;
    std::map<std::string, v1::Device*> by_bus;
    for (v1::Device& d : *b.mutable_devices()) by_bus.emplace(d.pci_bus_id(), &d);
    bool changed = false;
    for (const XidReading& r : readings) {
      const auto it = by_bus.find(r.pci_bus_id);
      if (r.pci_bus_id.empty() || it == by_bus.end()) continue;
      v1::Device& d = *it->second;
      const bool application = IsApplicationXid(r.xid);
      const std::string last = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", r.last, absl::UTCTimeZone());
      v1::HealthCounter& c = *d.add_health_counters();
      c.set_name(absl::StrCat("xid.", r.xid));
      c.set_value(absl::StrCat(r.count));
      c.set_source(std::string(kXidSource));
      c.set_effect(application ? v1::HEALTH_OK : v1::HEALTH_FAULT);
      c.set_rule(application
                     ? absl::StrCat("application XID ", r.xid, " since devplaced started (last at ", last,
                                    "): a job's error, the GPU stays usable (as the NVIDIA device plugin)")
                     : absl::StrCat("critical XID ", r.xid, " since devplaced started (last at ", last,
                                    "): reset the GPU; devplaced keeps the error until it restarts"));
      if (!application) WorsenHealth(d, c);
      changed = true;
    }
    if (!changed) continue;
    if (const BackendSpec* spec = FindBackend(b.row()); spec != nullptr) DeriveBackendState(*spec, b);
  }
}

}  // namespace devplace::placement
