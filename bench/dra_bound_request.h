// The ResolveDevice request at devplace.proto's DeviceAllocation bounds that no allocated device
// matches (scripts/bench's DRA rows; bench/load_gen --request=dra_bound, bench/allocation_bench):
// from_pretrained(device_map="auto") with 1,024 gpu.nvidia.com devices x 64 attributes each (a
// UUID, the four PCI address spellings, a minor and 58 others), none of them a device of any host:
// every identity is looked up and misses. About 0.8 MB: under the default --max_receive_bytes,
// over the answer cache's 16 KiB, so every call runs the resolver.
#ifndef DEVPLACE_BENCH_DRA_BOUND_REQUEST_H_
#define DEVPLACE_BENCH_DRA_BOUND_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::bench {

inline constexpr int kDraBoundDevices = 1024;
inline constexpr int kDraBoundAttributes = 64;

inline v1::ResolveDeviceRequest DraBoundRequest() {
  v1::ResolveDeviceRequest r;
  r.set_workload(v1::WORKLOAD_INFERENCE);
  r.set_device_map("auto");
  v1::DeviceAllocation& a = *r.mutable_device_allocation();
  a.set_source("/var/run/kubernetes.io/dra-device-attributes");
  for (int i = 0; i < kDraBoundDevices; ++i) {
    v1::AllocatedDevice& d = *a.add_devices();
    d.set_claim("claim");
    d.set_request("gpu");
    d.set_driver("gpu.nvidia.com");
    d.set_pool("node");
    d.set_name(absl::StrCat("gpu-", i));
    auto& attributes = *d.mutable_attributes();
    attributes["uuid"] = absl::StrCat("GPU-00000000-0000-0000-0000-", int64_t{100000000000} + i);
    // PCI domains 0100.. no host uses: valid addresses that name no device.
    const std::string pci = absl::StrFormat("%04x:%02x:00.0", 0x100 + i / 256, i % 256);
    for (const char* key : {"resource.kubernetes.io/pciBusID", "pciBusID", "pciAddr", "pciAddress"}) {
      attributes[key] = pci;
    }
    attributes["minor"] = absl::StrCat(1000 + i);
    for (int k = 0; static_cast<int>(attributes.size()) < kDraBoundAttributes; ++k) attributes[absl::StrCat("a", k)] = "x";
  }
  return r;
}

}  // namespace devplace::bench

#endif  // DEVPLACE_BENCH_DRA_BOUND_REQUEST_H_
