// What a device's and a backend's derived fields say, given the facts already in them: the
// probe (server/probe/build_inventory.cc) derives them for each fresh inventory, and the daemon's
// health carry (health_carry.h) derives them again when it keeps a counter's last reading.
// Pure functions of proto messages.
#ifndef DEVPLACE_SERVER_PLACEMENT_DEVICE_STATE_H_
#define DEVPLACE_SERVER_PLACEMENT_DEVICE_STATE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/backends.h"

namespace devplace::placement {

// The fix a reason names for a device the container cannot see.
inline constexpr absl::string_view kNotVisible = "not visible in this container";

// How to get the row's driver loaded, e.g. "install/load the nvidia kernel module".
std::string DriverFix(const BackendSpec& spec);

// Device.unusable_reason for a device whose health is not usable (FAULT, LOST): its
// health_reason (or "device health is HEALTH_FAULT" when it has none) and the fix.
std::string HealthUnusableReason(const v1::Device& d);

// Device.health and health_reason from the probers' verdict already in `d` (health,
// health_reason) and its health counters: the worst of them (an unknown counter changes nothing);
// the reason is the verdict's, then each counter that made the device worse than OK
// ("<name> <value>: <rule>"), joined by "; " (docs/PROBE.md "Device health").
void ApplyHealthCounters(v1::Device& d);

// Makes `d` as bad as `c`, one of its health counters added after the probe derived its health (a
// kept reading, an XID): health the worse of the two, "<name> <value>: <rule>" appended to
// health_reason, and when the health is then FAULT or LOST, usable false and unusable_reason
// HealthUnusableReason (a driver that is not loaded stays the first reason). The caller derives
// the backend's state again (DeriveBackendState).
void WorsenHealth(v1::Device& d, const v1::HealthCounter& c);

// Backend.state and state_reason from its devices' usable, driver_loaded and device_nodes_present:
// READY when one is usable ("N of M devices usable" when not all are), else DRIVER_NOT_LOADED,
// NO_DEVICE_NODES or UNUSABLE with the first reachable device's unusable_reason.
void DeriveBackendState(const BackendSpec& spec, v1::Backend& b);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_DEVICE_STATE_H_
