// Rule P-DRA: the devices Kubernetes DRA allocated to the job (ResolveDeviceRequest.device_allocation)
// are the job's devices, numbered in the runtime's order; the explanation names each claim; a
// device that matches nothing is a warning (a hazard under strict).
#include "server/placement/allocation.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::placement {
namespace {

using ::devplace::testing::InventoryBuilder;
using ::devplace::testing::Req;
using ::devplace::testing::TestUuid;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

v1::AllocatedDevice Dev(const std::string& driver, const std::string& name,
                        std::vector<std::pair<std::string, std::string>> attributes, const std::string& claim = "gpu-claim",
                        const std::string& request = "gpu") {
  v1::AllocatedDevice d;
  d.set_claim(claim);
  d.set_request(request);
  d.set_driver(driver);
  d.set_pool("node-a");
  d.set_name(name);
  for (auto& [k, v] : attributes) (*d.mutable_attributes())[k] = v;
  return d;
}

v1::ResolveDeviceRequest WithAllocation(const Req& req, std::vector<v1::AllocatedDevice> devices,
                                        std::vector<std::string> problems = {}) {
  v1::ResolveDeviceRequest r = req.proto();
  v1::DeviceAllocation* a = r.mutable_device_allocation();
  a->set_source("/dra");
  for (auto& d : devices) *a->add_devices() = d;
  for (auto& p : problems) a->add_problems(p);
  return r;
}

std::vector<int> HostIndices(const v1::ResolveDeviceResponse& answer) {
  std::vector<int> out;
  for (const v1::PlacedDevice& p : answer.placed()) out.push_back(p.host_index());
  return out;
}

std::string Explained(const v1::ResolveDeviceResponse& answer) { return absl::StrJoin(answer.explanation(), "\n"); }

TEST(Allocation, TheClaimedGpuIsCudaZeroInTheJobsNumbering) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 4);
  auto answer = Resolve(inv, WithAllocation(Req::Train(), {Dev("gpu.nvidia.com", "gpu-2",
                                                                  {{"uuid", TestUuid(v1::ROW_CUDA_NVIDIA, 2)},
                                                                   {"index", "2"}, {"productName", "H100"}})}));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cuda:0");
  EXPECT_THAT(answer->devices(), ElementsAre("cuda:0"));
  EXPECT_THAT(HostIndices(*answer), ElementsAre(2));
  EXPECT_THAT(Explained(*answer),
              HasSubstr(absl::StrCat("P-DRA claim gpu-claim request gpu driver gpu.nvidia.com device gpu-2 (pool node-a) "
                                     "is cuda/nvidia host device 2 (0000:22:00.0), by uuid ",
                                     TestUuid(v1::ROW_CUDA_NVIDIA, 2))));
  EXPECT_THAT(Explained(*answer), HasSubstr("P-DRA cuda/nvidia: 1 of 4 usable device(s) allocated to the job: host "
                                            "device 2 (0000:22:00.0) [claim gpu-claim request gpu driver gpu.nvidia.com "
                                            "device gpu-2 (pool node-a)]"));
  EXPECT_THAT(answer->warnings(), IsEmpty());
}

TEST(Allocation, RuntimeOrderNotClaimOrderAndMasksIndexIntoTheAllocation) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 4);
  const std::vector<v1::AllocatedDevice> devices = {
      Dev("gpu.nvidia.com", "gpu-3", {{"uuid", TestUuid(v1::ROW_CUDA_NVIDIA, 3)}}, "b-claim"),
      Dev("gpu.nvidia.com", "gpu-1", {{"uuid", TestUuid(v1::ROW_CUDA_NVIDIA, 1)}}, "a-claim")};
  auto all = Resolve(inv, WithAllocation(Req::Infer("auto"), devices));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(all->devices(), ElementsAre("cuda:0", "cuda:1", "cpu"));
  EXPECT_THAT(HostIndices(*all), ElementsAre(1, 3));
  // CUDA_VISIBLE_DEVICES inside the container numbers the allocated GPUs, not the host's.
  auto masked = Resolve(inv, WithAllocation(Req::Train().Env("CUDA_VISIBLE_DEVICES", "1"), devices));
  ASSERT_TRUE(masked.ok()) << masked.status();
  EXPECT_EQ(masked->device(), "cuda:0");
  EXPECT_THAT(HostIndices(*masked), ElementsAre(3));
}

