// Resolver behaviour beyond the SEMANTICS.md section 11 table: request validation, the extra
// HF-SEMANTICS cases, host-side hazards and max_memory budgets.
#include "server/placement/resolver.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using placement::Resolve;

std::string Msg(const absl::StatusOr<v1::ResolveDeviceResponse>& r) { return std::string(r.status().message()); }
std::string Warnings(const v1::ResolveDeviceResponse& r) { return absl::StrJoin(r.warnings(), "\n"); }

TEST(Resolver, EmptyInventoryIsUnavailable) {
  EXPECT_EQ(Resolve(v1::Inventory(), Req::Train()).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Resolver, RequestValidationNamesTheField) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  v1::ResolveDeviceRequest none;
  auto r = Resolve(b, none);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(r), HasSubstr("workload"));
  r = Resolve(b, Req::Infer("auto", v1::CONVENTION_ACCELERATE));
  EXPECT_THAT(Msg(r), HasSubstr("convention"));
  r = Resolve(b, Req::Train().proto());
  EXPECT_TRUE(r.ok());
  v1::ResolveDeviceRequest with_map = Req::Train();
  with_map.set_device_map("auto");
  EXPECT_THAT(Msg(Resolve(b, with_map)), HasSubstr("device_map"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Rank(1, 2).Env("LOCAL_RANK", "0"))), HasSubstr("disagrees with env.LOCAL_RANK"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Rank(-1, 2))), HasSubstr("local_rank: -1 is negative"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Rank(0, 0))), HasSubstr("world_size: 0 is below 1"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Rank(2, 2))), HasSubstr("not below world_size"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Env("WORLD_SIZE", "two"))), HasSubstr("env.WORLD_SIZE"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Runtime({"gpu"}))), HasSubstr("runtime_backends: unknown backend 'gpu'"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Runtime({"cuda", "rocm"}))), HasSubstr("both cuda and rocm"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train().Env("USE_TORCH_XLA", "maybe"))), HasSubstr("env.USE_TORCH_XLA"));
  EXPECT_THAT(Msg(Resolve(b, Req::Train(v1::CONVENTION_ACCELERATE).Env("ACCELERATE_TORCH_DEVICE", "gpu:0"))),
              HasSubstr("env.ACCELERATE_TORCH_DEVICE"));
}

TEST(Resolver, LocalRankFromEnvironmentMakesTheJobDistributed) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 4);
  auto r = Resolve(b, Req::Train().Env("LOCAL_RANK", "3").Env("WORLD_SIZE", "4"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:3");
  r = Resolve(b, Req::Train().Env("LOCAL_RANK", "-1"));  // Accelerate's "not distributed"
  EXPECT_EQ(r->device(), "cuda:0");
}

TEST(Resolver, AccelerateTorchDeviceDistributedIsVerbatimWithoutRankOffset) {  // HF C23
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  auto r = Resolve(b, Req::Train().Rank(1, 2).Env("ACCELERATE_TORCH_DEVICE", "cuda:0"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "cuda:0");
  r = Resolve(b, Req::Train(v1::CONVENTION_ACCELERATE).Env("ACCELERATE_TORCH_DEVICE", "cuda:64"));  // HF C21
  EXPECT_EQ(r->device(), "cuda:64");
  EXPECT_THAT(Warnings(*r), HasSubstr("the job sees only cuda:0"));
  // Single-process TrainingArguments uses it only without an accelerator (HF C24-like).
  InventoryBuilder cpu;
  r = Resolve(cpu, Req::Train().Env("ACCELERATE_TORCH_DEVICE", "npu:0"));
  EXPECT_EQ(r->device(), "npu:0");
  EXPECT_THAT(Warnings(*r), HasSubstr("no npu device is available"));
}

TEST(Resolver, P3MaskPinningOneDeviceGivesIndexZeroWithoutWrapWarning) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 8);
  auto r = Resolve(b, Req::Train().Rank(5, 8).Env("CUDA_VISIBLE_DEVICES", "5").Strict());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_EQ(r->placed(0).host_index(), 5);
  EXPECT_EQ(r->warnings_size(), 0);
  EXPECT_THAT(absl::StrJoin(r->explanation(), "\n"), HasSubstr("P3"));
}

