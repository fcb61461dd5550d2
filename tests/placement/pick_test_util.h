// Shared by the pick tests (pick_test.cc, pick_steps_test.cc): the usage a vendor library reports
// on a builder's device, a job with a Kubernetes DRA allocation, and a pick's explanation as one text.
#ifndef DEVPLACE_TESTS_PLACEMENT_PICK_TEST_UTIL_H_
#define DEVPLACE_TESTS_PLACEMENT_PICK_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_join.h"
#include "devplace/v1/devplace.pb.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {

// `procs` processes using `used` bytes on device i of `row`, as NVML lists them (processes
// known, the memory split evenly between them); its free memory becomes total - used.
inline void Use(InventoryBuilder& inv, v1::Row row, int i, uint32_t procs, uint64_t used) {
  v1::Device& d = inv.Device(row, i);
  v1::DeviceUsage& u = *d.mutable_usage();
  u.set_source("nvml");
  u.set_processes_known(true);
  u.set_process_count(procs);
  for (uint32_t p = 0; p < procs; ++p) {
    v1::DeviceUsageProcess& proc = *u.add_processes();
    proc.set_pid(1000 + p);
    proc.set_used_memory_bytes(used / procs);
  }
  u.set_memory_used_bytes(used);
  d.set_memory_free_bytes(d.memory_total_bytes() - used);
}

// A training job whose DRA Device Metadata (P-DRA) allocates it cuda/nvidia device i of a builder's
// inventory, named by its UUID (TestUuid).
inline v1::ResolveDeviceRequest DraJob(int i) {
  v1::ResolveDeviceRequest job = Req::Train();
  job.mutable_device_allocation()->set_source("/dra");
  v1::AllocatedDevice& a = *job.mutable_device_allocation()->add_devices();
  a.set_claim("c");
  a.set_request("gpu");
  a.set_driver("gpu.nvidia.com");
  a.set_pool("node");
  a.set_name("gpu-" + std::to_string(i));
  (*a.mutable_attributes())["uuid"] = TestUuid(v1::ROW_CUDA_NVIDIA, i);
  return job;
}

// The pick's explanation, one step a line.
inline std::string Explained(const v1::PickDevicesResponse& r) { return absl::StrJoin(r.explanation(), "\n"); }

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_PICK_TEST_UTIL_H_
