// Visibility masks (SEMANTICS.md section 3): PyTorch's CUDA-style list parser, each row's
// variable, P1 job device nodes, and malformed masks as INVALID_ARGUMENT naming the variable.
#include "server/placement/visibility.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using placement::ComputeVisibility;
using placement::ParseCudaStyleList;
using placement::RowVisibility;

TEST(CudaStyleList, FollowsPytorchParseVisibleDevices) {
  EXPECT_THAT(ParseCudaStyleList("2,1").ordinals, ElementsAre(2, 1));
  EXPECT_THAT(ParseCudaStyleList("1gpu2,2ampere").ordinals, ElementsAre(1, 2));  // strtoul-like
  EXPECT_THAT(ParseCudaStyleList(" 3 , +1").ordinals, ElementsAre(3, 1));       // stripped, sign ok
  const auto neg = ParseCudaStyleList("0,2,-1,1");
  EXPECT_THAT(neg.ordinals, ElementsAre(0, 2));
  EXPECT_EQ(neg.truncated_at, "-1");
  const auto rep = ParseCudaStyleList("1,1");
  EXPECT_TRUE(rep.ordinals.empty());
  EXPECT_TRUE(rep.repeated);
  const auto empty = ParseCudaStyleList("");
  EXPECT_TRUE(empty.ordinals.empty());
  EXPECT_TRUE(empty.truncated_at.empty());
  EXPECT_THAT(ParseCudaStyleList("abc,1").ordinals, ElementsAre());
  EXPECT_THAT(ParseCudaStyleList("1,+").ordinals, ElementsAre(1));
  EXPECT_THAT(ParseCudaStyleList("1,99999999999999999999").ordinals, ElementsAre(1));
  const auto uuids = ParseCudaStyleList("GPU-ab,GPU-cd,3");
  EXPECT_TRUE(uuids.is_uuid);
  EXPECT_THAT(uuids.uuids, ElementsAre("GPU-ab", "GPU-cd"));
  EXPECT_EQ(uuids.truncated_at, "3");
}

std::vector<int> Hosts(const RowVisibility& v) {
  std::vector<int> out;
  for (const auto& u : v.units) out.push_back(static_cast<int>(u.device->host_index()));
  return out;
}

absl::StatusOr<RowVisibility> See(const v1::Inventory& inv, v1::Row row, const placement::Env& env,
                                  const v1::JobDevices* job = nullptr) {
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == row) return ComputeVisibility(b, env, job);
  }
  return absl::NotFoundError("row");
}

placement::Env E(std::initializer_list<std::pair<const char*, const char*>> kv) {
  placement::Env env;
  for (const auto& [k, v] : kv) env[k] = v;
  return env;
}

TEST(Visibility, CudaListOrderIsTheJobsNumbering) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 4);
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "2,1"}}));
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(Hosts(*v), ElementsAre(2, 1));
  EXPECT_TRUE(v->masked);
  // An ordinal past the host's count ends the list.
  v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "3,7,0"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(3));
  EXPECT_THAT(v->warnings.at(0), HasSubstr("only 4 device(s)"));
}

TEST(Visibility, CudaUuidPrefixAmbiguousEndsTheList) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 3);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_uuid("GPU-aaaa1111");
  b.Device(v1::ROW_CUDA_NVIDIA, 1).set_uuid("GPU-aaaa2222");
  b.Device(v1::ROW_CUDA_NVIDIA, 2).set_uuid("GPU-bbbb3333");
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "GPU-bb,GPU-aaaa,GPU-aaaa1"}}));
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(Hosts(*v), ElementsAre(2));
  EXPECT_THAT(v->warnings.at(0), HasSubstr("ambiguous prefix"));
  v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "GPU-aaaa2,GPU-bbbb,GPU-aaaa22"}}));
  EXPECT_TRUE(v->units.empty());  // GPU-aaaa22 is GPU 1 again: a repeat empties the list
  EXPECT_EQ(v->hidden, placement::Hidden::kMask);
}

TEST(Visibility, MigUuidSelectsThePartition) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  v1::Partition* p = b.Device(v1::ROW_CUDA_NVIDIA, 1).add_partitions();
  p->set_uuid("MIG-11112222-3333-4444-5555-666677778888");
  p->set_memory_total_bytes(10 * kGiB);
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "MIG-11112222"}}));
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->units.size(), 1u);
  EXPECT_EQ(v->units[0].device->host_index(), 1u);
  EXPECT_EQ(v->units[0].partition, p);
  v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "MIG-ffff"}}));
  EXPECT_TRUE(v->units.empty());
  EXPECT_THAT(v->warnings.at(0), HasSubstr("MIG instance this host's inventory does not list"));
}