TEST(Resolver, HabanaProcessAcquiresModuleAtItsRankPosition) {  // HF C102
  InventoryBuilder b;
  b.Add(v1::ROW_HPU, 8);
  for (int i = 0; i < 8; ++i) (*b.Device(v1::ROW_HPU, i).mutable_attributes())["module_id"] = std::to_string(i);
  auto r = Resolve(b, Req::Train().Rank(1, 4).Env("HABANA_VISIBLE_MODULES", "4,5,6,7"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "hpu:0");
  EXPECT_EQ(r->placed(0).host_index(), 5);
}

TEST(Resolver, NeuronCoresRenumberInsideTheProcess) {  // HF C101
  InventoryBuilder b;
  b.Add(v1::ROW_NEURON, 2);
  b.Device(v1::ROW_NEURON, 0).set_sub_device_count(2);
  b.Device(v1::ROW_NEURON, 1).set_sub_device_count(2);
  auto r = Resolve(b, Req::Train(v1::CONVENTION_ACCELERATE).Rank(1, 2).Env("NEURON_RT_VISIBLE_CORES", "2-3"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "neuron:1");
  EXPECT_EQ(r->placed(0).host_index(), 1);
  EXPECT_EQ(r->placed(0).sub_device(), 1);
}

TEST(Resolver, NvidiaAndAmdBothUsableAssumesCudaBuildUnlessRocmNamed) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1).Add(v1::ROW_CUDA_AMD, 1);
  auto r = Resolve(b, Req::Train());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_NVIDIA);
  EXPECT_THAT(Warnings(*r), HasSubstr("assuming a CUDA build"));
  r = Resolve(b, Req::Train().Runtime({"rocm"}));
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_AMD);
  EXPECT_EQ(r->device(), "cuda:0");
  // "cuda" (torch.cuda available) drives AMD GPUs on a host without NVIDIA ones.
  InventoryBuilder amd;
  amd.Add(v1::ROW_CUDA_AMD, 2);
  r = Resolve(amd, Req::Train().Runtime({"cuda"}));
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_AMD);
}

TEST(Resolver, HostSideUnusableRowIsWarnedAndStrictRefuses) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1);
  b.Backend(v1::ROW_CUDA_NVIDIA).set_state(v1::BACKEND_STATE_DRIVER_NOT_LOADED);
  b.Backend(v1::ROW_CUDA_NVIDIA).set_state_reason("no GPU has the nvidia driver bound");
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_usable(false);
  auto r = Resolve(b, Req::Infer("auto"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_THAT(Warnings(*r), HasSubstr("no GPU has the nvidia driver bound"));
  EXPECT_EQ(Resolve(b, Req::Infer("auto").Strict()).status().code(), absl::StatusCode::kFailedPrecondition);
  r = Resolve(b, Req::Infer("cuda:0"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);  // P6: never a silent cpu
  EXPECT_THAT(Msg(r), HasSubstr("no GPU has the nvidia driver bound"));
}

// from_pretrained passes a max_memory for every keyword but "sequential" through get_balanced_memory, which
// shares the model out by its layers: devplace's budgets are the free memory it starts from, whatever the size.
TEST(Resolver, BalancedBudgetsAreEachDevicesFreeMemoryForTheLibraryToShareOut) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 3);
  for (const char* keyword : {"auto", "balanced", "balanced_low_0", "sequential"}) {
    auto r = Resolve(b, Req::Infer(keyword).ModelSize(30 * kGiB));
    ASSERT_TRUE(r.ok()) << keyword;
    for (const char* i : {"0", "1", "2"}) EXPECT_EQ(r->max_memory().at(i), 80 * kGiB) << keyword << " " << i;
  }
  // One device with free memory: get_balanced_memory keeps 10 % of device 0's as its buffer.
  b.Device(v1::ROW_CUDA_NVIDIA, 1).set_memory_free_bytes(0);
  b.Device(v1::ROW_CUDA_NVIDIA, 2).set_memory_free_bytes(0);
  auto r = Resolve(b, Req::Infer("balanced"));
  EXPECT_EQ(r->max_memory().at("0"), 72 * kGiB);
  EXPECT_EQ(r->max_memory().at("1"), 0u);
  r = Resolve(b, Req::Infer("sequential"));
  EXPECT_EQ(r->max_memory().at("0"), 80 * kGiB);
  b.Device(v1::ROW_CUDA_NVIDIA, 2).clear_memory_free_bytes();
  r = Resolve(b, Req::Infer("sequential"));
  EXPECT_EQ(r->max_memory().at("2"), 80 * kGiB);
  EXPECT_THAT(Warnings(*r), HasSubstr("free memory of cuda:2 is unknown"));
}

