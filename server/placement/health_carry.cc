#include "server/placement/health_carry.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "server/placement/backends.h"
#include "server/placement/device_state.h"
#include "server/placement/health.h"
#include "server/placement/xid_health.h"

namespace devplace::placement {
namespace {

constexpr char kUnknownNow[] = "; unknown now: ";

using DeviceKey = std::pair<int, std::string>;  // row, pci_bus_id

std::string ProbeTime(const google::protobuf::Timestamp& t) {
  const absl::Time time = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

// The "kept from the probe at <time>: <rule>" part for `then`, a FAULT or LOST counter of the
// previous snapshot: its own when it was already kept, else the previous probe's time and its rule.
std::string KeptPart(const v1::HealthCounter& then, const v1::Inventory& previous) {
  if (absl::StartsWith(then.rule(), kKeptReadingPrefix)) {
    return then.rule().substr(0, then.rule().find(kUnknownNow));  // FaultReadings' form: the whole rule
  }
  return absl::StrCat(kKeptReadingPrefix, ProbeTime(previous.probed_at()), ": ", then.rule());
}

// Keeps `now`'s unknown counters whose reading in `then` made the device FAULT or LOST, then
// makes the device as bad as each kept counter (WorsenHealth: after the reasons of the counters
// read now; not usable); returns whether any was kept.
bool KeepDeviceReadings(const v1::Device& then, const v1::Inventory& previous, v1::Device& now) {
  bool kept = false;
  for (v1::HealthCounter& c : *now.mutable_health_counters()) {
    if (c.effect() != v1::HEALTH_UNSPECIFIED) continue;
    for (const v1::HealthCounter& old : then.health_counters()) {
      if (old.name() != c.name() || old.source() != c.source() || HealthUsable(old.effect())) continue;
      // The now-unknown counter's rule is "unknown: <why>"; the kept rule says "unknown now: <why>".
      c.set_rule(absl::StrCat(KeptPart(old, previous), kUnknownNow, absl::StripPrefix(c.rule(), "unknown: ")));
      c.set_value(old.value());
      c.set_effect(old.effect());
      WorsenHealth(now, c);
      kept = true;
      break;
    }
  }
  return kept;
}

// Marks `now`'s corrected-error counts that rose since `then` DEGRADED (MarkRisingCorrectedErrors);
// returns whether any did.
bool MarkDeviceRising(const v1::Device& then, const v1::Inventory& previous, v1::Device& now) {
  bool rising = false;
  for (v1::HealthCounter& c : *now.mutable_health_counters()) {
    uint64_t count = 0, before = 0;
    if (c.effect() != v1::HEALTH_OK || !IsCorrectedErrorCount(c.name()) || !absl::SimpleAtoi(c.value(), &count)) {
      continue;
    }
    for (const v1::HealthCounter& old : then.health_counters()) {
      if (old.name() != c.name() || old.source() != c.source() || !absl::SimpleAtoi(old.value(), &before)) continue;
      if (count > before) {
        c.set_effect(v1::HEALTH_DEGRADED);
        c.set_rule(absl::StrCat("rising since the probe at ", ProbeTime(previous.probed_at()), " (", before,
                                " then): corrected errors pile up, a sign of memory or a link wearing out (usable, "
                                "picked after OK devices)"));
        WorsenHealth(now, c);
        rising = true;
      }
      break;
    }
  }
  return rising;
}

// Runs `apply(then, now)` on each device of `fresh` matched to one of `previous` (same row and
// pci_bus_id, and equal uuids where both have one); derives a row's state again where it said yes.
template <typename Apply>
void ForMatchedDevices(const v1::Inventory& previous, v1::Inventory& fresh, Apply apply) {
  std::map<DeviceKey, const v1::Device*> before;
  for (const v1::Backend& b : previous.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (!d.pci_bus_id().empty()) before.emplace(DeviceKey(b.row(), d.pci_bus_id()), &d);
    }
  }
  for (v1::Backend& b : *fresh.mutable_backends()) {
    bool changed = false;
    for (v1::Device& d : *b.mutable_devices()) {
      const auto then = before.find(DeviceKey(b.row(), d.pci_bus_id()));
      if (then == before.end()) continue;
      const v1::Device& old = *then->second;
      if (!old.uuid().empty() && !d.uuid().empty() && old.uuid() != d.uuid()) continue;
      changed = apply(old, d) || changed;
    }
    if (!changed) continue;
    const BackendSpec* spec = FindBackend(b.row());
    if (spec != nullptr) DeriveBackendState(*spec, b);
  }
}

}  // namespace

void KeepFaultReadings(const v1::Inventory& previous, v1::Inventory& fresh) {
  ForMatchedDevices(previous, fresh,
                    [&](const v1::Device& then, v1::Device& now) { return KeepDeviceReadings(then, previous, now); });
}

bool IsCorrectedErrorCount(absl::string_view name) {
  return name == "ecc.errors.corrected.volatile.total" || name == "remapped_rows.correctable" ||
         name == "hbm_ecc.single_bit_error_cnt" || name == "aer_dev_correctable" ||
         (absl::StartsWith(name, "ras/") && absl::EndsWith(name, "_err_count ce"));
}

void MarkRisingCorrectedErrors(const v1::Inventory& previous, v1::Inventory& fresh) {
  ForMatchedDevices(previous, fresh,
                    [&](const v1::Device& then, v1::Device& now) { return MarkDeviceRising(then, previous, now); });
}

void CarryHealth(const v1::Inventory& previous, v1::Inventory& fresh) {
  KeepFaultReadings(previous, fresh);
  MarkRisingCorrectedErrors(previous, fresh);
}

v1::Inventory FaultReadings(const v1::Inventory& snapshot) {
  v1::Inventory out;
  *out.mutable_probed_at() = snapshot.probed_at();
  for (const v1::Backend& b : snapshot.backends()) {
    v1::Backend* row = nullptr;
    for (const v1::Device& d : b.devices()) {
      if (d.pci_bus_id().empty()) continue;
      v1::Device* device = nullptr;
      for (const v1::HealthCounter& c : d.health_counters()) {
        if (c.effect() == v1::HEALTH_UNSPECIFIED || HealthUsable(c.effect()) || c.source() == kXidSource) continue;
        if (row == nullptr) {
          row = out.add_backends();
          row->set_row(b.row());
        }
        if (device == nullptr) {
          device = row->add_devices();
          device->set_pci_bus_id(d.pci_bus_id());
          device->set_uuid(d.uuid());
        }
        v1::HealthCounter& kept = *device->add_health_counters() = c;
        if (absl::StartsWith(c.rule(), kKeptReadingPrefix)) kept.set_rule(c.rule().substr(0, c.rule().find(kUnknownNow)));
      }
    }
  }
  return out;
}

}  // namespace devplace::placement
