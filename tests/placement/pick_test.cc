// Rule P-PICK: a pick hands a job the least used devices of its row that nobody has leased, never
// one outside its masks, device nodes or DRA allocation, in a variable the resolver then reads as
// exactly those devices.
#include "server/placement/pick.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/pick_test_util.h"
#include "tests/placement/request_builder.h"

namespace devplace::placement {
namespace {

using ::devplace::testing::DraJob;
using ::devplace::testing::Explained;
using ::devplace::testing::InventoryBuilder;
using ::devplace::testing::kGiB;
using ::devplace::testing::Req;
using ::devplace::testing::TestUuid;
using ::devplace::testing::Use;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Every device idle (NVML read, no process, 1 GiB the driver holds).
InventoryBuilder Idle(v1::Row row, int n) {
  InventoryBuilder inv;
  inv.Add(row, n);
  for (int i = 0; i < n; ++i) Use(inv, row, i, 0, kGiB);
  return inv;
}

v1::PickDevicesRequest PickOf(int count, const v1::ResolveDeviceRequest& job = Req::Train()) {
  v1::PickDevicesRequest r;
  r.set_count(count);
  *r.mutable_job() = job;
  return r;
}

std::vector<int> Hosts(const v1::PickDevicesResponse& r) {
  std::vector<int> out;
  for (const v1::PlacedDevice& p : r.placed()) out.push_back(p.host_index());
  return out;
}

// What the resolver answers for the job once the pick's environment is applied.
v1::ResolveDeviceResponse ResolveWith(const v1::Inventory& inv, v1::ResolveDeviceRequest job,
                                      const v1::PickDevicesResponse& pick) {
  for (const std::string& v : pick.unset()) job.mutable_env()->erase(v);
  for (const auto& [k, v] : pick.env()) (*job.mutable_env())[k] = v;
  absl::StatusOr<v1::ResolveDeviceResponse> answer = Resolve(inv, job);
  EXPECT_TRUE(answer.ok()) << answer.status();
  return answer.ok() ? *answer : v1::ResolveDeviceResponse();
}

TEST(Pick, TheTwoLeastUsedIdleGpusByUuidAndTheJobSeesExactlyThem) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 8);
  Use(inv, v1::ROW_CUDA_NVIDIA, 0, 2, 60 * kGiB);  // busy cards
  Use(inv, v1::ROW_CUDA_NVIDIA, 1, 1, 30 * kGiB);
  Use(inv, v1::ROW_CUDA_NVIDIA, 2, 0, 5 * kGiB);   // idle, but more memory held than 4 and 6
  Use(inv, v1::ROW_CUDA_NVIDIA, 3, 1, 2 * kGiB);
  Use(inv, v1::ROW_CUDA_NVIDIA, 5, 0, 3 * kGiB);
  Use(inv, v1::ROW_CUDA_NVIDIA, 7, 0, 4 * kGiB);
  const PickOutcome out = Pick(inv, PickOf(2), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(4, 6));  // 1 GiB each, in the job's order
  EXPECT_EQ(out.response.env().at("CUDA_VISIBLE_DEVICES"),
            TestUuid(v1::ROW_CUDA_NVIDIA, 4) + "," + TestUuid(v1::ROW_CUDA_NVIDIA, 6));
  EXPECT_FALSE(out.response.env().contains("CUDA_DEVICE_ORDER"));
  EXPECT_THAT(out.response.devices(), ElementsAre("cuda:0", "cuda:1"));
  EXPECT_EQ(out.response.device(), "cuda:0");
  EXPECT_EQ(out.response.backend(), v1::ROW_CUDA_NVIDIA);
  ASSERT_EQ(out.response.lease().devices_size(), 2);
  EXPECT_EQ(out.response.lease().devices(1).pci_bus_id(), inv.Device(v1::ROW_CUDA_NVIDIA, 6).pci_bus_id());
  const std::string why = Explained(out.response);
  EXPECT_THAT(why, HasSubstr("host device 0 (0000:20:00.0): not picked: in use (2 processes, 60.0 GiB used"));
  EXPECT_THAT(why, HasSubstr("host device 4 (0000:24:00.0): picked (no process, 1.0 GiB used, 79.0 GiB free"));
  EXPECT_THAT(why, HasSubstr("host device 2 (0000:22:00.0): not picked: 2 less used device(s) came first"));
  // The resolver, in the job's new environment, answers the first picked card.
  const v1::ResolveDeviceResponse then = ResolveWith(inv, Req::Train(), out.response);
  EXPECT_EQ(then.device(), "cuda:0");
  EXPECT_EQ(then.placed(0).host_index(), 4);
}

