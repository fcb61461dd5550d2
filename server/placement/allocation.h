// Rule P-DRA (docs/SEMANTICS.md section 3): the devices Kubernetes Dynamic Resource Allocation
// allocated to the job's container (ResolveDeviceRequest.device_allocation, read by a client from
// the DRA Device Metadata files), matched to the host's inventory by the identity attributes the
// drivers publish.
#ifndef DEVPLACE_SERVER_PLACEMENT_ALLOCATION_H_
#define DEVPLACE_SERVER_PLACEMENT_ALLOCATION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// The job's allocated devices, as host devices of the inventory.
struct JobAllocation {
  // Each matched host device, with what allocated it ("claim gpu-claim request gpu driver
  // gpu.nvidia.com device gpu-1"). Empty = no device matched: nothing is restricted.
  std::map<const v1::Device*, std::string> devices;
  // One line per allocated device (matched, or ignored: another driver's device matching nothing),
  // each starting with "P-DRA".
  std::vector<std::string> explanation;
  // An allocated device of a driver devplace knows that matches no inventory device, and each file
  // the client could not use: warnings, and hazards under `strict`.
  std::vector<std::string> unmatched;
};

// The DRA drivers whose devices belong to one row: gpu.nvidia.com (cuda/nvidia), gpu.amd.com
// (cuda/amd), gpu.intel.com (xpu), tpu.google.com (tpu); ROW_UNSPECIFIED for any other driver.
v1::Row DriverRow(const std::string& driver);

// Whether MatchAllocation may read attribute `key` of a device of `driver`: "uuid", the PCI
// address spellings, "minor" and "index", plain or qualified by the driver ("gpu.nvidia.com/uuid"),
// and "resource.kubernetes.io/pciBusID". No other attribute is read by any rule (a waiting pick
// keeps only these).
bool IdentifyingAttribute(absl::string_view key, absl::string_view driver);

// Matches `allocation` against `inventory`. Each device is matched within its driver's row (any
// accelerator row for another driver) by the first identity that names exactly one host device:
// its UUID ("uuid", a device's or one of its MIG instances'), its PCI address
// ("resource.kubernetes.io/pciBusID", "pciBusID", "pciAddr", "pciAddress"), NVIDIA's "minor"
// (Device.minor), TPU's "index" (the chip id of E-TPU), Intel's device name (the PCI address,
// "0000-03-00-0-0x56a0") or AMD's ("gpu-<card>-<render>": /dev/dri/renderD<render>); for another
// driver only the UUID and the PCI address. INVALID_ARGUMENT, naming the field and the bound, when
// the message exceeds the bounds of devplace.proto's DeviceAllocation.
absl::StatusOr<JobAllocation> MatchAllocation(const v1::Inventory& inventory, const v1::DeviceAllocation& allocation);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_ALLOCATION_H_
