// End to end without a daemon: probe a fixture host tree, then resolve against that inventory.
// This pins the contract between the probers and the resolver (device nodes, usability, host
// order, sub-devices) on realistic trees, including the tricky cases of DETECTION.md section 12.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/pick.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<v1::ResolveDeviceResponse> On(const std::string& host, const v1::ResolveDeviceRequest& req) {
  return placement::Resolve(ProbeHost(host), req);
}

std::vector<std::string> Buses(const v1::ResolveDeviceResponse& r) {
  std::vector<std::string> out;
  for (const v1::PlacedDevice& p : r.placed()) out.push_back(p.pci_bus_id());
  return out;
}

std::string Warnings(const v1::ResolveDeviceResponse& r) { return absl::StrJoin(r.warnings(), "\n"); }

TEST(FixtureResolve, NvidiaTrainingUsesEveryGpuInBusOrder) {
  auto r = On("nvidia-2x-h100", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cuda:1"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:18:00.0", "0000:9a:00.0"));
  EXPECT_EQ(r->placed(0).name(), "NVIDIA H100 80GB HBM3");
}

// H-HEALTH on the probed tree: 9a:00.0 has a fatal AER error (FAULT) and CUDA still enumerates it,
// so training (every GPU) uses it, with a warning naming the mask of the other two; strict refuses.
TEST(FixtureResolve, AnAnswerOnTheFaultGpuWarnsAndStrictRefuses) {
  auto r = On("nvidia-3x-h100-health", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Buses(*r), ElementsAre("0000:18:00.0", "0000:3b:00.0", "0000:9a:00.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("H-HEALTH cuda:2 is host device 2 (0000:9a:00.0), whose health is FAULT "
                                      "(aer_dev_fatal 1: uncorrectable fatal PCIe errors since boot"));
  EXPECT_THAT(Warnings(*r), HasSubstr("leave it out with CUDA_VISIBLE_DEVICES=GPU-00000000-0000-4000-8000-000000000001,"
                                      "GPU-00000000-0000-4000-8000-000000000003"));
  EXPECT_THAT(Warnings(*r), Not(HasSubstr("cuda:1 is host device 1")));  // DEGRADED: no warning
  auto strict = On("nvidia-3x-h100-health", Req::Train().Strict());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(strict.status().message(), HasSubstr("strict: H-HEALTH cuda:2"));
}