TEST(Allocation, EachDriversIdentityAttributes) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 2).Add(v1::ROW_CUDA_AMD, 2).Add(v1::ROW_XPU, 2).Add(v1::ROW_TPU, 2);
  inv.Device(v1::ROW_CUDA_NVIDIA, 1).set_minor(5);
  struct Case {
    v1::AllocatedDevice device;
    v1::Row row;
    std::string by;
  };
  const std::vector<Case> cases = {
      // NVML's bus id form (8-digit domain, upper case) in the Kubernetes attribute.
      {Dev("gpu.nvidia.com", "gpu-1", {{"resource.kubernetes.io/pciBusID", "00000000:21:00.0"}}), v1::ROW_CUDA_NVIDIA,
       "by resource.kubernetes.io/pciBusID 00000000:21:00.0"},
      {Dev("gpu.nvidia.com", "gpu-1", {{"gpu.nvidia.com/minor", "5"}}), v1::ROW_CUDA_NVIDIA, "by minor 5"},
      {Dev("gpu.amd.com", "gpu-1-129", {{"productName", "MI210"}}), v1::ROW_CUDA_AMD,
       "by its name's render node /dev/dri/renderD129"},
      {Dev("gpu.amd.com", "gpu-7-200", {{"resource.kubernetes.io/pciBusID", "0000:31:00.0"}}), v1::ROW_CUDA_AMD,
       "by resource.kubernetes.io/pciBusID 0000:31:00.0"},
      {Dev("gpu.intel.com", "0000-61-00-0-0x56a0", {{"model", "A770"}, {"family", "Arc"}}), v1::ROW_XPU,
       "by its name's PCI address 0000:61:00.0"},
      {Dev("tpu.google.com", "accel1", {{"index", "1"}, {"tpuGen", "v5e"}}), v1::ROW_TPU, "by index 1 (chip id)"},
  };
  for (const Case& c : cases) {
    auto matched = MatchAllocation(inv, [&] {
      v1::DeviceAllocation a;
      *a.add_devices() = c.device;
      return a;
    }());
    ASSERT_TRUE(matched.ok()) << matched.status();
    ASSERT_EQ(matched->devices.size(), 1u) << c.device.ShortDebugString() << "\n" << absl::StrJoin(matched->unmatched, "\n");
    EXPECT_EQ(matched->devices.begin()->first, &inv.Device(c.row, 1)) << c.by;
    EXPECT_THAT(matched->explanation.front(), HasSubstr(c.by));
    EXPECT_THAT(matched->unmatched, IsEmpty());
  }
}

