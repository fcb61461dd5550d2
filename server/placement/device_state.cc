#include "server/placement/device_state.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/placement/health.h"

namespace devplace::placement {

std::string DriverFix(const BackendSpec& spec) {
  if (spec.kernel_modules.empty()) return absl::StrCat("install/load the ", spec.hardware, " driver");
  return absl::StrCat("install/load the ", spec.kernel_modules.front(), " kernel module");
}

std::string HealthUnusableReason(const v1::Device& d) {
  const std::string what =
      d.health_reason().empty() ? absl::StrCat("device health is ", v1::Health_Name(d.health())) : d.health_reason();
  return absl::StrCat(what, " (reset the device or reboot the host)");
}

void ApplyHealthCounters(v1::Device& d) {
  v1::Health health = d.health() == v1::HEALTH_UNSPECIFIED ? v1::HEALTH_OK : d.health();
  std::vector<std::string> reasons;
  if (!d.health_reason().empty()) reasons.push_back(d.health_reason());
  for (const v1::HealthCounter& c : d.health_counters()) {
    if (HealthSeverity(c.effect()) == 0) continue;
    health = WorseHealth(health, c.effect());
    reasons.push_back(absl::StrCat(c.name(), " ", c.value(), ": ", c.rule()));
  }
  d.set_health(health);
  d.set_health_reason(absl::StrJoin(reasons, "; "));
}

void WorsenHealth(v1::Device& d, const v1::HealthCounter& c) {
  d.set_health(WorseHealth(d.health() == v1::HEALTH_UNSPECIFIED ? v1::HEALTH_OK : d.health(), c.effect()));
  const std::string reason = absl::StrCat(c.name(), " ", c.value(), ": ", c.rule());
  d.set_health_reason(d.health_reason().empty() ? reason : absl::StrCat(d.health_reason(), "; ", reason));
  if (HealthUsable(d.health())) return;
  d.set_usable(false);
  if (d.driver_loaded()) d.set_unusable_reason(HealthUnusableReason(d));
}

void DeriveBackendState(const BackendSpec& spec, v1::Backend& b) {
  int usable = 0, with_driver = 0, with_nodes = 0;
  for (const v1::Device& d : b.devices()) {
    usable += d.usable();
    with_driver += d.driver_loaded();
    with_nodes += d.driver_loaded() && d.device_nodes_present();
  }
  const int total = b.devices_size();
  b.clear_state_reason();
  if (usable > 0) {
    b.set_state(v1::BACKEND_STATE_READY);
    if (usable < total) b.set_state_reason(absl::StrCat(usable, " of ", total, " devices usable"));
  } else if (with_driver == 0) {
    b.set_state(v1::BACKEND_STATE_DRIVER_NOT_LOADED);
    b.set_state_reason(absl::StrCat("no ", spec.hardware, " has its driver bound (", DriverFix(spec), ")"));
  } else if (with_nodes == 0) {
    b.set_state(v1::BACKEND_STATE_NO_DEVICE_NODES);
    b.set_state_reason(absl::StrCat("driver bound but no device node present (", kNotVisible, ")"));
  } else {
    b.set_state(v1::BACKEND_STATE_UNUSABLE);
    for (const v1::Device& d : b.devices()) {
      if (d.driver_loaded() && d.device_nodes_present()) {
        b.set_state_reason(absl::StrCat("no usable device: ", d.unusable_reason()));
        break;
      }
    }
  }
}

}  // namespace devplace::placement