TEST(Pick, LeasedDevicesAreSkippedAndTooFewFreeIsAClearRefusal) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 2);
  std::vector<LeasedUnit> leased = {{v1::ROW_CUDA_NVIDIA, "0000:20:00.0", -1, "", "pid 4242's lease"}};
  PickOutcome out = Pick(inv, PickOf(1), leased);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(1));
  EXPECT_THAT(Explained(out.response), HasSubstr("host device 0 (0000:20:00.0): not picked: leased (pid 4242's lease)"));

  leased.push_back({v1::ROW_CUDA_NVIDIA, "0000:21:00.0", -1, "", "a TTL lease"});
  out = Pick(inv, PickOf(1), leased);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(out.no_free_device);
  EXPECT_THAT(out.status.message(), HasSubstr("1 free cuda/nvidia device(s) wanted, 0 free for this job now (2 it may use)"));
  EXPECT_THAT(out.status.message(), HasSubstr("host device 1 (0000:21:00.0): not picked: leased (a TTL lease)"));
  EXPECT_THAT(out.status.message(), HasSubstr("; retry later or wait for one (devplace pick --wait=D ... or devplace run --wait=D -- CMD, "
                                              "Python wait=S, wait_ms), ask for fewer"));
  EXPECT_THAT(out.status.message(), Not(HasSubstr("allow sharing")));  // nothing here is in use

  // One free of 2, 2 wanted: the free one is named free, not picked (nothing is leased).
  leased.pop_back();
  out = Pick(inv, PickOf(2), leased);
  EXPECT_TRUE(out.no_free_device);
  EXPECT_THAT(out.status.message(), HasSubstr("host device 1 (0000:21:00.0): free (no process"));
  // That free one is what a waiting pick keeps free from younger ones (free_units); a younger pick
  // it is set aside for is told why.
  ASSERT_EQ(out.free_units.size(), 1u);
  EXPECT_EQ(out.free_units[0].pci_bus_id, "0000:21:00.0");
  LeasedUnit kept = out.free_units[0];
  kept.held_back = true;
  kept.holder = "it waits for 2 device(s)";
  out = Pick(inv, PickOf(1), {leased[0], kept});
  EXPECT_TRUE(out.no_free_device);
  EXPECT_TRUE(out.free_units.empty());
  EXPECT_THAT(out.status.message(), HasSubstr("host device 1 (0000:21:00.0): not picked: kept free for an older "
                                              "waiting pick (it waits for 2 device(s))"));

  // More than the job may ever use: refused at once, never waited for (no_free_device is false).
  out = Pick(inv, PickOf(3), {});
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(out.no_free_device);
  EXPECT_THAT(out.status.message(), HasSubstr("3 cuda/nvidia device(s) wanted, but the job may use only 2"));
  EXPECT_THAT(out.status.message(), HasSubstr("ask for at most 2"));
}