// infer_auto_device_map gives no module to a device whose budget is 0: the answer is where the first module lands.
TEST(Resolver, AFullFirstDeviceIsNotWhereTheFirstModuleLands) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 3);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_memory_free_bytes(0);
  b.Device(v1::ROW_CUDA_NVIDIA, 1).set_memory_free_bytes(0);
  auto r = Resolve(b, Req::Infer("auto"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "cuda:2");
  EXPECT_EQ(r->max_memory().at("0"), 0u);
  EXPECT_EQ(r->max_memory().at("2"), 80 * kGiB);  // the 90 % goes to device 0, the first index key, as the library does
  // balanced_low_0 gives device 0 only what the others cannot hold.
  InventoryBuilder three;
  three.Add(v1::ROW_CUDA_NVIDIA, 3);
  EXPECT_EQ(Resolve(three, Req::Infer("balanced_low_0"))->device(), "cuda:1");
  EXPECT_EQ(Resolve(three, Req::Infer("balanced_low_0").ModelSize(100 * kGiB))->device(), "cuda:1");
  EXPECT_EQ(Resolve(three, Req::Infer("balanced_low_0").ModelSize(200 * kGiB))->device(), "cuda:0");
  // What the library sums for "the others" (get_balanced_memory, the same at Accelerate 0.25.0 and 1.14.0 and
  // Transformers 5.15.0; executed with the model of 16 MiB layers of the landing runs): each device with a budget
  // but the last is first capped at size // (num_devices - 1), and the sum runs over indices 1 .. num_devices - 1
  // whatever their budgets. Free 8, 8 and 1 GiB, 6 GiB of model: 3 + 1 GiB < 6, device 0 keeps 2 GiB (the
  // uncapped 8 + 1 would fit); free 1, 0, 4 and 4 GiB, 1 GiB of model: the sum is over indices 1 and 2, 0 + 0.5 GiB.
  constexpr uint64_t kLayer = (2048 * 2048 + 2048) * 4;
  InventoryBuilder capped;
  capped.Add(v1::ROW_CUDA_NVIDIA, 3);
  capped.Device(v1::ROW_CUDA_NVIDIA, 0).set_memory_free_bytes(8 * kGiB);
  capped.Device(v1::ROW_CUDA_NVIDIA, 1).set_memory_free_bytes(8 * kGiB);
  capped.Device(v1::ROW_CUDA_NVIDIA, 2).set_memory_free_bytes(1 * kGiB);
  EXPECT_EQ(Resolve(capped, Req::Infer("balanced_low_0").ModelSize(384 * kLayer))->device(), "cuda:0");
  capped.Device(v1::ROW_CUDA_NVIDIA, 2).set_memory_free_bytes(8 * kGiB);
  EXPECT_EQ(Resolve(capped, Req::Infer("balanced_low_0").ModelSize(384 * kLayer))->device(), "cuda:1");
  InventoryBuilder gap;
  gap.Add(v1::ROW_CUDA_NVIDIA, 4);
  gap.Device(v1::ROW_CUDA_NVIDIA, 0).set_memory_free_bytes(1 * kGiB);
  gap.Device(v1::ROW_CUDA_NVIDIA, 1).set_memory_free_bytes(0);
  gap.Device(v1::ROW_CUDA_NVIDIA, 2).set_memory_free_bytes(4 * kGiB);
  gap.Device(v1::ROW_CUDA_NVIDIA, 3).set_memory_free_bytes(4 * kGiB);
  auto r_gap = Resolve(gap, Req::Infer("balanced_low_0").ModelSize(64 * kLayer));
  ASSERT_TRUE(r_gap.ok());
  EXPECT_EQ(r_gap->device(), "cuda:0");
  EXPECT_THAT(absl::StrJoin(r_gap->explanation(), "\n"), HasSubstr("exceeds the budgets get_balanced_memory sums for "
                                                                    "indices 1..2"));
  EXPECT_EQ(Resolve(gap, Req::Infer("balanced_low_0"))->device(), "cuda:2");  // no size: taken to be nothing
  b.Device(v1::ROW_CUDA_NVIDIA, 2).set_memory_free_bytes(0);
  r = Resolve(b, Req::Infer("balanced"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_EQ(r->backend(), v1::ROW_CPU);
  EXPECT_THAT(Warnings(*r), HasSubstr("puts every module on cpu"));
  EXPECT_EQ(Resolve(b, Req::Infer("balanced").Strict()).status().code(), absl::StatusCode::kFailedPrecondition);
}

// from_pretrained's cpu budget: all of the available RAM (Accelerate's get_max_memory) before Transformers 5.0, then
// 90 % of it, Transformers' own get_max_memory keeping the rest when the job passes no max_memory (V-TF-CPU-90);
// "mps" stays whole in both. Executed (from_pretrained's device-map code at 4.57.6 + 1.10.1, 5.0.0 + 1.12.0 and
// 5.12.1 + 1.14.0; one CUDA device with 1 GiB free, 2 GiB of RAM available, 150 to 198 layers of 16 MiB, auto and
// sequential): a job passing these budgets gets the library's own landing; the whole RAM at 5.x kept 174 to 183
// layers off the disk.
TEST(Resolver, CpuBudgetIsNinetyPercentOfTheRamFromTransformers5) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1);
  b.Host().set_memory_available_bytes(2 * kGiB);
  for (const char* keyword : {"auto", "balanced", "balanced_low_0", "sequential"}) {
    auto old = Resolve(b, Req::Infer(keyword).Transformers("4.57.6").Accelerate("1.10.1"));
    ASSERT_TRUE(old.ok()) << old.status();
    EXPECT_EQ(old->max_memory().at("cpu"), 2 * kGiB) << keyword;
    auto now = Resolve(b, Req::Infer(keyword).Transformers("5.0.0").Accelerate("1.12.0"));
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(now->max_memory().at("cpu"), 1932735283u) << keyword;
    EXPECT_THAT(absl::StrJoin(now->explanation(), "\n"), HasSubstr("\"cpu\": 90 % of the available host RAM (V-TF-CPU-90: Transformers 5.0.0 >= 5.0.0"));
    EXPECT_THAT(absl::StrJoin(old->explanation(), "\n"),
                HasSubstr("\"cpu\": available host RAM (V-TF-CPU-90: Transformers 4.57.6 < 5.0.0"));
  }
  InventoryBuilder none;  // no accelerator: everything on cpu, with the same budget
  none.Host().set_memory_available_bytes(2 * kGiB);
  EXPECT_EQ(Resolve(none, Req::Infer("auto").Transformers("5.12.1"))->max_memory().at("cpu"), 1932735283u);
  EXPECT_EQ(Resolve(none, Req::Infer("auto").Transformers("4.57.6"))->max_memory().at("cpu"), 2 * kGiB);
  InventoryBuilder mac;
  mac.Add(v1::ROW_MPS, 1);
  mac.Host().set_memory_available_bytes(2 * kGiB);
  auto apple = Resolve(mac, Req::Infer("auto").Transformers("5.12.1"));
  ASSERT_TRUE(apple.ok()) << apple.status();
  EXPECT_EQ(apple->max_memory().at("mps"), 2 * kGiB);
  EXPECT_THAT(absl::StrJoin(apple->explanation(), "\n"), HasSubstr("\"mps\": available host RAM (mps: Accelerate"));
}