TEST(Visibility, DifferentModelsWithoutPciBusIdOrderWarn) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  b.Device(v1::ROW_CUDA_NVIDIA, 1).set_device_id("2684");
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({}));
  EXPECT_THAT(v->warnings.at(0), HasSubstr("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}));
  EXPECT_TRUE(v->warnings.empty());
}

TEST(Visibility, RocmHipIndexesIntoRocrAndPastItIsAnError) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_AMD, 4);
  auto v = See(b, v1::ROW_CUDA_AMD, E({{"ROCR_VISIBLE_DEVICES", "1,2,3"}, {"HIP_VISIBLE_DEVICES", "2,0"}}));
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(Hosts(*v), ElementsAre(3, 1));
  v = See(b, v1::ROW_CUDA_AMD, E({{"ROCR_VISIBLE_DEVICES", "1,3"}, {"HIP_VISIBLE_DEVICES", "2"}}));
  ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("env.HIP_VISIBLE_DEVICES"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("ROCR_VISIBLE_DEVICES"));
  // Without HIP, CUDA_VISIBLE_DEVICES indexes into what ROCR left; masks never cross rows (P2).
  v = See(b, v1::ROW_CUDA_AMD, E({{"ROCR_VISIBLE_DEVICES", "2,3"}, {"CUDA_VISIBLE_DEVICES", "1"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(3));
  v = See(b, v1::ROW_CUDA_AMD, E({{"ZE_AFFINITY_MASK", "0"}, {"ASCEND_RT_VISIBLE_DEVICES", "1"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(0, 1, 2, 3));
}

TEST(Visibility, AscendStopsAtFirstInvalidAndRejectsDisorder) {
  InventoryBuilder b;
  b.Add(v1::ROW_NPU, 8);
  auto v = See(b, v1::ROW_NPU, E({{"ASCEND_RT_VISIBLE_DEVICES", "1, 2"}}));
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(Hosts(*v), ElementsAre(1));  // the space makes " 2" invalid: parsing stops
  for (const char* bad : {"3,1", "1,1", "1,9"}) {
    v = See(b, v1::ROW_NPU, E({{"ASCEND_RT_VISIBLE_DEVICES", bad}}));
    ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("env.ASCEND_RT_VISIBLE_DEVICES"));
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("accepted"));
  }
}

TEST(Visibility, MluCnVariableWins) {
  InventoryBuilder b;
  b.Add(v1::ROW_MLU, 4);
  auto v = See(b, v1::ROW_MLU, E({{"MLU_VISIBLE_DEVICES", "0,1"}, {"CN_VISIBLE_DEVICES", "3"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(3));
}

TEST(Visibility, NeuronCoresAreTheJobsDevices) {
  InventoryBuilder b;
  b.Add(v1::ROW_NEURON, 2);
  b.Device(v1::ROW_NEURON, 0).set_sub_device_count(2);
  b.Device(v1::ROW_NEURON, 1).set_sub_device_count(2);
  auto v = See(b, v1::ROW_NEURON, E({}));
  ASSERT_EQ(v->units.size(), 4u);
  v = See(b, v1::ROW_NEURON, E({{"NEURON_RT_VISIBLE_CORES", "2-3"}}));
  ASSERT_EQ(v->units.size(), 2u);
  EXPECT_EQ(v->units[0].device->host_index(), 1u);
  EXPECT_EQ(v->units[0].sub_device, 0);
  EXPECT_EQ(v->units[1].sub_device, 1);
  v = See(b, v1::ROW_NEURON, E({{"NEURON_RT_NUM_CORES", "3"}}));
  EXPECT_EQ(v->units.size(), 3u);
  for (const char* bad : {"3-1", "a", "1-", "0-9", "1,1"}) {
    v = See(b, v1::ROW_NEURON, E({{"NEURON_RT_VISIBLE_CORES", bad}}));
    ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("env.NEURON_RT_VISIBLE_CORES"));
  }
  v = See(b, v1::ROW_NEURON, E({{"NEURON_RT_NUM_CORES", "5"}}));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Visibility, XpuTilesAreRootDevicesInFlatMode) {
  InventoryBuilder b;
  b.Add(v1::ROW_XPU, 2);
  b.Device(v1::ROW_XPU, 0).set_sub_device_count(2);
  b.Device(v1::ROW_XPU, 1).set_sub_device_count(2);
  auto v = See(b, v1::ROW_XPU, E({}));
  EXPECT_EQ(v->units.size(), 4u);
  v = See(b, v1::ROW_XPU, E({{"ZE_AFFINITY_MASK", "3,0"}}));
  ASSERT_EQ(v->units.size(), 2u);
  EXPECT_EQ(v->units[0].device->host_index(), 1u);
  EXPECT_EQ(v->units[0].sub_device, 1);
  v = See(b, v1::ROW_XPU, E({{"ZE_FLAT_DEVICE_HIERARCHY", "COMPOSITE"}, {"ZE_AFFINITY_MASK", "1.1,0"}}));
  ASSERT_EQ(v->units.size(), 2u);
  EXPECT_EQ(v->units[0].sub_device, 1);
  EXPECT_EQ(v->units[1].sub_device, -1);
  for (const char* bad : {"x", "0.", "9", "0,0", "1.5"}) {
    v = See(b, v1::ROW_XPU, E({{"ZE_FLAT_DEVICE_HIERARCHY", "COMPOSITE"}, {"ZE_AFFINITY_MASK", bad}}));
    ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("env.ZE_AFFINITY_MASK"));
  }
  v = See(b, v1::ROW_XPU, E({{"ZE_AFFINITY_MASK", "0.1"}}));  // FLAT: tiles have no sub-devices
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Visibility, HabanaModulesAndTpuChipsPickByIdInListOrder) {
  InventoryBuilder b;
  b.Add(v1::ROW_HPU, 8);
  for (int i = 0; i < 8; ++i) (*b.Device(v1::ROW_HPU, i).mutable_attributes())["module_id"] = std::to_string(7 - i);
  auto v = See(b, v1::ROW_HPU, E({{"HABANA_VISIBLE_MODULES", "4,5"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(3, 2));
  v = See(b, v1::ROW_HPU, E({{"HABANA_VISIBLE_MODULES", "4,x"}}));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  v = See(b, v1::ROW_HPU, E({{"HABANA_VISIBLE_MODULES", "9"}}));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  b.Add(v1::ROW_TPU, 4);
  v = See(b, v1::ROW_TPU, E({{"TPU_VISIBLE_CHIPS", "2"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(2));
}

TEST(Visibility, JobDeviceNodesFilterBeforeMasks) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 4);
  v1::JobDevices job;
  job.add_device_nodes("/dev/nvidiactl");
  job.add_device_nodes("/dev/nvidia1");
  job.add_device_nodes("/dev/nvidia3");
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "1"}}), &job);
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(Hosts(*v), ElementsAre(3));  // the container's CUDA numbers host 1, 3 as 0, 1
  v1::JobDevices none;
  v = See(b, v1::ROW_CUDA_NVIDIA, E({}), &none);
  EXPECT_EQ(v->hidden, placement::Hidden::kJobDevices);
  EXPECT_THAT(v->hidden_reason, HasSubstr("not visible to the job"));
}

TEST(Visibility, UnusableHostDevicesAreNotEnumerated) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_usable(false);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_unusable_reason("GPU fell off the bus");
  auto v = See(b, v1::ROW_CUDA_NVIDIA, E({{"CUDA_VISIBLE_DEVICES", "0"}}));
  EXPECT_THAT(Hosts(*v), ElementsAre(1));
  EXPECT_THAT(v->explanation.at(0), HasSubstr("GPU fell off the bus"));
}

TEST(Visibility, MalformedMasksNeverCrash) {
  InventoryBuilder b;
  for (v1::Row r : {v1::ROW_CUDA_NVIDIA, v1::ROW_CUDA_AMD, v1::ROW_XPU, v1::ROW_NPU, v1::ROW_MLU, v1::ROW_MUSA,
                    v1::ROW_NEURON, v1::ROW_HPU, v1::ROW_TPU}) {
    b.Add(r, 2);
  }
  const std::vector<std::string> values = {"", ",", ",,", "-", "+", "0,", ",0", "1-0", "0.0.0", "GPU-", "MIG-",
                                           "99999999999999999999", "\xff", std::string(10000, '1'), "0,-0"};
  for (const char* var : {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                          "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES",
                          "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "HABANA_VISIBLE_MODULES", "TPU_VISIBLE_CHIPS"}) {
    for (const std::string& val : values) {
      placement::Env env;
      env[var] = val;
      for (const v1::Backend& be : b.Build().backends()) {
        auto v = ComputeVisibility(be, env, nullptr);
        if (!v.ok()) {
          EXPECT_THAT(std::string(v.status().message()), HasSubstr(std::string("env.") + var)) << var << "=" << val;
        }
      }
    }
  }
}

}  // namespace
}  // namespace devplace::testing