TEST(Pick, NeverOutsideTheJobsMaskDeviceNodesOrAllocation) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 4);
  Use(inv, v1::ROW_CUDA_NVIDIA, 1, 1, 40 * kGiB);
  // CUDA_VISIBLE_DEVICES=1,3 (a Slurm allocation without device confinement sets it so): 0 and 2
  // are idle but not the job's.
  PickOutcome out = Pick(inv, PickOf(1, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1,3")), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(3));
  // Both of the mask wanted: the busy one is not handed out, even with 0 and 2 idle.
  out = Pick(inv, PickOf(2, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1,3")), {});
  EXPECT_TRUE(out.no_free_device);
  EXPECT_THAT(out.status.message(), HasSubstr("(2 it may use)"));
  // A container (or Slurm's device cgroup) with /dev/nvidia2 only.
  out = Pick(inv, PickOf(1, Req::Train().JobNodes({"/dev/nvidiactl", "/dev/nvidia2"})), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(2));
  // Kubernetes DRA allocated host device 1.
  const v1::ResolveDeviceRequest dra = DraJob(1);
  out = Pick(inv, PickOf(1, dra), {});
  EXPECT_TRUE(out.no_free_device) << out.status;  // its one device is in use
  v1::PickDevicesRequest shared = PickOf(1, dra);
  shared.set_allow_shared(true);
  out = Pick(inv, shared, {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(1));
}

TEST(Pick, BusyMinFreeAndSharing) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 3);
  Use(inv, v1::ROW_CUDA_NVIDIA, 0, 1, 10 * kGiB);
  inv.Device(v1::ROW_CUDA_NVIDIA, 0).mutable_usage()->set_compute_mode(v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS);
  inv.Device(v1::ROW_CUDA_NVIDIA, 0).mutable_usage()->set_busy(true);
  Use(inv, v1::ROW_CUDA_NVIDIA, 1, 1, 70 * kGiB);
  Use(inv, v1::ROW_CUDA_NVIDIA, 2, 3, 20 * kGiB);
  v1::PickDevicesRequest r = PickOf(1);
  r.set_allow_shared(true);
  PickOutcome out = Pick(inv, r, {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(1));  // fewest processes first; 0 is exclusive and taken
  EXPECT_THAT(Explained(out.response), HasSubstr("host device 0 (0000:20:00.0): not picked: busy (1 process, "
                                                 "exclusive-process compute mode, taken"));
  r.set_min_free_bytes(40 * kGiB);
  out = Pick(inv, r, {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(2));
  EXPECT_THAT(Explained(out.response), HasSubstr("not picked: 10.0 GiB free, less than --min_free (min_free_bytes) 40.0 GiB"));
  // Without sharing nothing is free.
  r.set_allow_shared(false);
  out = Pick(inv, r, {});
  EXPECT_TRUE(out.no_free_device);
  // More free memory than any device has: it may wait, but no unit is free for it, so a waiting
  // pick of it keeps nothing free from younger ones (free_units is empty).
  r.set_allow_shared(true);
  r.set_min_free_bytes(100 * kGiB);
  out = Pick(inv, r, {});
  EXPECT_TRUE(out.no_free_device);
  EXPECT_TRUE(out.free_units.empty());
  r.set_min_free_bytes(0);
  r.set_count(3);
  out = Pick(inv, r, {});  // 1 and 2 are free for it, 0 is busy
  EXPECT_TRUE(out.no_free_device);
  EXPECT_EQ(out.free_units.size(), 2u);
}

TEST(Pick, IndicesInPciOrderWhenAUuidIsUnknownRelativeToTheJobsOwnView) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 4);
  for (int i = 0; i < 4; ++i) inv.Device(v1::ROW_CUDA_NVIDIA, i).clear_uuid();
  Use(inv, v1::ROW_CUDA_NVIDIA, 2, 1, kGiB);
  // The job's container has GPUs 1-3 mounted: CUDA numbers them 0-2 there.
  const v1::ResolveDeviceRequest job =
      Req::Train().JobNodes({"/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}).Env("CUDA_VISIBLE_DEVICES", "0,1");
  const PickOutcome out = Pick(inv, PickOf(1, job), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(1));
  EXPECT_EQ(out.response.env().at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(out.response.env().at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  EXPECT_EQ(ResolveWith(inv, job, out.response).placed(0).host_index(), 1);
}

TEST(Pick, AmdAscendAndMluUseTheirOwnVariables) {
  InventoryBuilder amd = Idle(v1::ROW_CUDA_AMD, 3);
  Use(amd, v1::ROW_CUDA_AMD, 0, 1, kGiB);
  const v1::ResolveDeviceRequest hip = Req::Train().Env("HIP_VISIBLE_DEVICES", "0,2");
  PickOutcome out = Pick(amd, PickOf(1, hip), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(2));
  EXPECT_EQ(out.response.env().at("ROCR_VISIBLE_DEVICES"), "2");
  EXPECT_THAT(out.response.unset(), ElementsAre("HIP_VISIBLE_DEVICES"));
  EXPECT_EQ(ResolveWith(amd, hip, out.response).placed(0).host_index(), 2);

  InventoryBuilder npu = Idle(v1::ROW_NPU, 4);
  Use(npu, v1::ROW_NPU, 0, 1, kGiB);
  Use(npu, v1::ROW_NPU, 1, 1, kGiB);
  out = Pick(npu, PickOf(2), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.response.env().at("ASCEND_RT_VISIBLE_DEVICES"), "2,3");
  EXPECT_THAT(out.response.devices(), ElementsAre("npu:0", "npu:1"));

  InventoryBuilder mlu = Idle(v1::ROW_MLU, 2);
  out = Pick(mlu, PickOf(1, Req::Train().Env("CN_VISIBLE_DEVICES", "1")), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(Hosts(out.response), ElementsAre(1));
  EXPECT_EQ(out.response.env().at("MLU_VISIBLE_DEVICES"), "1");
  EXPECT_THAT(out.response.unset(), ElementsAre("CN_VISIBLE_DEVICES"));
}

TEST(Pick, MigInstancesAreUnitsForOneDevice) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 2);
  v1::Device& gpu = inv.Device(v1::ROW_CUDA_NVIDIA, 0);
  (*gpu.mutable_attributes())["mig_mode"] = "enabled";
  for (int k = 0; k < 2; ++k) {
    v1::Partition& p = *gpu.add_partitions();
    p.set_uuid("MIG-0000000" + std::to_string(k));
    p.set_gpu_instance_id(k + 1);
    p.set_compute_instance_id(0);
    p.set_memory_total_bytes(40 * kGiB);
    p.set_memory_free_bytes(40 * kGiB);
    p.mutable_usage()->set_source("nvml");
    p.mutable_usage()->set_processes_known(true);
  }
  gpu.mutable_partitions(0)->mutable_usage()->set_process_count(1);
  Use(inv, v1::ROW_CUDA_NVIDIA, 1, 1, kGiB);  // the GPU without MIG is in use
  PickOutcome out = Pick(inv, PickOf(1), {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.response.env().at("CUDA_VISIBLE_DEVICES"), "MIG-00000001");
  EXPECT_EQ(out.response.placed(0).partition_uuid(), "MIG-00000001");
  EXPECT_EQ(out.response.lease().devices(0).partition_uuid(), "MIG-00000001");
  // A lease on the whole GPU holds its instances.
  out = Pick(inv, PickOf(1), {{v1::ROW_CUDA_NVIDIA, gpu.pci_bus_id(), -1, "", "x"}});
  EXPECT_TRUE(out.no_free_device);
  // Two devices: CUDA enumerates one MIG instance per process, so instances do not count.
  v1::PickDevicesRequest two = PickOf(2);
  two.set_allow_shared(true);
  out = Pick(inv, two, {});
  EXPECT_TRUE(out.no_free_device);
  EXPECT_THAT(out.status.message(), HasSubstr("a MIG instance, and a CUDA process sees only one"));
}

TEST(Pick, RequestBoundsAndTheRowAreChecked) {
  InventoryBuilder inv = Idle(v1::ROW_CUDA_NVIDIA, 1);
  v1::PickDevicesRequest r = PickOf(65);
  EXPECT_THAT(Pick(inv, r, {}).status.message(), HasSubstr("count: 65 is out of range; accepted: 0 (= 1) to 64"));
  r = PickOf(1);
  r.set_holder(v1::LEASE_HOLDER_PROCESS);
  r.set_ttl_ms(5000);
  EXPECT_EQ(Pick(inv, r, {}).status.code(), absl::StatusCode::kInvalidArgument);
  r.set_holder(v1::LEASE_HOLDER_TTL);
  r.set_ttl_ms(10);
  EXPECT_THAT(Pick(inv, r, {}).status.message(), HasSubstr("ttl_ms: 10 is out of range"));
  r.set_ttl_ms(0);
  r.set_wait_ms(3'600'001);
  EXPECT_THAT(Pick(inv, r, {}).status.message(), HasSubstr("wait_ms: 3600001 is out of range"));
  // A job whose answer is cpu has nothing to pick; a row the host lacks neither.
  InventoryBuilder cpu_only;
  const PickOutcome none = Pick(cpu_only, PickOf(1), {});
  EXPECT_EQ(none.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(none.no_free_device);
  EXPECT_THAT(none.status.message(), HasSubstr("the job's device is cpu"));
  r = PickOf(1);
  r.set_row(v1::ROW_NPU);
  EXPECT_THAT(Pick(inv, r, {}).status.message(), HasSubstr("this host has no npu hardware"));
  // The job's own errors come back as ResolveDevice gives them.
  EXPECT_EQ(Pick(inv, PickOf(1, Req::Train().Env("CUDA_DEVICE_ORDER", "BOGUS")), {}).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Pick, OverlapsWholeDevicesAndTheirParts) {
  const LeasedUnit whole{v1::ROW_CUDA_NVIDIA, "0000:07:00.0", -1, "", ""};
  const LeasedUnit mig_a{v1::ROW_CUDA_NVIDIA, "0000:07:00.0", -1, "MIG-a", ""};
  const LeasedUnit mig_b{v1::ROW_CUDA_NVIDIA, "0000:07:00.0", -1, "MIG-b", ""};
  const LeasedUnit other{v1::ROW_CUDA_NVIDIA, "0000:08:00.0", -1, "", ""};
  EXPECT_TRUE(Overlaps(whole, mig_a));
  EXPECT_TRUE(Overlaps(mig_a, mig_a));
  EXPECT_FALSE(Overlaps(mig_a, mig_b));
  EXPECT_FALSE(Overlaps(whole, other));
}

}  // namespace
}  // namespace devplace::placement