// Accelerate's get_balanced_memory counts a device only when torch.device(<its index>) is of the expected type, and
// an index is a CUDA device: an NPU's budgets stay as measured and balanced_low_0 fills device 0 first
// (V-ACC-BALANCED-XPU); Transformers 5's own copy counts every accelerator (V-TF-BALANCED).
TEST(Resolver, BalancedMemoryCountsOnlyTheDevicesTheReleaseCounts) {
  InventoryBuilder b;
  b.Add(v1::ROW_NPU, 2);
  b.Device(v1::ROW_NPU, 1).set_memory_free_bytes(0);
  auto r = Resolve(b, Req::Infer("balanced_low_0").Transformers("4.57.6").Accelerate("1.10.1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_memory().at("0"), 80 * kGiB);  // no 90 % buffer: get_balanced_memory counted no device
  b.Device(v1::ROW_NPU, 1).set_memory_free_bytes(80 * kGiB);
  EXPECT_EQ(Resolve(b, Req::Infer("balanced_low_0").Transformers("4.57.6").Accelerate("1.10.1"))->device(), "npu:0");
  EXPECT_EQ(Resolve(b, Req::Infer("balanced_low_0").Transformers("5.0.0").Accelerate("1.12.0"))->device(), "npu:1");
  // Intel GPUs (counted by their properties before Accelerate 0.31, when no release yet measured their memory).
  InventoryBuilder xpu;
  xpu.Add(v1::ROW_XPU, 2);
  const auto stock = [](Req r) { return r.Packages({{"torch", "2.8.0"}}); };
  EXPECT_EQ(Resolve(xpu, stock(Req::Infer("balanced_low_0").Transformers("4.57.6").Accelerate("1.3.0")))->device(),
            "xpu:0");
  EXPECT_EQ(Resolve(xpu, stock(Req::Infer("balanced_low_0").Transformers("5.0.0").Accelerate("1.3.0")))->device(),
            "xpu:1");
}

TEST(Resolver, IntDeviceMapRowsAndErrors) {
  InventoryBuilder hpu;
  hpu.Add(v1::ROW_HPU, 2);
  auto r = Resolve(hpu, Req::Infer("1"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "hpu");  // set_module_tensor_to_device: hpu without index
  EXPECT_EQ(r->placed(0).device(), "hpu");
  EXPECT_EQ(r->placed(0).host_index(), 0);  // the process's current module
  InventoryBuilder cpu;
  r = Resolve(cpu, Req::Infer("0"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r), HasSubstr("no row of"));
  r = Resolve(cpu, Req::Pipe("0"));  // pipeline falls back to cpu (HF C64)
  EXPECT_EQ(r->device(), "cpu");
  r = Resolve(cpu, Req::Pipe("-2"));
  EXPECT_EQ(r->device(), "cpu");
  r = Resolve(cpu, Req::Pipe("auto"));
  EXPECT_THAT(Msg(r), HasSubstr("not a device_map keyword"));
}

// docs/SEMANTICS.md T-XLA: Accelerate >= 0.28 tests only the import, so
// torch_xla installed on a GPU host is the answer, with a hazard naming the fix.
TEST(Resolver, XlaInstalledWithoutTpuIsTheAnswerWithAHazard) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1);
  auto r = Resolve(b, Req::Train().Runtime({"xla", "cuda"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "xla:0");
  EXPECT_EQ(r->package(), "torch_xla");
  EXPECT_THAT(Warnings(*r), HasSubstr("set USE_TORCH_XLA=0 or uninstall torch_xla to get cuda:0"));
  InventoryBuilder tpu;
  tpu.Add(v1::ROW_TPU, 4);
  r = Resolve(tpu, Req::Train().Runtime({"xla"}).Env("USE_TORCH_XLA", "0"));  // HF C18
  EXPECT_EQ(r->device(), "cpu");
  r = Resolve(tpu, Req::Infer("xla:0").Runtime({"xla"}));
  EXPECT_EQ(r->device(), "xla:0");
  EXPECT_EQ(r->package(), "torch_xla");
}

TEST(Resolver, DistributedTrainingArgumentsHonoursAccelerateUseCpu) {  // T10/T12: PartialState(cpu=...)
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 4);
  auto r = Resolve(b, Req::Train().Rank(1, 2).Env("ACCELERATE_USE_CPU", "1"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), "cpu");
  EXPECT_EQ(r->warnings_size(), 0);
}

TEST(Resolver, DeviceMapIntsAreDigitsOnly) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  for (const char* s : {" 1", "+1", "01", "-0", "1 "}) {
    auto r = Resolve(b, Req::Infer(s));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << "'" << s << "'";
    EXPECT_THAT(Msg(r), HasSubstr("device_map")) << s;
  }
  EXPECT_EQ(Resolve(b, Req::Pipe(" 0")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Resolve(b, Req::Infer("10")).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Resolver, StrictCountsOnlyTheMaskThatHidTheRow) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 4);
  // An empty CUDA_DEVICE_ORDER is not a deliberate "no GPU"; the repeated entry is the hazard.
  auto r = Resolve(b, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1,1").Env("CUDA_DEVICE_ORDER", "").Strict());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  r = Resolve(b, Req::Train().Env("CUDA_VISIBLE_DEVICES", "").Strict());
  ASSERT_TRUE(r.ok()) << r.status();  // set-but-empty: deliberately none
  EXPECT_EQ(r->device(), "cpu");
}

TEST(Resolver, UnsupportedOnlyRowIsExplainedButNotAHazard) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1).Add(v1::ROW_XPU, 1);
  v1::Device& igpu = b.Device(v1::ROW_XPU, 0);
  igpu.set_supported(false);
  igpu.set_usable(false);
  igpu.set_unusable_reason("Intel GPU 8086:a780 is not supported by PyTorch's xpu backend");
  auto r = Resolve(b, Req::Train().Strict());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Warnings(*r), HasSubstr("no device the job sees is a PyTorch xpu target"));
}

