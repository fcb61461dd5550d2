// The rule for NVIDIA's critical XID errors (docs/PROBE.md "XID critical errors"): devplaced's
// XID watcher counts, per GPU, each XID that NVML reported (nvmlEventSetWait_v2,
// nvmlEventTypeXidCriticalError) since devplaced started, and every inventory it publishes carries
// them as health counters. Pure function of its arguments.
#ifndef DEVPLACE_SERVER_PLACEMENT_XID_HEALTH_H_
#define DEVPLACE_SERVER_PLACEMENT_XID_HEALTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// HealthCounter.source of an XID counter.
inline constexpr absl::string_view kXidSource = "NVML nvmlEventSetWait_v2";

// Whether `xid` is one of the application errors the NVIDIA device plugin leaves a GPU healthy
// for (k8s-device-plugin's health check, after NVIDIA's XID catalogue): 13 graphics engine
// exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup after
// earlier errors, 68 video processor exception. A job's bad kernel or its own cleanup raises
// them; the GPU itself is fine.
bool IsApplicationXid(uint64_t xid);

// One XID's count on one GPU since devplaced started.
struct XidReading {
  std::string pci_bus_id;  // canonical "dddd:bb:dd.f"
  uint64_t xid = 0;
  uint64_t count = 0;  // >= 1
  absl::Time last;     // when the watcher saw the latest
};

// Adds a counter "xid.<n>" (value the count, source kXidSource) to the NVIDIA row's device with
// each reading's pci_bus_id (a reading whose GPU is not in the inventory is dropped): effect
// HEALTH_FAULT, or HEALTH_OK for an application XID (IsApplicationXid); the rule says which and
// that a GPU reset clears the error while devplaced keeps the count until it restarts. The
// device's health, reason, usable and unusable_reason, and the row's state, follow.
void ApplyXidReadings(const std::vector<XidReading>& readings, v1::Inventory& inventory);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_XID_HEALTH_H_
