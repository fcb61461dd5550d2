// libFuzzer target: Resolve never crashes on any request against a mixed host (NVIDIA, AMD,
// Intel with tiles, Neuron with cores, Gaudi, Ascend, MLU, MUSA, TPU, MPS). The input is a
// serialized ResolveDeviceRequest; bytes that do not parse are used as device_map and as every
// visibility variable's value instead. Invariants: an answer names a device, lists it first in
// `devices`, and never places more devices than it lists; an error carries a message.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"

namespace {

const devplace::v1::Inventory& Host() {
  static const devplace::v1::Inventory* inv = [] {
    devplace::testing::InventoryBuilder b;
    b.Add(devplace::v1::ROW_CUDA_NVIDIA, 4).Add(devplace::v1::ROW_CUDA_AMD, 2).Add(devplace::v1::ROW_XPU, 2);
    b.Add(devplace::v1::ROW_NEURON, 2).Add(devplace::v1::ROW_HPU, 2).Add(devplace::v1::ROW_NPU, 2);
    b.Add(devplace::v1::ROW_MLU, 2).Add(devplace::v1::ROW_MUSA, 2).Add(devplace::v1::ROW_TPU, 2);
    b.Add(devplace::v1::ROW_MPS, 1);
    b.Device(devplace::v1::ROW_XPU, 0).set_sub_device_count(2);
    b.Device(devplace::v1::ROW_NEURON, 1).set_sub_device_count(2);
    b.Device(devplace::v1::ROW_CUDA_NVIDIA, 2).add_partitions()->set_uuid("MIG-11112222-3333-4444-5555-666677778888");
    return new devplace::v1::Inventory(b.Build());
  }();
  return *inv;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  devplace::v1::ResolveDeviceRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    req.Clear();
    req.set_workload(size % 2 == 0 ? devplace::v1::WORKLOAD_INFERENCE : devplace::v1::WORKLOAD_TRAINING);
    if (req.workload() == devplace::v1::WORKLOAD_INFERENCE) req.set_device_map(text);
    for (const char* var : {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                            "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES",
                            "NEURON_RT_VISIBLE_CORES", "HABANA_VISIBLE_MODULES", "TPU_VISIBLE_CHIPS", "LOCAL_RANK"}) {
      if (text.size() % 11 == static_cast<size_t>(var[0] % 11)) (*req.mutable_env())[var] = text;
    }
  }
  absl::StatusOr<devplace::v1::ResolveDeviceResponse> r = devplace::placement::Resolve(Host(), req);
  if (!r.ok()) {
    if (r.status().message().empty()) abort();
    return 0;
  }
  if (r->device().empty() || r->devices_size() == 0 || r->devices(0) != r->device()) abort();
  if (r->placed_size() > r->devices_size()) abort();
  return 0;
}