// The matching is an index lookup now; what it finds is what a pass over every device found: a UUID
// in any case names a device or one of its MIG instances, an identity that names two devices is
// passed over for the next one, and another driver's device is looked for in every accelerator row.
TEST(Allocation, UuidsOfPartitionsInAnyCaseAndAnIdentityNamingTwoDevicesIsPassedOver) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 3).Add(v1::ROW_XPU, 1);
  inv.Device(v1::ROW_CUDA_NVIDIA, 0).add_partitions()->set_uuid("MIG-0a1b2c3d-0000-0000-0000-000000000001");
  inv.Device(v1::ROW_CUDA_NVIDIA, 0).add_partitions()->set_uuid("GPU-SHARED");
  inv.Device(v1::ROW_CUDA_NVIDIA, 1).set_uuid("gpu-shared");
  inv.Device(v1::ROW_CUDA_NVIDIA, 0).set_minor(3);
  inv.Device(v1::ROW_CUDA_NVIDIA, 1).set_minor(5);
  inv.Device(v1::ROW_CUDA_NVIDIA, 2).set_minor(5);
  inv.Device(v1::ROW_XPU, 0).set_uuid("XPU-ELSEWHERE");
  struct Case {
    v1::AllocatedDevice device;
    const v1::Device* want;  // null: none
    std::string by;
  };
  const std::vector<Case> cases = {
      {Dev("gpu.nvidia.com", "mig", {{"uuid", "mig-0A1B2C3D-0000-0000-0000-000000000001"}}),
       &inv.Device(v1::ROW_CUDA_NVIDIA, 0), "by uuid mig-0A1B2C3D"},
      // The UUID names devices 0 (a partition) and 1: passed over for the minor, which names device 1 alone.
      {Dev("gpu.nvidia.com", "shared", {{"uuid", "Gpu-Shared"}, {"minor", "3"}}), &inv.Device(v1::ROW_CUDA_NVIDIA, 0),
       "by minor 3"},
      // Minor 5 names two devices and nothing else identifies it: unmatched.
      {Dev("gpu.nvidia.com", "twice", {{"minor", "5"}}), nullptr, "no single inventory device has minor 5"},
      // Another driver: every accelerator row (xpu here), by UUID only.
      {Dev("example.com/accel", "x", {{"uuid", "xpu-elsewhere"}, {"minor", "3"}}), &inv.Device(v1::ROW_XPU, 0),
       "by uuid xpu-elsewhere"},
  };
  for (const Case& c : cases) {
    v1::DeviceAllocation a;
    *a.add_devices() = c.device;
    auto matched = MatchAllocation(inv, a);
    ASSERT_TRUE(matched.ok()) << matched.status();
    const std::string all = absl::StrJoin(matched->explanation, "\n") + absl::StrJoin(matched->unmatched, "\n");
    if (c.want == nullptr) {
      EXPECT_THAT(matched->devices, IsEmpty()) << c.device.name();
    } else {
      ASSERT_EQ(matched->devices.size(), 1u) << c.device.name() << ": " << all;
      EXPECT_EQ(matched->devices.begin()->first, c.want) << c.device.name();
    }
    EXPECT_THAT(all, HasSubstr(c.by)) << c.device.name();
  }
}

TEST(Allocation, OtherRowsAreHiddenWithoutAHazard) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 2).Add(v1::ROW_XPU, 2);
  // Accelerate picks cuda before xpu when both are available (S10); the claim holds an xpu, and the
  // GPUs it does not hold are no hazard under strict.
  auto answer = Resolve(inv, WithAllocation(Req::Train(v1::CONVENTION_ACCELERATE).Strict(),
                                            {Dev("gpu.intel.com", "0000-61-00-0-0x56a0", {}, "xpu-claim", "xpu")}));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "xpu");
  EXPECT_THAT(HostIndices(*answer), ElementsAre(1));
  EXPECT_THAT(answer->warnings(), Contains(HasSubstr("NVIDIA GPU present but not allocated to the job")));
}

TEST(Allocation, AnUnmatchedDeviceIsWarnedAndAnErrorUnderStrict) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 2);
  const std::vector<v1::AllocatedDevice> devices = {
      Dev("gpu.nvidia.com", "gpu-1", {{"uuid", TestUuid(v1::ROW_CUDA_NVIDIA, 1)}}),
      Dev("gpu.nvidia.com", "gpu-7", {{"uuid", "GPU-deadbeef-0000-4000-8000-000000000007"}}, "gpu-claim", "spare")};
  auto answer = Resolve(inv, WithAllocation(Req::Train(), devices));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cuda:0");
  EXPECT_THAT(HostIndices(*answer), ElementsAre(1));
  EXPECT_THAT(answer->warnings(),
              ElementsAre("DRA claim gpu-claim request spare driver gpu.nvidia.com device gpu-7 (pool node-a) in /dra "
                          "matches no device of this host's inventory: no single inventory device has uuid "
                          "GPU-deadbeef-0000-4000-8000-000000000007; the answer cannot account for it (P-DRA)"));
  auto strict = Resolve(inv, WithAllocation(Req::Train().Strict(), devices));
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(strict.status().message(), HasSubstr("strict: DRA claim gpu-claim request spare driver gpu.nvidia.com device gpu-7"));
  EXPECT_THAT(strict.status().message(), HasSubstr("(answer without strict: cuda:0)"));
}