TEST(Resolver, HiddenGaudiModuleIsAPreconditionNotAMalformedMask) {
  InventoryBuilder b;
  b.Add(v1::ROW_HPU, 2);
  auto r = Resolve(b, Req::Train().Env("HABANA_VISIBLE_MODULES", "1").JobNodes({"/dev/accel/accel0"}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r), HasSubstr("not usable by or visible to this job"));
  r = Resolve(b, Req::Train().Env("HABANA_VISIBLE_MODULES", "5"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Resolver, UseTorchXlaIsValidatedForEveryWorkload) {  // HF C33: import accelerate fails
  InventoryBuilder b;
  EXPECT_THAT(Msg(Resolve(b, Req::Infer("auto").Env("USE_TORCH_XLA", "maybe"))), HasSubstr("env.USE_TORCH_XLA"));
}

TEST(Resolver, HugeLocalRankWrapsWithABoundedWarning) {  // found by tests/fuzz/resolve_fuzz (OOM)
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 1);
  v1::ResolveDeviceRequest req = Req::Train();
  req.set_local_rank(2000000000);
  auto r = Resolve(b, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_THAT(Warnings(*r), HasSubstr("local rank(s) 0, 1, 2, 3, 4, 5, 6, 7, and 1999999992 more"));
  EXPECT_LT(Warnings(*r).size(), 400u);
}

TEST(Resolver, PlacedDevicesCarryHostIdentity) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  auto r = Resolve(b, Req::Infer("cuda:1"));
  ASSERT_TRUE(r.ok());
  const v1::PlacedDevice& p = r->placed(0);
  EXPECT_EQ(p.device(), "cuda:1");
  EXPECT_EQ(p.job_index(), 1);
  EXPECT_EQ(p.host_index(), 1);
  EXPECT_EQ(p.pci_bus_id(), b.Device(v1::ROW_CUDA_NVIDIA, 1).pci_bus_id());
  EXPECT_EQ(p.uuid(), TestUuid(v1::ROW_CUDA_NVIDIA, 1));
  EXPECT_EQ(p.memory_total_bytes(), 80 * kGiB);
  EXPECT_EQ(r->package(), "torch");
  EXPECT_EQ(r->inventory_revision(), 7u);
}

// Explanations and warnings speak the user's terms: the convention as the CLI's --convention value
// and the API the job calls, never a proto enum name such as CONVENTION_FROM_PRETRAINED.
TEST(Resolver, ExplanationsAndWarningsNameConventionsInTheUsersTerms) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  struct Case {
    Req request;
    std::string line;  // the convention's explanation line starts so
    std::string api;   // the warning about the missing library names this API
  };
  for (const Case& c : std::vector<Case>{
           {Req::Train(), "convention training_arguments: emulating TrainingArguments.device", "TrainingArguments "},
           {Req::Train(v1::CONVENTION_ACCELERATE), "convention accelerate: emulating Accelerator().device",
            "Accelerator "},
           {Req::Infer("auto"), "convention from_pretrained: emulating from_pretrained(device_map=\"auto\")",
            "from_pretrained with a device_map "},
           {Req::Pipe(), "convention pipeline: emulating pipeline(device=None)", "pipeline "}}) {
    v1::ResolveDeviceRequest request = c.request;
    request.mutable_job_environment()->set_source("/opt/job/site-packages");  // torch only: no transformers,
    v1::PythonPackage* torch = request.mutable_job_environment()->add_packages();  // no accelerate
    torch->set_name("torch");
    torch->set_version("2.5.1+cu124");
    auto r = Resolve(b, request);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string all = absl::StrCat(absl::StrJoin(r->explanation(), "\n"), "\n", Warnings(*r));
    SCOPED_TRACE(all);
    EXPECT_THAT(all, HasSubstr("\n" + c.line));
    EXPECT_THAT(Warnings(*r), HasSubstr(": " + c.api));  // "accelerate is not installed in ...: Accelerator needs it"
    for (const char* enum_prefix : {"CONVENTION_", "WORKLOAD_", "PROVENANCE_"}) {
      EXPECT_THAT(all, ::testing::Not(HasSubstr(enum_prefix)));
    }
  }
  // The refusal of a convention for the other workload names both: the field's value and the API.
  EXPECT_THAT(Msg(Resolve(b, Req::Infer("", v1::CONVENTION_TRAINING_ARGUMENTS))),
              HasSubstr("convention: CONVENTION_TRAINING_ARGUMENTS (TrainingArguments) does not apply to "
                        "WORKLOAD_INFERENCE"));
}

}  // namespace
}  // namespace devplace::testing