// The same on amd-2x-mi210-ras: HIP still enumerates the MI210 whose amdgpu RAS counters count
// uncorrectable UMC errors (63:00.0, HIP device 0), so training uses it with a warning; strict refuses.
TEST(FixtureResolve, AnAnswerOnTheMi210WithUncorrectableUmcErrorsWarnsAndStrictRefuses) {
  auto r = On("amd-2x-mi210-ras", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Buses(*r), ElementsAre("0000:63:00.0", "0000:83:00.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("H-HEALTH cuda:0 is host device 0 (0000:63:00.0), whose health is FAULT "
                                      "(ras/umc_err_count ue 2: uncorrectable errors in the GPU's UMC block"));
  EXPECT_THAT(Warnings(*r), HasSubstr("leave it out with ROCR_VISIBLE_DEVICES listing the job's other devices"));
  auto strict = On("amd-2x-mi210-ras", Req::Train().Strict());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(strict.status().message(), HasSubstr("strict: H-HEALTH cuda:0"));
  // A job that names only the healthy MI210 is answered without a warning.
  r = On("amd-2x-mi210-ras", Req::Train().Env("ROCR_VISIBLE_DEVICES", "GPU-0de0b6b3a7640002"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0"));
  EXPECT_THAT(Warnings(*r), Not(HasSubstr("H-HEALTH")));
}

TEST(FixtureResolve, ContainerNumbersOnlyTheGpusItCanOpen) {
  auto r = On("nvidia-container", Req::Train().Rank(1, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:1");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:ab:00.0"));
  r = On("nvidia-container", Req::Train().JobNodes({"/dev/nvidiactl", "/dev/nvidia3"}));
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:ab:00.0"));
}

TEST(FixtureResolve, GpuThatFellOffTheBusIsSkippedAndExplained) {
  auto r = On("nvidia-fell-off-bus", Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cpu"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:18:00.0"));
  EXPECT_THAT(absl::StrJoin(r->explanation(), "\n"), HasSubstr("fell off the bus"));
  EXPECT_EQ(On("nvidia-fell-off-bus", Req::Infer("cuda:1")).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FixtureResolve, DriverNotLoadedFallsBackToCpuWithTheFix) {
  auto r = On("nvidia-driver-not-loaded", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_THAT(Warnings(*r), HasSubstr("load the nvidia kernel module"));
  auto strict = On("nvidia-driver-not-loaded", Req::Train().Strict());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FixtureResolve, MixedHostPicksTheNvidiaDgpuOverTheAmdIgpu) {
  auto r = On("mixed-nvidia-amd-igpu", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_NVIDIA);
  EXPECT_THAT(Buses(*r), ElementsAre("0000:01:00.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("assuming a CUDA build"));
  r = On("mixed-nvidia-amd-igpu", Req::Train().Runtime({"rocm"}));
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_AMD);
  EXPECT_THAT(Buses(*r), ElementsAre("0000:0e:00.0"));
}

TEST(FixtureResolve, UnsupportedIntelIgpuKeepsItsIndexAndIsWarnedAbout) {
  // Level Zero enumerates the UHD 770 too, so it is xpu:0 for the job (DETECTION.md 12.3).
  auto r = On("xpu-2x-arc", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "xpu:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:00:02.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("PyTorch does not support"));
  EXPECT_THAT(Warnings(*r), HasSubstr("ZE_AFFINITY_MASK"));
  EXPECT_EQ(On("xpu-2x-arc", Req::Train().Strict()).status().code(), absl::StatusCode::kFailedPrecondition);
  r = On("xpu-2x-arc", Req::Infer("auto").Env("ZE_AFFINITY_MASK", "1,2"));
  EXPECT_THAT(r->devices(), ElementsAre("xpu:0", "xpu:1", "cpu"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:03:00.0", "0000:07:00.0"));
  EXPECT_EQ(r->max_memory().at("0"), 17095983104u);  // total: free memory is unknown for Intel GPUs
}

// P-PICK step 2 takes P4's usable devices only: the job sees the UHD 770 (it is xpu:0 in Level
// Zero's numbering) but a lease on it would hand the job cpu, so a pick leases the Arc cards, and
// a --count above them is refused at once.
TEST(FixtureResolve, APickOnAnIntelHostNeverLeasesTheUnsupportedIgpu) {
  const v1::Inventory inv = ProbeHost("xpu-2x-arc");
  v1::PickDevicesRequest pick;
  pick.set_count(1);
  *pick.mutable_job() = Req::Train();
  placement::PickOutcome out = placement::Pick(inv, pick, {});
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.response.placed_size(), 1);
  EXPECT_EQ(out.response.placed(0).pci_bus_id(), "0000:03:00.0");
  EXPECT_EQ(out.response.device(), "xpu:0");
  EXPECT_EQ(out.response.env().at("ZE_AFFINITY_MASK"), "1");
  EXPECT_THAT(absl::StrJoin(out.response.explanation(), "\n"), HasSubstr("0000:00:02.0): not picked: not usable"));
  pick.set_count(3);
  out = placement::Pick(inv, pick, {});
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status.message(), HasSubstr("the job may use only 2"));
  EXPECT_FALSE(out.no_free_device);  // no wait can help
}

TEST(FixtureResolve, MemoryUnknownLeavesMaxMemoryEmpty) {
  auto r = On("nvidia-2x-h100", Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_TRUE(r->max_memory().empty());
  EXPECT_THAT(Warnings(*r), HasSubstr("max_memory left empty"));
}

// nvidia-3x-h100-health without NVML: no memory is known, and 9a:00.0 is FAULT. The warning that
// leaves max_memory empty names every device of the answer: the FAULT one apart.
TEST(FixtureResolve, MemoryUnknownWarningNamesEveryDeviceOfTheAnswer) {
  auto r = On("nvidia-3x-h100-health", Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->max_memory().empty());
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cuda:1", "cuda:2", "cpu"));
  EXPECT_THAT(Warnings(*r), HasSubstr("max_memory left empty: the memory of cuda:0, cuda:1 is unknown to devplace"));
  EXPECT_THAT(Warnings(*r), HasSubstr("; cuda:2 (health FAULT, H-HEALTH) would be measured and used too: give it "
                                      "max_memory 0, or leave it out of the job's mask"));
}

TEST(FixtureResolve, MigEnabledGpuIsWarnedAbout) {
  // From sysfs alone (no NVML): the capability files list the instances, without UUIDs.
  auto r = On("nvidia-mig", Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:07:00.0"));  // the MIG GPU's instance, not 87:00.0
  EXPECT_THAT(Warnings(*r), HasSubstr("MIG is enabled: the job sees exactly one device"));
  EXPECT_THAT(Warnings(*r), HasSubstr("MIG instance GI 1 CI 0 on host device 0 (0000:07:00.0)"));
}

TEST(FixtureResolve, AmdRocrSelectsByOrdinalOrUuid) {
  auto r = On("amd-2x-mi210", Req::Train().Env("ROCR_VISIBLE_DEVICES", "1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0"));
  r = On("amd-2x-mi210", Req::Train().Env("ROCR_VISIBLE_DEVICES", "GPU-0de0b6b3a7640002"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0"));
  r = On("amd-2x-mi210", Req::Infer("auto"));
  EXPECT_EQ(r->max_memory().at("0"), 68691628032u);  // 2 GPUs, no model size: each one's free memory
  EXPECT_EQ(r->max_memory().at("1"), 64407732224u);
}

// E-ORDER (HIP): the KFD topology of amd-2x-mi210-kfd-order lists 83:00.0 as node 2 and 63:00.0
// as node 3 (nodes 0 and 1 are the CPUs), so HIP device 0 is the second card on the bus; on
// amd-2x-mi210 the orders agree.
TEST(FixtureResolve, AmdMasksCountInTheKfdTopologysOrder) {
  const v1::Inventory inv = ProbeHost("amd-2x-mi210-kfd-order");
  const v1::Device* first = FindDevice(inv, "0000:63:00.0");
  const v1::Device* second = FindDevice(inv, "0000:83:00.0");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->runtime_ordinal(), 1);
  EXPECT_EQ(second->runtime_ordinal(), 0);
  EXPECT_FALSE(first->has_runtime_ordinal_pci());  // HIP has no PCI-order switch
  EXPECT_EQ(FindDevice(ProbeHost("amd-2x-mi210"), "0000:63:00.0")->runtime_ordinal(), 0);

  auto r = On("amd-2x-mi210-kfd-order", Req::Train().Env("HIP_VISIBLE_DEVICES", "1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:63:00.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("cuda:0 = HIP device 1 = GPU 0 in PCI bus order (0000:63:00.0"));
  EXPECT_THAT(Warnings(*r), HasSubstr("ROCR_VISIBLE_DEVICES=GPU-0de0b6b3a7640002"));  // 83:00.0, PCI GPU 1
  r = On("amd-2x-mi210-kfd-order", Req::Train().Env("ROCR_VISIBLE_DEVICES", "GPU-0de0b6b3a7640002"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0"));
  EXPECT_THAT(Warnings(*r), Not(HasSubstr("E-ORDER-SMI")));
  r = On("amd-2x-mi210-kfd-order", Req::Infer("auto"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0", "0000:63:00.0"));
  EXPECT_EQ(r->max_memory().at("0"), 64407732224u);  // 83:00.0's free memory: HIP device 0
  EXPECT_THAT(Warnings(*r), HasSubstr("max_memory keys are the job's ordinals"));
  r = On("amd-2x-mi210", Req::Train().Env("HIP_VISIBLE_DEVICES", "1"));
  EXPECT_THAT(Buses(*r), ElementsAre("0000:83:00.0"));
  EXPECT_THAT(Warnings(*r), Not(HasSubstr("E-ORDER-SMI")));
}

TEST(FixtureResolve, NeuronCoresAreTheJobsDevices) {
  auto r = On("neuron-2x-trn1", Req::Train(v1::CONVENTION_ACCELERATE).Rank(3, 4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "neuron:3");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:00:1d.0"));
  EXPECT_EQ(r->placed(0).sub_device(), 1);
  r = On("neuron-2x-trn1", Req::Infer("auto"));
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_THAT(Warnings(*r), HasSubstr("pass device_map=\"neuron\""));
}

TEST(FixtureResolve, TpuIsHonouredOnlyWhenNamed) {
  auto r = On("tpu-2x-v5e", Req::Infer("tpu:1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Buses(*r), ElementsAre("0000:00:05.0"));
  r = On("tpu-2x-v5e", Req::Infer("auto"));
  EXPECT_EQ(r->device(), "cpu");
}

TEST(FixtureResolve, OtherRows) {
  auto r = On("hpu-2x-gaudi2", Req::Train().Rank(0, 1).Env("HABANA_VISIBLE_MODULES", "1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "hpu:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:9a:00.0"));
  r = On("npu-2x-910b", Req::Infer("auto"));
  EXPECT_THAT(r->devices(), ElementsAre("npu:0", "npu:1", "cpu"));
  r = On("mlu-2x-mlu370", Req::Pipe("1"));
  EXPECT_EQ(r->device(), "mlu:1");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:5e:00.0"));
  r = On("musa-2x-s4000", Req::Train().JobNodes({"/dev/mtgpu.1"}));
  EXPECT_EQ(r->device(), "musa:0");
  EXPECT_THAT(Buses(*r), ElementsAre("0000:3a:00.0"));
  r = On("cpu-only", Req::Infer("auto"));
  EXPECT_EQ(r->device(), "cpu");
  const uint64_t available = ProbeHost("cpu-only").host().memory_available_bytes();
  ASSERT_GT(available, 0u);
  // MemAvailable of the fixture's /proc/meminfo; from Transformers 5.0 from_pretrained keeps 90 % (V-TF-CPU-90).
  EXPECT_EQ(r->max_memory().at("cpu"), CpuBudget(available));
  EXPECT_EQ(On("cpu-only", Req::Infer("auto").Transformers("4.57.6"))->max_memory().at("cpu"), available);
}

TEST(FixtureResolve, MigInstanceWithoutNvmlUuidsIsExplained) {
  auto r = On("nvidia-mig", Req::Train().Env("CUDA_VISIBLE_DEVICES", "MIG-00000000-0000-4000-8000-00000000aaaa"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_THAT(Warnings(*r), HasSubstr("MIG UUIDs come from NVML"));
}

}  // namespace
}  // namespace devplace::testing
