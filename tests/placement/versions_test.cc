// docs/SEMANTICS.md sections 10-11: the answers that follow the newest Transformers / Accelerate
// (cases N01-N..), and every version rule at both sides of its boundary
// (cases V..), as one table. Each case asserts the status, the device, and the words of the
// rule that decided (explanation, warning or error).
#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "server/placement/versions.h"
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

const auto H = HostOf;

Req Acc(const std::string& v, Req r) {
  r.Accelerate(v);
  return r;
}
Req Tf(const std::string& v, Req r) {
  r.Transformers(v);
  return r;
}

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  const auto cuda2 = H({{CUDA, 2}});
  const auto tpu2 = H({{v1::ROW_TPU, 2}});
  // ---- newest libraries -------------------------------------------------
  // N01-N03: ACCELERATE_TORCH_DEVICE comes first.
  c.push_back({.id = "N01_acc_use_cpu", .host = cuda2,
               .request = Req::Train(ACC).UseCpu().Env("ACCELERATE_TORCH_DEVICE", "cuda:1"), .device = "cuda:1",
               .words = {"T-ENV", "wins over cpu"}, .host_indices = {1}});
  c.push_back({.id = "N02_ta_dist_use_cpu", .host = cuda2,
               .request = Req::Train(TA).UseCpu().Rank(0, 2).Env("ACCELERATE_TORCH_DEVICE", "cuda:1"),
               .device = "cuda:1", .words = {"MULTI_CPU", "ACCELERATE_TORCH_DEVICE=cuda:1 set first"}});
  c.push_back({.id = "N03_xla_env_cpu", .host = tpu2,
               .request = Req::Train(TA).Runtime({"xla"}).Env("ACCELERATE_TORCH_DEVICE", "cpu"), .device = "cpu",
               .words = {"XLA branch passes PartialState.device"}});
  c.push_back({.id = "N03_xla_env_cpu_ACC", .host = tpu2,
               .request = Req::Train(ACC).Runtime({"xla"}).Env("ACCELERATE_TORCH_DEVICE", "cpu"), .device = "cpu",
               .words = {"wins over cpu, ACCELERATE_USE_CPU, MULTI_CPU and XLA"}});
  // N04-N06: torch_xla importable means XLA, on a GPU host too.
  c.push_back({.id = "N04_gpu_xla_ACC", .host = cuda2, .request = Req::Train(ACC).Runtime({"cuda", "xla"}),
               .device = "xla:0",
               .words = {"V-ACC-XLA-IMPORT", "not cuda", "set USE_TORCH_XLA=0 or uninstall torch_xla to get cuda"}});
  c.push_back({.id = "N05_gpu_xla_TA", .host = cuda2, .request = Req::Train(TA).Runtime({"cuda", "xla"}),
               .device = "xla:0", .words = {"not cuda:0", "to get cuda:0"}});
  c.push_back({.id = "N06_gpu_xla_strict", .host = cuda2, .request = Req::Train(TA).Runtime({"cuda", "xla"}).Strict(),
               .code = kPrecondition, .words = {"strict", "USE_TORCH_XLA=0"}});
  c.push_back({.id = "N06_gpu_xla_off", .host = cuda2,
               .request = Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", "0"), .device = "cuda:0"});
  // N07-N10: native TPU (torch-tpu): TrainingArguments tpu:0 on every rank, Accelerate cpu.
  c.push_back({.id = "N07_tpu_TA", .host = tpu2, .request = Req::Train(TA), .device = "tpu:0",
               .words = {"V-TF-TA-TPU"}, .host_indices = {0}});
  c.push_back({.id = "N08_tpu_TA_rank1", .host = tpu2, .request = Req::Train(TA).Rank(1, 2), .device = "tpu:0",
               .words = {"treats the process as a single one", "V-ACC-MULTICPU"}});
  c.push_back({.id = "N09_tpu_ACC", .host = tpu2, .request = Req::Train(ACC), .device = "cpu",
               .words = {"Google TPU (tpu) is available, but Accelerator().device", "no branch for it"}});
  c.push_back({.id = "N09_tpu_ACC_strict", .host = tpu2, .request = Req::Train(ACC).Strict(), .code = kPrecondition,
               .words = {"strict", "never picks it"}});
  c.push_back({.id = "N10_tpu_ACC_rank1", .host = tpu2, .request = Req::Train(ACC).Rank(1, 2), .device = "cpu"});
  // N11-N12: pipeline on MPS is mps:0.
  c.push_back({.id = "N11_mps_pipeline_none", .host = H({{v1::ROW_MPS, 1}}), .request = Req::Pipe(""), .device = "mps:0"});
  c.push_back({.id = "N12_mps_pipeline_int", .host = H({{v1::ROW_MPS, 1}}), .request = Req::Pipe("0"), .device = "mps:0"});
  // N13-N14: int device_map on Neuron / TPU (PrivateUse1 current accelerator).
  c.push_back({.id = "N13_neuron_int", .host = H({{v1::ROW_NEURON, 2}}), .request = Req::Infer("1"),
               .device = "neuron:1", .host_indices = {1}});
  c.push_back({.id = "N14_tpu_int", .host = tpu2, .request = Req::Infer("1"), .device = "tpu:1", .host_indices = {1}});
  c.push_back({.id = "N14_neuron_int_beyond", .host = H({{v1::ROW_NEURON, 2}}), .request = Req::Infer("2"),
               .code = kPrecondition, .words = {"neuron:2", "sees 2"}});
  // N15-N21: SDAA, the 12th row.
  const auto sdaa2 = H({{v1::ROW_SDAA, 2}});
  c.push_back({.id = "N15_sdaa_ACC", .host = sdaa2, .request = Req::Train(ACC), .device = "sdaa"});
  c.push_back({.id = "N16_sdaa_ACC_rank1", .host = sdaa2, .request = Req::Train(ACC).Rank(1, 2), .device = "sdaa:1",
               .host_indices = {1}});
  c.push_back({.id = "N17_sdaa_TA", .host = sdaa2, .request = Req::Train(TA), .device = "cpu",
               .words = {"Tecorigin SDAA (sdaa) is available, but TrainingArguments.device"}});
  c.push_back({.id = "N18_sdaa_auto", .host = sdaa2, .request = Req::Infer("auto"), .device = "sdaa:0",
               .host_indices = {0, 1}});
  c.push_back({.id = "N19_sdaa_int", .host = sdaa2, .request = Req::Infer("1"), .device = "sdaa:1"});
  c.push_back({.id = "N20_sdaa_mask", .host = sdaa2,
               .request = Req::Train(ACC).Rank(0, 1).Env("SDAA_VISIBLE_DEVICES", "1"), .device = "sdaa:0",
               .words = {"SDAA_VISIBLE_DEVICES"}, .host_indices = {1}});
  c.push_back({.id = "N21_sdaa_runtime_missing", .host = sdaa2, .request = Req::Train(ACC).Runtime({"cpu"}),
               .device = "cpu", .words = {"install torch_sdaa"}});

  // ---- version boundaries: each rule at both sides ------------------------------------------
  const auto mlu_cuda = H({{v1::ROW_MLU, 2}, {CUDA, 2}});
  const auto musa_cuda = H({{v1::ROW_MUSA, 2}, {CUDA, 2}});
  const auto npu_cuda = H({{v1::ROW_NPU, 2}, {CUDA, 2}});
  c.push_back({.id = "V01_dd_mlu_0_28", .host = mlu_cuda, .request = Acc("0.28.0", Req::Train(ACC)), .device = "cuda",
               .words = {"V-ACC-DD-0.25"}});
  c.push_back({.id = "V01_dd_mlu_0_29", .host = mlu_cuda, .request = Acc("0.29.0", Req::Train(ACC)), .device = "mlu",
               .words = {"V-ACC-DD-0.29"}});
  c.push_back({.id = "V02_dd_musa_0_32", .host = musa_cuda, .request = Acc("0.32.0", Req::Train(ACC)), .device = "cuda"});
  c.push_back({.id = "V02_dd_musa_0_33", .host = musa_cuda, .request = Acc("0.33.0", Req::Train(ACC)), .device = "musa"});
  c.push_back({.id = "V03_dd_npu_0_33", .host = npu_cuda, .request = Acc("0.33.0", Req::Train(ACC)), .device = "cuda"});
  c.push_back({.id = "V03_dd_npu_0_34", .host = npu_cuda, .request = Acc("0.34.0", Req::Train(ACC)), .device = "npu",
               .words = {"V-ACC-DD-0.34"}});
  c.push_back({.id = "V03_dd_npu_0_25_vs_newest", .host = npu_cuda, .request = Acc("0.25.0", Req::Train(ACC)),
               .device = "cuda", .accelerate_answered = "0.25.0"});
  c.push_back({.id = "V03_dd_npu_newest", .host = npu_cuda, .request = Req::Train(ACC), .device = "npu",
               .words = {"accelerate_version empty: the newest devplace knows"}, .accelerate_answered = "1.14.0"});
  const auto xpu1 = H({{v1::ROW_XPU, 1}});
  c.push_back({.id = "V04_xpu_0_34", .host = xpu1, .request = Acc("0.34.2", Req::Train(ACC)), .device = "xpu:0",
               .words = {"V-ACC-DD-0.34"}});
  c.push_back({.id = "V04_xpu_1_0", .host = xpu1, .request = Acc("1.0.0", Req::Train(ACC)), .device = "xpu"});
  const auto hpu8 = H({{v1::ROW_HPU, 8}});
  c.push_back({.id = "V05_hpu_1_4", .host = hpu8, .request = Acc("1.4.0", Req::Train(ACC)), .device = "cpu",
               .words = {"Intel Gaudi (hpu) is available, but Accelerator().device (Accelerate 1.4.0)", "V-ACC-DD-0.34"}});
  c.push_back({.id = "V05_hpu_1_5", .host = hpu8, .request = Acc("1.5.0", Req::Train(ACC)), .device = "hpu",
               .words = {"V-ACC-DD-1.5"}});
  c.push_back({.id = "V05_sdaa_1_4", .host = sdaa2, .request = Acc("1.4.0", Req::Train(ACC)), .device = "cpu"});
  c.push_back({.id = "V05_sdaa_1_5", .host = sdaa2, .request = Acc("1.5.0", Req::Train(ACC)), .device = "sdaa"});
  const auto neuron2 = H({{v1::ROW_NEURON, 2}});
  c.push_back({.id = "V06_neuron_1_12", .host = neuron2, .request = Acc("1.12.0", Req::Train(ACC)), .device = "cpu"});
  c.push_back({.id = "V06_neuron_1_13", .host = neuron2, .request = Acc("1.13.0", Req::Train(ACC)), .device = "neuron",
               .words = {"V-ACC-DD-1.13"}});
  c.push_back({.id = "V07_multicpu_1_12", .host = tpu2, .request = Acc("1.12.0", Req::Train(TA).Rank(1, 2)),
               .device = "cpu", .words = {"V-ACC-MULTICPU (Accelerate 1.12.0 < 1.13.0", "MULTI_CPU"}});
  c.push_back({.id = "V07_multicpu_1_13", .host = tpu2, .request = Acc("1.13.0", Req::Train(TA).Rank(1, 2)),
               .device = "tpu:0", .words = {"V-ACC-MULTICPU (Accelerate 1.13.0 >= 1.13.0"}});
  c.push_back({.id = "V08_modulo_0_32", .host = cuda2, .request = Acc("0.32.0", Req::Train(ACC).Rank(3, 4)),
               .code = kPrecondition, .words = {"local_rank 3", "V-ACC-MODULO (Accelerate 0.32.0 < 0.33.0", "cuda:3"}});
  c.push_back({.id = "V08_modulo_0_33", .host = cuda2, .request = Acc("0.33.0", Req::Train(ACC).Rank(3, 4)),
               .device = "cuda:1", .words = {"shares the device with local rank(s) 1"}});
  c.push_back({.id = "V08_no_modulo_in_range", .host = cuda2, .request = Acc("0.32.0", Req::Train(ACC).Rank(1, 2)),
               .device = "cuda:1", .words = {"cuda:local_rank"}});
  c.push_back({.id = "V09_dist_npu_0_33", .host = npu_cuda, .request = Acc("0.33.0", Req::Train(ACC).Rank(1, 2)),
               .device = "cuda:1", .words = {"V-ACC-DIST-0.33"}});
  c.push_back({.id = "V09_dist_npu_0_34", .host = npu_cuda, .request = Acc("0.34.0", Req::Train(ACC).Rank(1, 2)),
               .device = "npu:1", .words = {"V-ACC-DIST-0.34"}});
  // Before 0.28 Accelerate's XLA check fails on a CUDA host, but TrainingArguments' own (torch_xla
  // importable) passes PartialState.device on: Accelerate's `cuda`, not cuda:0 (executed at v4.36.2 + v0.25.0).
  c.push_back({.id = "V10_xla_import_0_27", .host = cuda2, .request = Acc("0.27.0", Req::Train(TA).Runtime({"cuda", "xla"})),
               .device = "cuda", .words = {"T-XLA not taken", "V-ACC-XLA-IMPORT (Accelerate 0.27.0 < 0.28.0",
                                           "TrainingArguments' own XLA check passes"}});
  c.push_back({.id = "V10_xla_import_0_27_ACC", .host = cuda2,
               .request = Acc("0.27.0", Req::Train(ACC).Runtime({"cuda", "xla"})), .device = "cuda"});
  c.push_back({.id = "V10_xla_import_0_28", .host = cuda2, .request = Acc("0.28.0", Req::Train(TA).Runtime({"cuda", "xla"})),
               .device = "xla:0"});
  // V-ACC-XLA-CPU reached the 0.29 line as a patch release ("Patch for v0.29.2"): executed at v0.29.1 / v0.29.2.
  c.push_back({.id = "V11_xla_cpu_0_29_1", .host = tpu2,
               .request = Acc("0.29.1", Req::Train(TA).UseCpu().Runtime({"xla"})),
               .device = "cpu", .words = {"V-ACC-XLA-CPU (Accelerate 0.29.1 < 0.29.2"}});
  c.push_back({.id = "V11_xla_cpu_0_29_2", .host = tpu2,
               .request = Acc("0.29.2", Req::Train(TA).UseCpu().Runtime({"xla"})),
               .device = "xla:0", .words = {"XLA wins over use_cpu"}});
  c.push_back({.id = "V11_xla_cpu_0_29_2_ACC_env", .host = cuda2,
               .request = Acc("0.29.2", Req::Train(ACC).Runtime({"cuda", "xla"}).Env("ACCELERATE_USE_CPU", "1")),
               .device = "xla:0", .words = {"XLA wins over use_cpu"}});
  c.push_back({.id = "V11_xla_cpu_0_29_1_ACC_env", .host = cuda2,
               .request = Acc("0.29.1", Req::Train(ACC).Runtime({"cuda", "xla"}).Env("ACCELERATE_USE_CPU", "1")),
               .device = "cpu"});
  c.push_back({.id = "V11_xla_cpu_0_30", .host = tpu2, .request = Acc("0.30.0", Req::Train(TA).UseCpu().Runtime({"xla"})),
               .device = "xla:0", .words = {"XLA wins over use_cpu"}});
  // V-TF-XLA-ENV: before Transformers 4.39 TrainingArguments' XLA check ignores USE_TORCH_XLA=0 and passes
  // PartialState.device on: Accelerate's `cuda`, not cuda:0 (executed at v4.36.2 + v0.25.0, v4.38.2 / v4.39.0).
  c.push_back({.id = "V13_tf_xla_env_4_36", .host = cuda2,
               .request = Tf("4.36.2", Acc("0.25.0", Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", "0"))),
               .device = "cuda", .words = {"V-TF-XLA-ENV (Transformers 4.36.2 < 4.39.0"}});
  c.push_back({.id = "V13_tf_xla_env_4_38", .host = cuda2,
               .request = Tf("4.38.2", Acc("0.28.0", Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", "0"))),
               .device = "cuda", .words = {"TrainingArguments' own XLA check passes"}});
  c.push_back({.id = "V13_tf_xla_env_4_39", .host = cuda2,
               .request = Tf("4.39.0", Acc("0.28.0", Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", "0"))),
               .device = "cuda:0"});
  // T-XLA-NEURON: torch-neuronx on torch_xla (the job has both): xla:0 is a NeuronCore, by torch_xla's remap of
  // NEURON_RT_VISIBLE_CORES and LOCAL_RANK (torch_xla/_internal/neuron.py, torch_xla >= 2.5).
  const auto trn2 = H({{v1::ROW_NEURON, 2}});
  c.push_back({.id = "X01_neuron_xla_single", .host = trn2, .request = Req::Train(TA).Runtime({"neuron", "xla"}),
               .device = "xla:0", .words = {"its XLA device is neuron", "T-XLA-NEURON a single process"},
               .host_indices = {0}});
  c.push_back({.id = "X02_neuron_xla_rank1", .host = trn2, .request = Req::Train(ACC).Runtime({"neuron", "xla"}).Rank(1, 2),
               .device = "xla:0", .words = {"torch_xla sets it to LOCAL_RANK=1"}, .host_indices = {1}});
  c.push_back({.id = "X03_neuron_xla_remap", .host = trn2,
               .request = Req::Train(ACC).Runtime({"neuron", "xla"}).Rank(0, 2)
                              .Env("NEURON_RT_VISIBLE_CORES", "1,0").Env("LOCAL_WORLD_SIZE", "2"),
               .device = "xla:0", .words = {"to its entry at LOCAL_RANK=0"}, .host_indices = {1}});
  c.push_back({.id = "X04_neuron_xla_list_vs_local_world", .host = trn2,
               .request = Req::Train(ACC).Runtime({"neuron", "xla"}).Rank(0, 2)
                              .Env("NEURON_RT_VISIBLE_CORES", "0-1").Env("LOCAL_WORLD_SIZE", "1"),
               .code = kPrecondition, .words = {"torch_xla raises ValueError: LOCAL_WORLD_SIZE 1 is not equal to the 2"}});
  // torch_xla's remap reads the list before the runtime does: the list is bounded (no host has 65536 cores), and a
  // list naming cores this host lacks is fine for a rank whose own entry exists (the runtime sees only that one).
  c.push_back({.id = "X05_neuron_xla_huge_list", .host = trn2,
               .request = Req::Train(ACC).Runtime({"neuron", "xla"}).Rank(0, 2)
                              .Env("NEURON_RT_VISIBLE_CORES", "0-2147483647").Env("LOCAL_WORLD_SIZE", "2"),
               .code = kInvalid, .words = {"lists more than 65536 NeuronCores"}});
  c.push_back({.id = "X05_neuron_xla_list_beyond_host", .host = trn2,
               .request = Req::Train(ACC).Runtime({"neuron", "xla"}).Rank(1, 8)
                              .Env("NEURON_RT_VISIBLE_CORES", "0-7").Env("LOCAL_WORLD_SIZE", "8"),
               .device = "xla:0", .words = {"to its entry at LOCAL_RANK=1, NEURON_RT_VISIBLE_CORES=1"},
               .host_indices = {1}});
  // The same job's explicit device_map "xla" / "xla:1" (from_pretrained, pipeline): its NeuronCores, never a TPU.
  c.push_back({.id = "X06_neuron_xla_device_map", .host = trn2, .request = Req::Infer("xla").Runtime({"neuron", "xla"}),
               .device = "xla", .words = {"T-XLA-NEURON xla is a NeuronCore"}, .host_indices = {0}});
  c.push_back({.id = "X06_neuron_xla_device_map_1", .host = trn2, .request = Req::Infer("xla:1").Runtime({"neuron", "xla"}),
               .device = "xla:1", .host_indices = {1}});
  c.push_back({.id = "X06_neuron_xla_device_map_2", .host = trn2, .request = Req::Infer("xla:2").Runtime({"neuron", "xla"}),
               .code = kPrecondition, .words = {"xla:2 is not visible to this job"}});
  // V-TF-XPU-STOCK: 4.42's XPU branch without IPEX needs Accelerate >= 0.32 (executed: 4.42.0 + 0.31.0 raises
  // ImportError). The job's packages say torch without IPEX.
  c.push_back({.id = "V14_tf_xpu_old_accelerate", .host = H({{v1::ROW_XPU, 2}}),
               .request = Tf("4.42.0", Acc("0.31.0", Req::Train(TA).Packages({{"torch", "2.5.1+xpu"}}))),
               .code = kPrecondition, .words = {"requires `accelerate>=0.32.0.dev`", "install accelerate >= 0.32"}});
  c.push_back({.id = "V14_tf_xpu_accelerate_0_32", .host = H({{v1::ROW_XPU, 2}}),
               .request = Tf("4.42.0", Acc("0.32.0", Req::Train(TA).Packages({{"torch", "2.5.1+xpu"}}))), .device = "xpu:0"});
  c.push_back({.id = "V12_mem_npu_0_25", .host = npu_cuda, .request = Acc("0.25.0", Req::Infer("auto")), .device = "cuda:0",
               .words = {"V-ACC-MEM-0.25", "never places on npu"}});
  c.push_back({.id = "V12_mem_npu_0_26", .host = npu_cuda, .request = Acc("0.26.0", Req::Infer("auto")), .device = "npu:0"});
  c.push_back({.id = "V13_mem_mlu_0_28", .host = mlu_cuda, .request = Acc("0.28.0", Req::Infer("auto")), .device = "cuda:0"});
  c.push_back({.id = "V13_mem_mlu_0_29", .host = mlu_cuda, .request = Acc("0.29.0", Req::Infer("auto")), .device = "mlu:0"});
  c.push_back({.id = "V14_mem_musa_0_32", .host = musa_cuda, .request = Acc("0.32.0", Req::Infer("auto")), .device = "cuda:0"});
  c.push_back({.id = "V14_mem_musa_0_33", .host = musa_cuda, .request = Acc("0.33.0", Req::Infer("auto")), .device = "musa:0"});
  c.push_back({.id = "V15_mem_hpu_1_4", .host = hpu8, .request = Acc("1.4.0", Req::Infer("auto")), .device = "cpu"});
  c.push_back({.id = "V15_mem_hpu_1_5", .host = hpu8, .request = Acc("1.5.0", Req::Infer("auto")), .device = "hpu:0"});
  c.push_back({.id = "V16_ta_hpu_4_46", .host = hpu8, .request = Tf("4.46.3", Req::Train(TA)), .device = "cpu",
               .words = {"V-TF-TA-4", "Intel Gaudi (hpu) is available, but TrainingArguments.device (Transformers 4.46.3)"}});
  c.push_back({.id = "V16_ta_hpu_5_0", .host = hpu8, .request = Tf("5.0.0", Req::Train(TA)), .device = "hpu:0",
               .words = {"V-TF-TA-4.50"}});
  // V17: torch-tpu in TrainingArguments is first tagged in v5.9.0 (commit 6308a20ba4, PR #45918).
  c.push_back({.id = "V17_ta_tpu_5_8_1", .host = tpu2, .request = Tf("5.8.1", Req::Train(TA)), .device = "cpu",
               .words = {"V-TF-TA-5.4", "never picks it"}});
  c.push_back({.id = "V17_ta_tpu_5_9", .host = tpu2, .request = Tf("5.9.0", Req::Train(TA)), .device = "tpu:0",
               .words = {"V-TF-TA-TPU"}});
  c.push_back({.id = "V18_use_cpu_4_31", .host = cuda2, .request = Tf("4.31.0", Req::Train(TA).UseCpu()), .device = "cpu",
               .words = {"V-TF-USE-CPU (Transformers 4.31.0 < 4.32.0", "no_cuda=True"}});
  c.push_back({.id = "V18_use_cpu_4_32", .host = cuda2, .request = Tf("4.32.0", Req::Train(TA).UseCpu()), .device = "cpu"});
  // V19: "Better defaults" (PR #34026, commit 05863817d6) is first tagged in v4.47.0: the release tag
  // v4.46.3 still sets device = -1 (executed: its pipeline runs on cpu); 4.42's PR #31398 only warned.
  c.push_back({.id = "V19_pipe_none_4_45", .host = cuda2, .request = Tf("4.45.2", Req::Pipe("")), .device = "cpu",
               .words = {"V-TF-PIPE-DEFAULT (Transformers 4.45.2 < 4.47.0", "pass device=0 to use cuda:0"}});
  c.push_back({.id = "V19_pipe_none_4_46_3", .host = cuda2, .request = Tf("4.46.3", Req::Pipe("")), .device = "cpu",
               .words = {"V-TF-PIPE-DEFAULT (Transformers 4.46.3 < 4.47.0"}});
  c.push_back({.id = "V19_pipe_none_4_47", .host = cuda2, .request = Tf("4.47.0", Req::Pipe("")), .device = "cuda:0",
               .words = {"V-TF-PIPE-DEFAULT, Transformers >= 4.47.0"}});
  const auto cpu_only = H({});
  c.push_back({.id = "V19_pipe_int_no_accel_4_45", .host = cpu_only, .request = Tf("4.45.0", Req::Pipe("0")),
               .code = kPrecondition, .words = {"0 unrecognized or not available", "V-TF-PIPE-DEFAULT"}});
  c.push_back({.id = "V19_pipe_int_no_accel_4_46_3", .host = cpu_only, .request = Tf("4.46.3", Req::Pipe("0")),
               .code = kPrecondition, .words = {"0 unrecognized or not available", "V-TF-PIPE-DEFAULT"}});
  c.push_back({.id = "V19_pipe_int_no_accel_4_47", .host = cpu_only, .request = Tf("4.47.0", Req::Pipe("0")),
               .device = "cpu"});
  // V26: the single-process TrainingArguments chain, row by row (V-TF-TA-*), each type on both
  // sides of the release that added it.
  const auto npu2 = H({{v1::ROW_NPU, 2}});
  const auto xpu2 = H({{v1::ROW_XPU, 2}});
  const auto mlu2 = H({{v1::ROW_MLU, 2}});
  const auto musa2 = H({{v1::ROW_MUSA, 2}});
  for (const auto& [type, host, before, since, id] :
       std::vector<std::tuple<std::string, std::function<v1::Inventory()>, std::string, std::string, std::string>>{
           {"npu", npu2, "4.31.0", "4.32.0", "V-TF-TA-4.32"},
           {"xpu", xpu2, "4.33.3", "4.34.0", "V-TF-TA-4.34"},
           {"mlu", mlu2, "4.39.3", "4.40.0", "V-TF-TA-4.40"},
           {"musa", musa2, "4.44.2", "4.45.0", "V-TF-TA-4.45"},
           {"hpu", hpu8, "4.49.0", "4.50.0", "V-TF-TA-4.50"},
           {"neuron", neuron2, "5.3.0", "5.4.0", "V-TF-TA-5.4"}}) {
    c.push_back({.id = "V26_ta_" + type + "_before", .host = host, .request = Tf(before, Req::Train(TA)),
                 .device = "cpu", .words = {"never picks it"}});
    c.push_back({.id = "V26_ta_" + type + "_since", .host = host, .request = Tf(since, Req::Train(TA)),
                 .device = type + ":0", .words = {id}});
  }
  // V27: with no accelerator in its chain, TrainingArguments reads ACCELERATE_TORCH_DEVICE from 4.43.
  c.push_back({.id = "V27_ta_env_4_42", .host = neuron2,
               .request = Tf("4.42.4", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "neuron:1")), .device = "cpu",
               .words = {"is not read: V-TF-TA-ENV"}});
  c.push_back({.id = "V27_ta_env_4_43", .host = neuron2,
               .request = Tf("4.43.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "neuron:1")), .device = "neuron:1",
               .words = {"falls back to ACCELERATE_TORCH_DEVICE"}});
  // V28: the newest releases are the default, and the range reaches them.
  c.push_back({.id = "V28_tf_newest_5_15", .host = cuda2, .request = Tf("5.15.0", Req::Train(TA)), .device = "cuda:0"});
  c.push_back({.id = "V28_acc_newest_1_14", .host = cuda2, .request = Acc("1.14.0", Req::Train(ACC)), .device = "cuda",
               .accelerate_answered = "1.14.0"});
  // ---- version strings -----------------------------------------------------------------------
  c.push_back({.id = "V20_v5_needs_acc_1_1", .host = cuda2, .request = Acc("1.0.1", Tf("5.0.0", Req::Train(TA))),
               .code = kInvalid, .words = {"accelerate_version", "Transformers 5 requires Accelerate >= 1.1.0"}});
  c.push_back({.id = "V20_v4_acc_1_0", .host = cuda2, .request = Acc("1.0.1", Tf("4.46.0", Req::Train(TA))),
               .device = "cuda:0"});
  c.push_back({.id = "V20_only_old_acc_named", .host = cuda2, .request = Acc("0.34.0", Req::Train(TA)),
               .device = "cuda:0", .words = {"Transformers 4.57.0 (transformers_version empty"}});
  // A release newer than the rules (1.16.0, 6.0.0) is no error: the VS cases (version_skew_test.cc).
  for (const auto& [name, v] : std::vector<std::pair<std::string, std::string>>{
           {"garbage", "abc"}, {"too_old", "0.24.0"}, {"major_only", "1"},
           {"four_parts", "1.2.3.4"}, {"space", " 1.2.0"}, {"bad_suffix", "1.2.0x"}}) {
    c.push_back({.id = "V21_acc_" + name, .host = cuda2, .request = Acc(v, Req::Train(ACC)), .code = kInvalid,
                 .words = {"accelerate_version", "0.25.0 or newer (rules up to 1.15.x"}});
  }
  // ---- boundaries found by executing the release tags (docs/FIDELITY.md) ----------------------
  // V29: pipeline's int order by release (V-TF-PIPE-*): XPU joined in 4.37, NPU in 4.38, MLU and MPS in
  // 4.40, MUSA in 4.45, HPU in 4.50; before 4.37 an int is cuda:<n> whatever the host has.
  const auto mps1 = H({{v1::ROW_MPS, 1}});
  c.push_back({.id = "V29_pipe_npu_4_36", .host = npu2, .request = Tf("4.36.2", Req::Pipe("0")), .code = kPrecondition,
               .words = {"is cuda:0 for this pipeline", "V-TF-PIPE-4.30"}});
  c.push_back({.id = "V29_pipe_npu_4_37", .host = npu2, .request = Tf("4.37.2", Req::Pipe("0")), .code = kPrecondition,
               .words = {"0 unrecognized or not available", "CUDA, XPU"}});
  c.push_back({.id = "V29_pipe_npu_4_38", .host = npu2, .request = Tf("4.38.0", Req::Pipe("1")), .device = "npu:1",
               .words = {"V-TF-PIPE-4.38"}});
  c.push_back({.id = "V29_pipe_mps_4_39", .host = mps1, .request = Tf("4.39.3", Req::Pipe("0")), .code = kPrecondition});
  c.push_back({.id = "V29_pipe_mps_4_40", .host = mps1, .request = Tf("4.40.0", Req::Pipe("0")), .device = "mps:0"});
  c.push_back({.id = "V29_pipe_musa_4_44", .host = musa_cuda, .request = Tf("4.44.2", Req::Pipe("0")), .device = "cuda:0"});
  c.push_back({.id = "V29_pipe_musa_4_45", .host = musa_cuda, .request = Tf("4.45.0", Req::Pipe("0")), .device = "musa:0"});
  c.push_back({.id = "V29_pipe_hpu_4_49", .host = hpu8, .request = Tf("4.49.0", Req::Pipe("")), .device = "cpu",
               .words = {"V-TF-PIPE-4.45"}});
  c.push_back({.id = "V29_pipe_hpu_4_50", .host = hpu8, .request = Tf("4.50.0", Req::Pipe("")), .device = "hpu:0",
               .words = {"V-TF-PIPE-4.50"}});
  // V30: TrainingArguments' own MPS branch (4.43): before it ACCELERATE_USE_CPU made PartialState's device,
  // the only way to mps, cpu.
  c.push_back({.id = "V30_ta_mps_cpu_env_4_42", .host = mps1,
               .request = Tf("4.42.4", Req::Train(TA).Env("ACCELERATE_USE_CPU", "1")), .device = "cpu",
               .words = {"V-TF-TA-MPS (Transformers 4.42.4 < 4.43.0"}});
  c.push_back({.id = "V30_ta_mps_cpu_env_4_43", .host = mps1,
               .request = Tf("4.43.0", Req::Train(TA).Env("ACCELERATE_USE_CPU", "1")), .device = "mps",
               .words = {"quirk T13"}});
  // V31-V34: Accelerate before 0.29 (V-ACC-SET-DEVICE) and 0.28 (V-ACC-XLA-IMPORT).
  c.push_back({.id = "V31_env_vs_xla_0_28", .host = tpu2,
               .request = Acc("0.28.0", Req::Train(ACC).Runtime({"xla"}).Env("ACCELERATE_TORCH_DEVICE", "cpu")),
               .device = "xla:0", .words = {"overwritten by the XLA branch"}});
  // 0.29.0 and 0.29.1 keep ACCELERATE_TORCH_DEVICE in set_device, but their XLA branch in __init__ still set
  // xm.xla_device() over it; from 0.29.2 XLA's device comes from set_device too (V-ACC-XLA-CPU).
  c.push_back({.id = "V31_env_vs_xla_0_29_1", .host = tpu2,
               .request = Acc("0.29.1", Req::Train(ACC).Runtime({"xla"}).Env("ACCELERATE_TORCH_DEVICE", "cpu")),
               .device = "xla:0", .words = {"overwritten by the XLA branch", "V-ACC-XLA-CPU"}});
  c.push_back({.id = "V31_env_vs_xla_0_29_2", .host = tpu2,
               .request = Acc("0.29.2", Req::Train(ACC).Runtime({"xla"}).Env("ACCELERATE_TORCH_DEVICE", "cpu")),
               .device = "cpu"});
  c.push_back({.id = "V32_use_torch_xla_0_27", .host = tpu2,
               .request = Acc("0.27.0", Req::Train(ACC).Runtime({"xla"}).Env("USE_TORCH_XLA", "0")), .device = "xla:0",
               .words = {"does not read it"}});
  c.push_back({.id = "V32_use_torch_xla_0_28", .host = tpu2,
               .request = Acc("0.28.0", Req::Train(ACC).Runtime({"xla"}).Env("USE_TORCH_XLA", "0")), .device = "cpu"});
  c.push_back({.id = "V33_neuron_xla_0_27", .host = H({{v1::ROW_NEURON, 2}}),
               .request = Acc("0.27.0", Req::Train(ACC).Runtime({"neuron", "xla"})), .device = "xla:0",
               .words = {"its XLA device is neuron"}});
  c.push_back({.id = "V34_mps_rank1_0_28", .host = mps1, .request = Acc("0.28.0", Req::Train(ACC).Rank(1, 2)),
               .device = "mps", .words = {"default_device, which is mps here"}});
  c.push_back({.id = "V34_mps_rank1_0_29", .host = mps1, .request = Acc("0.29.0", Req::Train(ACC).Rank(1, 2)),
               .device = "cpu"});
  c.push_back({.id = "V34_mps_rank1_TA_0_28", .host = mps1, .request = Acc("0.28.0", Req::Train(TA).Rank(1, 2)),
               .device = "mps"});
  // V35: an Intel GPU before stock-torch XPU support (Accelerate 0.32, Transformers 4.42) is seen only
  // through Intel Extension for PyTorch, which the job's packages say; not told: the XPU, with a warning.
  c.push_back({.id = "V35_ipex_absent_ACC_0_31", .host = xpu2,
               .request = Acc("0.31.0", Req::Train(ACC).Packages({{"torch", "2.5.1+xpu"}})), .device = "cpu",
               .words = {"V-ACC-XPU-STOCK (Accelerate 0.31.0 < 0.32.0", "no intel_extension_for_pytorch"}});
  c.push_back({.id = "V35_ipex_present_ACC_0_31", .host = xpu2,
               .request = Acc("0.31.0", Req::Train(ACC).Packages({{"torch", "2.5.1"},
                                                                  {"intel_extension_for_pytorch", "2.5.10+xpu"}})),
               .device = "xpu:0", .words = {"the job has intel_extension_for_pytorch 2.5.10+xpu"}});
  c.push_back({.id = "V35_ipex_cpu_variant_ACC_0_31", .host = xpu2,
               .request = Acc("0.31.0", Req::Train(ACC).Packages({{"torch", "2.5.1+xpu"},
                                                                  {"intel_extension_for_pytorch", "2.5.0+cpu"}})),
               .device = "cpu", .words = {"only the CPU variant"}});
  c.push_back({.id = "V35_ipex_unknown_ACC_0_31", .host = xpu2, .request = Acc("0.31.0", Req::Train(ACC)),
               .device = "xpu:0", .words = {"the job's packages are not known"}});
  c.push_back({.id = "V35_ipex_absent_ACC_0_32", .host = xpu2,
               .request = Acc("0.32.0", Req::Train(ACC).Packages({{"torch", "2.5.1+xpu"}})), .device = "xpu:0"});
  c.push_back({.id = "V35_ipex_absent_rank1_0_31", .host = xpu2,
               .request = Acc("0.31.0", Req::Train(ACC).Rank(1, 2).Packages({{"torch", "2.5.1+xpu"}})),
               .device = "cpu"});
  c.push_back({.id = "V35_ipex_absent_auto_0_31", .host = xpu2,
               .request = Acc("0.31.0", Req::Infer("auto").Packages({{"torch", "2.5.1+xpu"}})), .device = "cpu"});
  c.push_back({.id = "V35_ipex_absent_TA_4_41", .host = xpu2,
               .request = Tf("4.41.1", Req::Train(TA).Packages({{"torch", "2.5.1+xpu"}})), .device = "cpu",
               .words = {"V-TF-XPU-STOCK (Transformers 4.41.1 < 4.42.0"}});
  c.push_back({.id = "V35_ipex_absent_TA_4_42", .host = xpu2,
               .request = Tf("4.42.0", Acc("0.32.0", Req::Train(TA).Packages({{"torch", "2.5.1+xpu"}}))),
               .device = "xpu:0"});
  c.push_back({.id = "V35_ipex_absent_pipe_4_41", .host = H({{CUDA, 2}, {v1::ROW_XPU, 2}}),
               .request = Tf("4.41.1", Req::Pipe("0").Packages({{"torch", "2.5.1+cu124"}})), .device = "cuda:0"});
  c.push_back({.id = "V35_ipex_absent_pipe_xpu_only_4_41", .host = xpu2,
               .request = Tf("4.41.1", Req::Pipe("0").Packages({{"torch", "2.5.1+xpu"}})), .code = kPrecondition});
  // V-TF-PIPE-XPU: from 4.37 the pipeline refuses a device string naming xpu unless is_torch_xpu_available, which
  // before 4.42 needs IPEX (executed at v4.36.2, v4.37.0, v4.38.2, v4.39.0, v4.41.1, v4.42.0 on two Intel GPUs with
  // stock torch: xpu:1, then ValueError "xpu:1 is not available, you should use device=\"cpu\" instead", then xpu:1).
  const auto stock = std::initializer_list<std::pair<const char*, const char*>>{{"torch", "2.5.1+xpu"}};
  c.push_back({.id = "V35_pipe_xpu_string_4_36", .host = xpu2, .request = Tf("4.36.2", Req::Pipe("xpu:1").Packages(stock)),
               .device = "xpu:1", .host_indices = {1}});
  c.push_back({.id = "V35_pipe_xpu_string_4_37", .host = xpu2, .request = Tf("4.37.0", Req::Pipe("xpu:1").Packages(stock)),
               .code = kPrecondition,
               .words = {"Transformers 4.37.0 raises ValueError('xpu:1 is not available, you should use device=\"cpu\" "
                         "instead')", "no intel_extension_for_pytorch", "V-TF-PIPE-XPU", "V-TF-XPU-STOCK",
                         "install intel_extension_for_pytorch"}});
  c.push_back({.id = "V35_pipe_xpu_bare_4_41", .host = H({{v1::ROW_MLU, 2}, {v1::ROW_XPU, 2}}),
               .request = Tf("4.41.1", Req::Pipe("xpu").Packages({{"torch", "2.5.1+xpu"}, {"torch_mlu", "2.5.1"}})),
               .code = kPrecondition, .words = {"ValueError('xpu is not available"}});
  c.push_back({.id = "V35_pipe_xpu_string_ipex_4_41", .host = xpu2,
               .request = Tf("4.41.1", Req::Pipe("xpu:1").Packages({{"torch", "2.5.1"},
                                                                     {"intel_extension_for_pytorch", "2.5.10+xpu"}})),
               .device = "xpu:1", .words = {"the job has intel_extension_for_pytorch 2.5.10+xpu"}, .host_indices = {1}});
  c.push_back({.id = "V35_pipe_xpu_string_ipex_cpu_4_41", .host = xpu2,
               .request = Tf("4.41.1", Req::Pipe("xpu:1").Packages({{"torch", "2.5.1+xpu"},
                                                                     {"intel_extension_for_pytorch", "2.5.0+cpu"}})),
               .code = kPrecondition, .words = {"only the CPU variant of intel_extension_for_pytorch (2.5.0+cpu)"}});
  c.push_back({.id = "V35_pipe_xpu_string_unknown_4_41", .host = xpu2, .request = Tf("4.41.1", Req::Pipe("xpu:1")),
               .device = "xpu:1", .words = {"the job's packages are not known"}});
  c.push_back({.id = "V35_pipe_xpu_string_4_42", .host = xpu2, .request = Tf("4.42.0", Req::Pipe("xpu:1").Packages(stock)),
               .device = "xpu:1"});
  // Without an Intel GPU the check is no different from any absent device.
  c.push_back({.id = "V35_pipe_xpu_string_no_xpu_4_41", .host = cuda2,
               .request = Tf("4.41.1", Req::Pipe("xpu:1").Packages({{"torch", "2.5.1+cu124"}})), .code = kPrecondition,
               .words = {"names xpu, but this host has no such device"}});
  // V37: TrainingArguments on an Apple host: mps through PartialState up to 4.41, none in 4.42 (the
  // clause was dropped, executed at v4.42.4: cpu), its own branch from 4.43.
  c.push_back({.id = "V37_ta_mps_4_41", .host = mps1, .request = Tf("4.41.1", Req::Train(TA)), .device = "mps"});
  c.push_back({.id = "V37_ta_mps_4_42", .host = mps1, .request = Tf("4.42.4", Req::Train(TA)), .device = "cpu",
               .words = {"V-TF-TA-4.42", "never picks it"}});
  c.push_back({.id = "V37_ta_mps_4_43", .host = mps1, .request = Tf("4.43.0", Req::Train(TA)), .device = "mps",
               .words = {"V-TF-TA-4.43"}});
  // V38: Accelerate 1.0.x with Intel Extension for PyTorch: get_max_memory's IPEX version check raises, every
  // XPU "seems unavailable" (executed at v1.0.0: cpu); 1.1.0 parses the version. Without IPEX, 1.0.0 reads
  // torch.xpu.max_memory_allocated (about 0): every module on cpu too (V-ACC-XPU-MEM-STOCK).
  const auto ipex = std::initializer_list<std::pair<const char*, const char*>>{
      {"torch", "2.5.1"}, {"intel_extension_for_pytorch", "2.5.10+xpu"}};
  c.push_back({.id = "V38_ipex_auto_1_0", .host = xpu2, .request = Acc("1.0.0", Req::Infer("auto").Packages(ipex)),
               .device = "cpu", .words = {"V-ACC-XPU-MEM-IPEX", "use Accelerate >= 1.1.0"}});
  c.push_back({.id = "V38_ipex_auto_1_1", .host = xpu2, .request = Acc("1.1.0", Req::Infer("auto").Packages(ipex)),
               .device = "xpu:0"});
  c.push_back({.id = "V38_stock_auto_1_0", .host = xpu2,
               .request = Acc("1.0.0", Req::Infer("auto").Packages({{"torch", "2.5.1+xpu"}})), .device = "cpu",
               .words = {"V-ACC-XPU-MEM-STOCK", "max_memory_allocated"}});
  // V36: Accelerate 1.5 to 1.13 check MLU in an `if` of its own, and the chain after it overrides it
  // (executed: an MLU + CUDA host's rank gets cuda:<n>); 1.14 makes it part of the chain.
  c.push_back({.id = "V36_mlu_chain_1_13", .host = mlu_cuda, .request = Acc("1.13.0", Req::Train(ACC).Rank(1, 2)),
               .device = "cuda:1", .words = {"V-ACC-DIST-1.13"}});
  c.push_back({.id = "V36_mlu_chain_1_14", .host = mlu_cuda, .request = Acc("1.14.0", Req::Train(ACC).Rank(1, 2)),
               .device = "mlu:1", .words = {"V-ACC-DIST-1.14"}});
  c.push_back({.id = "V36_mlu_alone_1_13", .host = H({{v1::ROW_MLU, 2}}),
               .request = Acc("1.13.0", Req::Train(ACC).Rank(1, 2)), .device = "mlu:1"});
  for (const auto& [name, v] : std::vector<std::pair<std::string, std::string>>{
           {"too_old", "4.29.2"}, {"garbage", "v5"}}) {
    c.push_back({.id = "V22_tf_" + name, .host = cuda2, .request = Tf(v, Req::Train(TA)), .code = kInvalid,
                 .words = {"transformers_version", "4.30.0 or newer (rules up to 5.15.x"}});
  }
  c.push_back({.id = "V23_dev_suffix", .host = npu_cuda, .request = Acc("1.15.0.dev0", Req::Train(ACC)), .device = "npu",
               .accelerate_answered = "1.15.0"});
  c.push_back({.id = "V23_rc_suffix", .host = xpu1, .request = Acc("1.0.0rc1", Req::Train(ACC)), .device = "xpu",
               .accelerate_answered = "1.0.0"});
  c.push_back({.id = "V23_two_parts", .host = xpu1, .request = Acc("0.34", Req::Train(ACC)), .device = "xpu:0",
               .accelerate_answered = "0.34.0"});
  return c;
}

class VersionCases : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(VersionCases, Resolves) { ExpectVersionCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Semantics, VersionCases, ::testing::ValuesIn(Cases()), CaseId);

// A torch_xla Trainium job (torch-neuronx and torch_xla among its packages): the answer names the Neuron row,
// with no TPU wording and no claim that torch-neuronx is missing or that USE_TORCH_XLA=0 gets a neuron device.
TEST(NeuronOnXla, NamesTheNeuronCoreWithoutTpuOrMissingPluginWarnings) {
  absl::StatusOr<v1::ResolveDeviceResponse> got =
      Resolve(HostOf({{v1::ROW_NEURON, 2}})(), Req::Train(TA).Runtime({"neuron", "xla", "cpu"}));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->device(), "xla:0");
  EXPECT_EQ(got->backend(), v1::ROW_NEURON);
  ASSERT_EQ(got->placed_size(), 1);
  EXPECT_EQ(got->placed(0).device(), "xla:0");
  for (const std::string& w : got->warnings()) {
    EXPECT_THAT(w, ::testing::Not(HasSubstr("TPU"))) << w;
    EXPECT_THAT(w, ::testing::Not(HasSubstr("torch-neuronx"))) << w;
    EXPECT_THAT(w, ::testing::Not(HasSubstr("USE_TORCH_XLA=0"))) << w;
  }
}

// T-XLA-NEURON against torch_xla's own code: every row of tests/placement/neuron_xla_remap.txt is what
// torch_xla/_internal/neuron.py configure_pjrt_environment() left, executed unmodified at torch_xla's release
// tags by scripts/fidelity/neuron_xla.py, for one NEURON_RT_VISIBLE_CORES x LOCAL_RANK x LOCAL_WORLD_SIZE.
// On a host of 2 Trainium devices with 2 NeuronCores each (cores 0-3) the resolver must place the process on
// that core; a core the host lacks (or, for a single process, a list naming one) is the Neuron runtime's
// failure; torch_xla's ValueError (the list against LOCAL_WORLD_SIZE or LOCAL_RANK) is FAILED_PRECONDITION and
// a list torch_xla's parser refuses INVALID_ARGUMENT.
TEST(NeuronOnXla, CoreIsTorchXlaExecutedRemap) {
  constexpr int kCores = 4;
  InventoryBuilder host;
  host.Add(v1::ROW_NEURON, 2);
  for (int i = 0; i < 2; ++i) host.Device(v1::ROW_NEURON, i).set_sub_device_count(2);
  std::ifstream in(DEVPLACE_NEURON_XLA_REMAP);
  ASSERT_TRUE(in) << DEVPLACE_NEURON_XLA_REMAP;
  auto unset = [](const std::string& f) { return f == "-"; };
  auto value = [](const std::string& f) { return f == "\"\"" ? std::string() : f; };
  int rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_EQ(f.size(), 4u) << line;
    ++rows;
    Req req = Req::Train(ACC).Runtime({"neuron", "xla", "cpu"});
    int rank = -1, lws = 0;
    if (!unset(f[1])) {
      ASSERT_TRUE(absl::SimpleAtoi(f[1], &rank)) << line;
      if (!unset(f[2])) {
        ASSERT_TRUE(absl::SimpleAtoi(f[2], &lws)) << line;
      }
      req.Rank(rank, lws > 0 ? lws : rank + 1);
      if (lws > 0) req.Env("LOCAL_WORLD_SIZE", f[2]);
    }
    if (!unset(f[0])) req.Env("NEURON_RT_VISIBLE_CORES", value(f[0]));
    absl::StatusOr<v1::ResolveDeviceResponse> got = Resolve(host.Build(), req);
    const std::string& want = f[3];
    if (want == "error=count") {
      EXPECT_EQ(got.status().code(), kPrecondition) << line << ": " << got.status();
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("torch_xla raises ValueError")) << line;
      continue;
    }
    if (want == "error=malformed") {
      EXPECT_EQ(got.status().code(), kInvalid) << line << ": " << got.status();
      continue;
    }
    int core = -1;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(want, "core="), &core)) << line;
    bool names_missing = false;  // a list torch_xla leaves as it is that names a core the host lacks
    if (rank < 0 && !unset(f[0])) {
      for (absl::string_view e : absl::StrSplit(f[0], ',')) {
        int last = 0;
        names_missing |= absl::SimpleAtoi(std::vector<absl::string_view>(absl::StrSplit(e, '-')).back(), &last) &&
                         last >= kCores;
      }
    }
    if (core >= kCores || names_missing) {
      EXPECT_TRUE(got.status().code() == kPrecondition || got.status().code() == kInvalid)
          << line << ": the Neuron runtime has no such core, devplace says " << got.status();
      continue;
    }
    ASSERT_TRUE(got.ok()) << line << ": " << got.status();
    EXPECT_EQ(got->device(), "xla:0") << line;
    ASSERT_EQ(got->placed_size(), 1) << line;
    EXPECT_EQ(got->placed(0).host_index(), core / 2) << line << "\n" << got->DebugString();
    EXPECT_EQ(got->placed(0).sub_device(), core % 2) << line << "\n" << got->DebugString();
  }
  EXPECT_GT(rows, 100) << "tests/placement/neuron_xla_remap.txt: run scripts/fidelity/neuron_xla.py";
}

// The data itself: every feature has a row, and each order kind's rows ascend.
TEST(VersionTable, EveryFeatureHasOneRowAndOrdersAscend) {
  using placement::Feature;
  for (Feature f : {Feature::kAccXlaImportOnly, Feature::kAccSetDevice, Feature::kAccXlaBeforeCpu,
                    Feature::kAccSetDeviceByType, Feature::kAccStockXpu, Feature::kAccIndexModulo,
                    Feature::kAccXpuBare, Feature::kAccXpuMemoryIpex, Feature::kAccXpuMemoryIpexFixed,
                    Feature::kAccXpuMemoryStock, Feature::kAccMultiCpuNeedsCpu, Feature::kTfUseCpu,
                    Feature::kTfStockXpu, Feature::kTfTaMpsBranch, Feature::kTfTaTorchDeviceFallback,
                    Feature::kTfPipelineAccelDefault, Feature::kTfPipelineXpuCheck, Feature::kTfV5,
                    Feature::kTfDeviceMapCudaRank, Feature::kTfNativeTpu, Feature::kTfXlaReadsEnv,
                    Feature::kTfXlaCpuDevice, Feature::kTfTorchMin21, Feature::kTfTorchMin22,
                    Feature::kTfTorchMin24, Feature::kTfTorchMin25, Feature::kTfNoUseTf}) {
    int n = 0;
    for (const placement::FeatureRule& r : placement::FeatureRules()) n += r.feature == f;
    EXPECT_EQ(n, 1) << static_cast<int>(f);
  }
  for (size_t i = 1; i < placement::OrderRules().size(); ++i) {
    const auto& a = placement::OrderRules()[i - 1];
    const auto& b = placement::OrderRules()[i];
    if (a.kind == b.kind) {
      EXPECT_TRUE(a.since < b.since) << b.id;
    }
  }
}

// Every boundary of the table against the list the fidelity runner wrote from every release tag,
// patch releases included (the first tag containing each of a row's commits): a row's release is the
// first tag of any of its commits (a change can reach a patch release through a release-branch commit
// of its own and main through another). A row whose release, id or commits change without a new list
// fails here, and so does a list line no row has.
TEST(VersionTable, BoundariesAreTheReleaseTagsOfTheirCommits) {
  std::ifstream in(DEVPLACE_VERSION_BOUNDARIES);
  ASSERT_TRUE(in) << DEVPLACE_VERSION_BOUNDARIES;
  std::map<std::string, std::string> listed;  // "id library commit" -> first release tag
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_EQ(f.size(), 4u) << line;
    EXPECT_TRUE(listed.emplace(absl::StrCat(f[0], " ", f[1], " ", f[2]), f[3]).second) << "listed twice: " << line;
  }
  ASSERT_FALSE(listed.empty());
  std::set<std::string> used;
  auto check = [&](absl::string_view id, placement::Library lib, const placement::Version& since,
                   absl::string_view commits) {
    const std::vector<std::string> ids = absl::StrSplit(commits, ' ', absl::SkipEmpty());
    EXPECT_FALSE(ids.empty()) << id << " records no commit";
    std::string first;  // the earliest first tag of the row's commits
    std::vector<int> first_key;
    for (const std::string& c : ids) {
      EXPECT_GE(c.size(), 8u) << id << ": " << c;
      EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](char ch) { return absl::ascii_isxdigit(ch) && !absl::ascii_isupper(ch); }))
          << id << ": " << c;
      const std::string key = absl::StrCat(id, " ", absl::AsciiStrToLower(placement::LibraryName(lib)), " ", c);
      const auto it = listed.find(key);
      if (it == listed.end()) {
        ADD_FAILURE() << key << " is not in tests/placement/version_boundaries.txt: run scripts/fidelity/run.py "
                      << "--boundaries against the libraries' release tags";
        continue;
      }
      used.insert(key);
      std::vector<int> k;
      for (absl::string_view part : absl::StrSplit(absl::StripPrefix(it->second, "v"), '.')) {
        int n = 0;
        EXPECT_TRUE(absl::SimpleAtoi(part, &n)) << key << ": " << it->second;
        k.push_back(n);
      }
      if (first.empty() || k < first_key) {
        first = it->second;
        first_key = k;
      }
    }
    if (!first.empty()) {
      EXPECT_EQ(first, absl::StrCat("v", since.ToString()))
          << id << ": the table says " << since.ToString() << ", the tags say " << first << " (first tag of any of "
          << commits << ")";
    }
  };
  for (const placement::FeatureRule& r : placement::FeatureRules()) check(r.id, r.library, r.since, r.commits);
  for (const placement::OrderRule& r : placement::OrderRules()) check(r.id, r.library, r.since, r.commits);
  for (const auto& [key, tag] : listed) EXPECT_TRUE(used.count(key)) << "no table row has " << key << " " << tag;
}

}  // namespace
}  // namespace devplace::testing