TEST(Allocation, NothingMatchedNarrowsNothingAndAnotherDriverIsOnlyExplained) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 2);
  auto answer = Resolve(inv, WithAllocation(Req::Infer("auto").Strict(),
                                            {Dev("dra.net", "eth1", {{"dra.net/pciAddress", "0000:c1:00.0"}}, "nic")}));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_THAT(answer->devices(), ElementsAre("cuda:0", "cuda:1", "cpu"));
  EXPECT_THAT(Explained(*answer),
              HasSubstr("P-DRA claim nic request gpu driver dra.net device eth1 (pool node-a) is not an accelerator of "
                        "this host's inventory (no single inventory device has pciAddress 0000:c1:00.0): ignored"));
  EXPECT_THAT(Explained(*answer), HasSubstr("P-DRA no allocated device in /dra matched the inventory"));
  EXPECT_THAT(answer->warnings(), IsEmpty());
  // Another driver's device is used when its PCI address is an accelerator's.
  auto gaudi_like = Resolve(inv, WithAllocation(Req::Train(), {Dev("example.com", "x", {{"resource.kubernetes.io/pciBusID", "0000:21:00.0"}})}));
  ASSERT_TRUE(gaudi_like.ok()) << gaudi_like.status();
  EXPECT_THAT(HostIndices(*gaudi_like), ElementsAre(1));
}

TEST(Allocation, FilesTheClientCouldNotUseAreWarned) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 1);
  auto answer = Resolve(inv, WithAllocation(Req::Train(), {}, {"resourceclaims/c/r/gpu.nvidia.com-metadata.json: empty"}));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_THAT(answer->warnings(),
              ElementsAre("DRA device metadata in /dra could not be used: resourceclaims/c/r/gpu.nvidia.com-metadata.json: "
                          "empty; the job's allocated devices may be incomplete (P-DRA)"));
}

TEST(Allocation, BoundsAreInvalidArgumentNamingTheField) {
  InventoryBuilder inv;
  inv.Add(v1::ROW_CUDA_NVIDIA, 1);
  std::vector<v1::AllocatedDevice> many(1025, Dev("gpu.nvidia.com", "gpu-0", {}));
  auto too_many = Resolve(inv, WithAllocation(Req::Train(), many));
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_many.status().message(), "device_allocation.devices: 1025 entries; at most 1024");
  std::vector<std::pair<std::string, std::string>> attributes;
  for (int i = 0; i < 65; ++i) attributes.push_back({absl::StrCat("a", i), "1"});
  auto wide = Resolve(inv, WithAllocation(Req::Train(), {Dev("gpu.nvidia.com", "gpu-0", attributes)}));
  EXPECT_EQ(wide.status().message(), "device_allocation.devices[0].attributes: 65 entries; at most 64");
  auto no_driver = Resolve(inv, WithAllocation(Req::Train(), {Dev("", "gpu-0", {})}));
  EXPECT_EQ(no_driver.status().message(),
            "device_allocation.devices[0].driver: empty; required (1 to 256 bytes, as the metadata file gives it)");
  auto long_value = Resolve(inv, WithAllocation(Req::Train(), {Dev("gpu.nvidia.com", "gpu-0", {{"uuid", std::string(300, 'x')}})}));
  EXPECT_EQ(long_value.status().message(), "device_allocation.devices[0].attributes.uuid: 300 bytes; at most 256");
}

}  // namespace
}  // namespace devplace::placement
