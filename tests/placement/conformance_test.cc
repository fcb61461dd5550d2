// docs/SEMANTICS.md section 11: every conformance case S01-S48 as a table-driven test whose name
// carries the case id (variants get a suffix: S05_strict, S07_ACC, ...). Each case asserts the
// status code, and for answers the device, the full devices list, the host identity of the
// accelerators used and the warnings the user needs; for errors the words of the message.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/placement/resolve_case.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using placement::Resolve;

constexpr auto TA = v1::CONVENTION_TRAINING_ARGUMENTS;
constexpr auto ACC = v1::CONVENTION_ACCELERATE;
constexpr auto kOk = absl::StatusCode::kOk;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;

const auto CUDA = v1::ROW_CUDA_NVIDIA;
const auto AMD = v1::ROW_CUDA_AMD;

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  auto h = HostOf;
  auto cpu_only = h({});
  const uint64_t free80 = 80 * kGiB;

  c.push_back({.id = "S01", .host = h({{CUDA, 4}}), .request = Req::Train(TA),
               .device = "cuda:0", .devices = {"cuda:0", "cuda:1", "cuda:2", "cuda:3"},
               .host_indices = {0, 1, 2, 3}, .no_warnings = true});
  c.push_back({.id = "S02", .host = h({{CUDA, 4}}), .request = Req::Train(ACC),
               .device = "cuda", .devices = {"cuda"}, .host_indices = {0}, .no_warnings = true});
  c.push_back({.id = "S03", .host = h({{CUDA, 4}}), .request = Req::Train(TA).Rank(2, 4),
               .device = "cuda:2", .devices = {"cuda:2"}, .host_indices = {2}, .no_warnings = true});
  c.push_back({.id = "S04", .host = h({{CUDA, 4}}),
               .request = Req::Train(TA).Rank(1, 2).Env("CUDA_VISIBLE_DEVICES", "2,3"),
               .device = "cuda:1", .devices = {"cuda:1"}, .host_indices = {3}});
  c.push_back({.id = "S05", .host = h({{CUDA, 2}}), .request = Req::Train(ACC).Rank(3, 4),
               .device = "cuda:1", .devices = {"cuda:1"}, .host_indices = {1},
               .warnings = {"shares the device with local rank(s) 1"}});
  c.push_back({.id = "S05_strict", .host = h({{CUDA, 2}}), .request = Req::Train(ACC).Rank(3, 4).Strict(),
               .code = kPrecondition, .error_words = {"strict", "wraps onto cuda:1", "local rank(s) 1"}});
  c.push_back({.id = "S06", .host = h({{CUDA, 4}}), .request = Req::Train(TA).UseCpu(),
               .device = "cpu", .devices = {"cpu"}, .explanation = {"T-CPU use_cpu=true"}});
  c.push_back({.id = "S07_TA", .host = h({{CUDA, 4}}),
               .request = Req::Train(TA).Env("ACCELERATE_USE_CPU", "true"),
               .device = "cuda:0", .devices = {"cuda:0", "cuda:1", "cuda:2", "cuda:3"},
               .warnings = {"ACCELERATE_USE_CPU is truthy but TrainingArguments.device checks only use_cpu"}});
  c.push_back({.id = "S07_ACC", .host = h({{CUDA, 4}}),
               .request = Req::Train(ACC).Env("ACCELERATE_USE_CPU", "true"),
               .device = "cpu", .devices = {"cpu"}});
  c.push_back({.id = "S07_TA_strict", .host = h({{CUDA, 4}}),
               .request = Req::Train(TA).Env("ACCELERATE_USE_CPU", "true").Strict(),
               .code = kPrecondition, .error_words = {"ACCELERATE_USE_CPU", "use_cpu"}});
  c.push_back({.id = "S08_TA", .host = h({{v1::ROW_MPS, 1}}), .request = Req::Train(TA),
               .device = "mps", .devices = {"mps"}, .host_indices = {0}});
  c.push_back({.id = "S08_ACC", .host = h({{v1::ROW_MPS, 1}}), .request = Req::Train(ACC),
               .device = "mps", .devices = {"mps"}});
  c.push_back({.id = "S09_TA", .host = h({{v1::ROW_XPU, 1}}), .request = Req::Train(TA),
               .device = "xpu:0", .devices = {"xpu:0"}, .host_indices = {0}});
  c.push_back({.id = "S09_ACC", .host = h({{v1::ROW_XPU, 1}}), .request = Req::Train(ACC),
               .device = "xpu", .devices = {"xpu"}});
  c.push_back({.id = "S10_TA", .host = h({{CUDA, 2}, {v1::ROW_XPU, 1}}), .request = Req::Train(TA),
               .device = "xpu:0", .devices = {"xpu:0"},
               .explanation = {"conventions disagree", "Accelerator().device would pick cuda/nvidia"}});
  c.push_back({.id = "S10_ACC", .host = h({{CUDA, 2}, {v1::ROW_XPU, 1}}), .request = Req::Train(ACC),
               .device = "cuda", .devices = {"cuda"},
               .explanation = {"conventions disagree", "TrainingArguments.device would pick xpu"}});
  c.push_back({.id = "S11", .host = h({{v1::ROW_NPU, 8}}), .request = Req::Train(TA).Rank(5, 8),
               .device = "npu:5", .devices = {"npu:5"}, .host_indices = {5}});
  c.push_back({.id = "S12_TA", .host = h({{v1::ROW_NPU, 8}}), .request = Req::Train(TA),
               .device = "npu:0", .devices = {"npu:0"}});
  c.push_back({.id = "S12_ACC", .host = h({{v1::ROW_NPU, 8}}), .request = Req::Train(ACC),
               .device = "npu", .devices = {"npu"}});
  c.push_back({.id = "S13", .host = h({{v1::ROW_TPU, 4}}), .request = Req::Train(TA).UseCpu().Runtime({"xla"}),
               .device = "xla:0", .devices = {"xla:0"}, .warnings = {"XLA wins over use_cpu"}});
  c.push_back({.id = "S13_strict", .host = h({{v1::ROW_TPU, 4}}),
               .request = Req::Train(TA).UseCpu().Runtime({"xla"}).Strict(),
               .code = kPrecondition, .error_words = {"XLA wins over use_cpu"}});
  // S14 changed with docs/SEMANTICS.md: TrainingArguments selects tpu:0 (V-TF-TA-TPU).
  c.push_back({.id = "S14", .host = h({{v1::ROW_TPU, 4}}), .request = Req::Train(TA),
               .device = "tpu:0", .devices = {"tpu:0"}, .explanation = {"V-TF-TA-TPU"}});
  c.push_back({.id = "S15", .host = cpu_only, .request = Req::Train(TA), .device = "cpu", .devices = {"cpu"},
               .no_warnings = true});
  c.push_back({.id = "S16", .host = cpu_only, .request = Req::Train(ACC).Rank(1, 2), .device = "cpu",
               .devices = {"cpu"}, .explanation = {"Accelerate >= 1.13 treats the process as a single one"}});
  c.push_back({.id = "S17_TA", .host = h({{CUDA, 2}}), .request = Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cuda:1"),
               .device = "cuda:0", .devices = {"cuda:0", "cuda:1"}});
  c.push_back({.id = "S17_ACC", .host = h({{CUDA, 2}}), .request = Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "cuda:1"),
               .device = "cuda:1", .devices = {"cuda:1"}, .host_indices = {1}});
  c.push_back({.id = "S18_TA", .host = h({{v1::ROW_NEURON, 2}}), .request = Req::Train(TA),
               .device = "neuron:0", .devices = {"neuron:0"}});
  c.push_back({.id = "S18_ACC", .host = h({{v1::ROW_NEURON, 2}}), .request = Req::Train(ACC),
               .device = "neuron", .devices = {"neuron"}});
  c.push_back({.id = "S18_ACC_rank1", .host = h({{v1::ROW_NEURON, 2}}), .request = Req::Train(ACC).Rank(1, 2),
               .device = "neuron:1", .devices = {"neuron:1"}, .host_indices = {1}});
  c.push_back({.id = "S19_TA", .host = h({{v1::ROW_HPU, 8}}), .request = Req::Train(TA),
               .device = "hpu:0", .devices = {"hpu:0"}});
  c.push_back({.id = "S19_TA_rank3", .host = h({{v1::ROW_HPU, 8}}), .request = Req::Train(TA).Rank(3, 8),
               .device = "hpu:0", .devices = {"hpu:0"}, .host_indices = {3}});
  c.push_back({.id = "S20", .host = h({{CUDA, 2}}), .request = Req::Train(TA).Env("LOCAL_RANK", "abc"),
               .code = kInvalid, .error_words = {"env.LOCAL_RANK", "'abc'", "not an integer"}});
  c.push_back({.id = "S21", .host = h({{CUDA, 2}}), .request = Req::Train(ACC).Env("ACCELERATE_USE_CPU", "maybe"),
               .code = kInvalid, .error_words = {"env.ACCELERATE_USE_CPU", "'maybe'", "1 y yes t true on"}});
  c.push_back({.id = "S22", .host = h({{CUDA, 1}}), .request = Req::Infer(""), .device = "cpu", .devices = {"cpu"},
               .warnings = {"pass device_map=\"auto\" to use cuda:0"}});
  c.push_back({.id = "S23", .host = h({{CUDA, 2}}), .request = Req::Infer("cuda:1"), .device = "cuda:1",
               .devices = {"cuda:1"}, .host_indices = {1}});
  c.push_back({.id = "S24", .host = h({{CUDA, 1}}), .request = Req::Infer("cuda:1"), .code = kPrecondition,
               .error_words = {"device_map", "cuda:1 is not visible", "cuda:0 (host device 0"}});
  c.push_back({.id = "S25_int1", .host = h({{CUDA, 2}}), .request = Req::Infer("1"), .device = "cuda:1",
               .devices = {"cuda:1"}, .host_indices = {1}});
  c.push_back({.id = "S25_neg", .host = h({{CUDA, 2}}), .request = Req::Infer("-1"), .code = kInvalid,
               .error_words = {"device_map", "You can't pass device_map as a negative int"}});
  c.push_back({.id = "S26_CUDA", .host = h({{CUDA, 1}}), .request = Req::Infer("CUDA"), .code = kInvalid,
               .error_words = {"device_map", "Expected one of cpu, cuda", "did you mean 'cuda'", "auto, balanced"}});
  c.push_back({.id = "S26_Auto", .host = h({{CUDA, 1}}), .request = Req::Infer("Auto"), .code = kInvalid,
               .error_words = {"device_map", "did you mean 'auto'", "balanced_low_0, sequential"}});
  c.push_back({.id = "S26_disk", .host = h({{CUDA, 1}}), .request = Req::Infer("disk"), .code = kInvalid,
               .error_words = {"device_map", "'disk' is only valid as a value inside a device_map dict"}});
  c.push_back({.id = "S27", .host = h({{CUDA, 1}}), .request = Req::Infer("auto"), .device = "cuda:0",
               .devices = {"cuda:0", "cpu"}, .host_indices = {0},
               .max_memory = {{"0", free80 / 10 * 9}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "S28_sequential", .host = h({{CUDA, 1}}), .request = Req::Infer("sequential"), .device = "cuda:0",
               .devices = {"cuda:0", "cpu"}, .max_memory = {{"0", free80}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "S28_balanced_low_0", .host = h({{CUDA, 1}}), .request = Req::Infer("balanced_low_0"),
               .device = "cuda:0", .devices = {"cuda:0", "cpu"},
               .max_memory = {{"0", free80 / 10 * 9}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "S29_tpu", .host = h({{v1::ROW_TPU, 4}}), .request = Req::Infer("auto"), .device = "cpu",
               .devices = {"cpu"}, .warnings = {"pass device_map=\"tpu\""},
               .max_memory = {{"cpu", kCpuBudget}}});
  c.push_back({.id = "S29_neuron", .host = h({{v1::ROW_NEURON, 2}}), .request = Req::Infer("auto"), .device = "cpu",
               .devices = {"cpu"}, .warnings = {"pass device_map=\"neuron\""}});
  c.push_back({.id = "S30", .host = h({{v1::ROW_MPS, 1}}), .request = Req::Infer("auto"), .device = "mps",
               .devices = {"mps"}, .max_memory = {{"mps", kHostRamAvailable}}});
  c.push_back({.id = "S31", .host = h({{CUDA, 8}}), .request = Req::Infer("auto").Env("CUDA_VISIBLE_DEVICES", "6,7"),
               .device = "cuda:0", .devices = {"cuda:0", "cuda:1", "cpu"}, .host_indices = {6, 7}});
  c.push_back({.id = "S32", .host = h({{v1::ROW_NPU, 2}, {CUDA, 2}}), .request = Req::Infer("auto"), .device = "npu:0",
               .devices = {"npu:0", "npu:1", "cpu"}, .host_indices = {0, 1}});
  c.push_back({.id = "S33", .host = h({{v1::ROW_NEURON, 2}}), .request = Req::Infer("neuron"), .device = "neuron",
               .devices = {"neuron"}, .host_indices = {0}});
  c.push_back({.id = "S34_none", .host = h({{CUDA, 1}}), .request = Req::Pipe(""), .device = "cuda:0",
               .devices = {"cuda:0"}, .host_indices = {0}});
  c.push_back({.id = "S34_minus1", .host = h({{CUDA, 1}}), .request = Req::Pipe("-1"), .device = "cpu",
               .devices = {"cpu"}});
  c.push_back({.id = "S34_int0", .host = h({{CUDA, 1}}), .request = Req::Pipe("0"), .device = "cuda:0",
               .devices = {"cuda:0"}});
  c.push_back({.id = "S35", .host = h({{v1::ROW_MLU, 2}, {CUDA, 2}}), .request = Req::Pipe("1"), .device = "mlu:1",
               .devices = {"mlu:1"}, .host_indices = {1}});
  c.push_back({.id = "S36", .host = h({{CUDA, 2}}), .request = Req::Pipe("xpu:0"), .code = kPrecondition,
               .error_words = {"xpu:0 names xpu", "no such device", "cuda:0"}});
  const std::vector<std::pair<std::string, std::string>> g2 = {
      {"leading_zero", "cuda:01"}, {"negative", "cuda:-1"}, {"space", " cuda"}, {"two_colons", "cuda:0:1"},
      {"no_index", "cuda:"}, {"no_type", ":0"}};
  for (const auto& [name, s] : g2) {
    c.push_back({.id = "S37_" + name, .host = h({{CUDA, 1}}), .request = Req::Infer(s), .code = kInvalid,
                 .error_words = {"device_map", "Invalid device string: '" + s + "'", "accepted forms"}});
  }
  c.push_back({.id = "S37_empty_ACCELERATE_TORCH_DEVICE", .host = h({{CUDA, 1}}),
               .request = Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", ""), .code = kInvalid,
               .error_words = {"env.ACCELERATE_TORCH_DEVICE", "Device string must not be empty"}});
  c.push_back({.id = "S38_overflow", .host = h({{CUDA, 1}}), .request = Req::Infer("cuda:99999999999"), .code = kInvalid,
               .error_words = {"Could not parse device index '99999999999'"}});
  c.push_back({.id = "S38_200", .host = h({{CUDA, 1}}), .request = Req::Infer("cuda:200"), .code = kInvalid,
               .error_words = {"device index 200", "0..127"}});
  c.push_back({.id = "S39_hip", .host = h({{AMD, 1}}), .request = Req::Infer("hip:0"), .code = kInvalid,
               .error_words = {"'hip:0'", "not a placement target", "AMD GPUs are `cuda`"}});
  c.push_back({.id = "S39_meta", .host = h({{CUDA, 1}}), .request = Req::Infer("meta"), .code = kInvalid,
               .error_words = {"'meta'", "not a placement target", "no storage"}});
  c.push_back({.id = "S40", .host = h({{CUDA, 4}}), .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "0,2,-1,1"),
               .device = "cuda:0", .devices = {"cuda:0", "cuda:1"}, .host_indices = {0, 2},
               .warnings = {"entry -1 ends the list"}});
  c.push_back({.id = "S41_repeat", .host = h({{CUDA, 4}}), .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1,1"),
               .device = "cpu", .devices = {"cpu"}, .warnings = {"repeats an entry", "NVIDIA GPU present"}});
  c.push_back({.id = "S41_empty", .host = h({{CUDA, 4}}), .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", ""),
               .device = "cpu", .devices = {"cpu"}, .warnings = {"NVIDIA GPU present but CUDA_VISIBLE_DEVICES is set to the empty string"}});
  c.push_back({.id = "S42", .host = h({{CUDA, 4}}),
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", TestUuid(CUDA, 3).substr(0, 10)),
               .device = "cuda:0", .devices = {"cuda:0"}, .host_indices = {3}});
  c.push_back({.id = "S43", .host = h({{AMD, 4}}),
               .request = Req::Train(TA).Env("ROCR_VISIBLE_DEVICES", "0,1,2").Env("HIP_VISIBLE_DEVICES", "0,1,2,3"),
               .code = kInvalid,
               .error_words = {"env.HIP_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES"}});
  c.push_back({.id = "S44", .host = h({{AMD, 4}}), .request = Req::Train(TA).Rank(1, 2).Env("ROCR_VISIBLE_DEVICES", "1,3"),
               .device = "cuda:1", .devices = {"cuda:1"}, .host_indices = {3}});
  c.push_back({.id = "S45", .host = h({{v1::ROW_NPU, 8}}), .request = Req::Infer("auto").Env("ASCEND_RT_VISIBLE_DEVICES", "1,2,3"),
               .device = "npu:0", .devices = {"npu:0", "npu:1", "npu:2", "cpu"}, .host_indices = {1, 2, 3}});
  c.push_back({.id = "S46", .host = h({{CUDA, 1}}), .request = Req::Train(TA).JobNodes({"/dev/nvidiactl"}),
               .device = "cpu", .devices = {"cpu"}, .warnings = {"not visible to the job", "/dev/nvidia0"}});
  c.push_back({.id = "S47", .host = h({{CUDA, 1}}), .request = Req::Train(TA).Runtime({"cpu"}), .device = "cpu",
               .devices = {"cpu"}, .warnings = {"job's PyTorch has no cuda backend", "install a CUDA build of torch"}});
  c.push_back({.id = "S47_strict", .host = h({{CUDA, 1}}), .request = Req::Train(TA).Runtime({"cpu"}).Strict(),
               .code = kPrecondition, .error_words = {"strict", "install a CUDA build of torch"}});
  c.push_back({.id = "S48", .host = h({{v1::ROW_MUSA, 8}}),
               .request = Req::Train(TA).Rank(1, 2).Env("MUSA_VISIBLE_DEVICES", "4,5").Env("CUDA_VISIBLE_DEVICES", "0"),
               .device = "musa:1", .devices = {"musa:1"}, .host_indices = {5}});
  return c;
}

class Conformance : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(Conformance, Resolves) {
  const ResolveCase& k = GetParam();
  const v1::Inventory inv = k.host();
  absl::StatusOr<v1::ResolveDeviceResponse> got = Resolve(inv, k.request);
  ASSERT_EQ(got.status().code(), k.code) << got.status();
  if (!got.ok()) {
    for (const std::string& w : k.error_words) EXPECT_THAT(std::string(got.status().message()), HasSubstr(w));
    return;
  }
  const std::string dump = got->DebugString();
  EXPECT_EQ(got->device(), k.device) << dump;
  EXPECT_EQ(std::vector<std::string>(got->devices().begin(), got->devices().end()), k.devices) << dump;
  EXPECT_EQ(got->inventory_revision(), 7u);
  if (!k.host_indices.empty()) {
    std::vector<int> hosts;
    for (const v1::PlacedDevice& p : got->placed()) hosts.push_back(p.host_index());
    EXPECT_EQ(hosts, k.host_indices) << dump;
    for (const v1::PlacedDevice& p : got->placed()) {
      if (got->backend() != v1::ROW_MPS) {
        EXPECT_FALSE(p.pci_bus_id().empty()) << dump;
      }
    }
  }
  const std::string warnings = absl::StrJoin(got->warnings(), "\n");
  for (const std::string& w : k.warnings) EXPECT_THAT(warnings, HasSubstr(w)) << dump;
  if (k.no_warnings) {
    EXPECT_EQ(got->warnings_size(), 0) << dump;
  }
  const std::string explanation = absl::StrJoin(got->explanation(), "\n");
  for (const std::string& e : k.explanation) EXPECT_THAT(explanation, HasSubstr(e)) << dump;
  if (!k.max_memory.empty()) {
    const std::map<std::string, uint64_t> budgets(got->max_memory().begin(), got->max_memory().end());
    EXPECT_EQ(budgets, k.max_memory) << dump;
  }
  EXPECT_GT(got->explanation_size(), 0);
}

INSTANTIATE_TEST_SUITE_P(Semantics, Conformance, ::testing::ValuesIn(Cases()), CaseId);

}  // namespace
}  // namespace devplace::testing
