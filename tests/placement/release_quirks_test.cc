// docs/SEMANTICS.md section 10: what a release's own code does where it differs from its neighbours in a
// way the version table's plain boundaries did not say, each on both sides of its boundary: a single-process
// torchrun job on Accelerate 0.29.0-0.29.1 (V-ACC-WORLD-1) and before 0.28 (V-ACC-LOCAL-RANK), an invalid
// ACCELERATE_USE_CPU beside TrainingArguments(use_cpu=True), which never parses it (T-CPU), TrainingArguments
// on a torch_xla job before Transformers 4.39 with a device torch_xla cannot map (V-TF-XLA-CPU), USE_TORCH_XLA
// read only by the releases
// that read it (V-ACC-XLA-IMPORT, V-TF-XLA-ENV), and device_map="auto" on an Intel GPU whose free memory the
// Accelerate release cannot read (V-ACC-XPU-MEM-IPEX, -FIX, -STOCK). Each case asserts the status, the device
// and the words of the rule that decided.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "server/placement/versions.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/placement/resolve_case.h"

namespace devplace::testing {
namespace {

const auto H = HostOf;
const auto CUDA = v1::ROW_CUDA_NVIDIA;
constexpr auto TA = v1::CONVENTION_TRAINING_ARGUMENTS, ACC = v1::CONVENTION_ACCELERATE;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument, kPrecondition = absl::StatusCode::kFailedPrecondition;

Req Versions(const std::string& tf, const std::string& acc, Req r) {
  if (!tf.empty()) r.Transformers(tf);
  r.Accelerate(acc);
  return r;
}

using Packages = std::initializer_list<std::pair<const char*, const char*>>;

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  const auto cuda2 = H({{CUDA, 2}});
  const auto tpu2 = H({{v1::ROW_TPU, 2}});
  const auto xpu2 = H({{v1::ROW_XPU, 2}});
  // ---- V-ACC-WORLD-1: LOCAL_RANK=0, WORLD_SIZE=1 (single-process torchrun) ----------------------------------
  // 0.29.0 and 0.29.1: set_device's `num_processes == 1` gives default_device, the bare type.
  for (const char* acc : {"0.29.0", "0.29.1"}) {
    c.push_back({.id = absl::StrCat("W1_acc_0_29_", std::string(1, acc[5]), "_world1"), .host = cuda2,
                 .request = Versions("", acc, Req::Train(ACC).Rank(0, 1)), .device = "cuda",
                 .words = {"V-ACC-WORLD-1 (Accelerate ", "num_processes == 1"}});
  }
  c.push_back({.id = "W1_acc_0_29_2_world1", .host = cuda2,
               .request = Versions("", "0.29.2", Req::Train(ACC).Rank(0, 1)), .device = "cuda:0"});
  c.push_back({.id = "W1_acc_0_28_world1", .host = cuda2,
               .request = Versions("", "0.28.0", Req::Train(ACC).Rank(0, 1)), .device = "cuda:0"});
  c.push_back({.id = "W1_acc_0_29_1_world2", .host = cuda2,
               .request = Versions("", "0.29.1", Req::Train(ACC).Rank(1, 2)), .device = "cuda:1"});
  c.push_back({.id = "W1_ta_4_40_world1", .host = cuda2,
               .request = Versions("4.40.0", "0.29.1", Req::Train(TA).Rank(0, 1)), .device = "cuda"});
  c.push_back({.id = "W1_npu_world1", .host = H({{v1::ROW_NPU, 2}}),
               .request = Versions("", "0.29.1", Req::Train(ACC).Rank(0, 1)), .device = "npu"});
  // No accelerator: MULTI_CPU, whose world of one gets default_device too: mps on an Apple host.
  c.push_back({.id = "W1_mps_world1", .host = H({{v1::ROW_MPS, 1}}),
               .request = Versions("", "0.29.1", Req::Train(ACC).Rank(0, 1)), .device = "mps"});
  c.push_back({.id = "W1_use_cpu_world1", .host = cuda2,
               .request = Versions("", "0.29.1", Req::Train(ACC).Rank(0, 1).UseCpu()), .device = "cpu"});
  c.push_back({.id = "W1_env_device_world1", .host = cuda2,
               .request = Versions("4.40.0", "0.29.1", Req::Train(TA).Rank(0, 1).Env("ACCELERATE_TORCH_DEVICE", "cuda:1")),
               .device = "cuda:1"});
  // ---- V-ACC-LOCAL-RANK: before 0.28 LOCAL_RANK in a world of one is distributed only on a CUDA GPU or NPU ----
  // Elsewhere (or with cpu) it is a single process: ACCELERATE_TORCH_DEVICE kept, else cpu, else default_device.
  const auto cpu_host = H({});
  for (const char* env : {"cuda:1", "mps", "xpu"}) {
    std::string name = env;
    name.erase(std::remove(name.begin(), name.end(), ':'), name.end());
    c.push_back({.id = absl::StrCat("LR_env_", name, "_acc_0_25_world1"), .host = cpu_host,
                 .request = Versions("", "0.25.0", Req::Train(ACC).Rank(0, 1).Env("ACCELERATE_TORCH_DEVICE", env)),
                 .device = env, .words = {"V-ACC-LOCAL-RANK (Accelerate 0.25.0 < 0.28.0", "a single process (type NO)"}});
  }
  c.push_back({.id = "LR_env_use_cpu_acc_0_27_world1", .host = cpu_host,
               .request = Versions("4.36.2", "0.27.2",
                                   Req::Train(ACC).Rank(0, 1).UseCpu().Env("ACCELERATE_TORCH_DEVICE", "mps")),
               .device = "mps", .words = {"used (cpu=True)"}});
  c.push_back({.id = "LR_env_xpu_acc_0_27_world1", .host = xpu2,
               .request = Versions("", "0.27.2", Req::Train(ACC).Rank(0, 1).Env("ACCELERATE_TORCH_DEVICE", "xpu:1")),
               .device = "xpu:1"});
  c.push_back({.id = "LR_mps_acc_0_27_world1", .host = H({{v1::ROW_MPS, 1}}),
               .request = Versions("", "0.27.2", Req::Train(ACC).Rank(0, 1)), .device = "mps"});
  // 0.28.0: MULTI_XPU / MULTI_CPU, which set the device over the variable (xpu:<local_rank>, else
  // default_device); a CUDA GPU was distributed before 0.28 too.
  c.push_back({.id = "LR_env_xpu_acc_0_28_world1", .host = xpu2,
               .request = Versions("", "0.28.0", Req::Train(ACC).Rank(0, 1).Env("ACCELERATE_TORCH_DEVICE", "xpu:1")),
               .device = "xpu:0"});
  c.push_back({.id = "LR_mps_acc_0_28_world1", .host = H({{v1::ROW_MPS, 1}}),
               .request = Versions("", "0.28.0", Req::Train(ACC).Rank(0, 1)), .device = "mps"});  // default_device
  c.push_back({.id = "LR_cuda_acc_0_25_world1", .host = cuda2,
               .request = Versions("", "0.25.0", Req::Train(ACC).Rank(0, 1)), .device = "cuda:0"});
  c.push_back({.id = "LR_cpu_acc_0_25_world2", .host = cpu_host,
               .request = Versions("", "0.25.0", Req::Train(ACC).Rank(1, 2).Env("ACCELERATE_TORCH_DEVICE", "mps")),
               .device = "cpu"});
  // ---- TrainingArguments before 4.42 keeps PartialState's device of type mps: ACCELERATE_TORCH_DEVICE=mps ----
  c.push_back({.id = "TM_env_mps_ta_4_36", .host = cpu_host,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "mps")),
               .device = "mps", .words = {"keeps a device of type mps before use_cpu"}});
  c.push_back({.id = "TM_env_mps_use_cpu_ta_4_41", .host = cuda2,
               .request = Versions("4.41.1", "0.30.1", Req::Train(TA).UseCpu().Env("ACCELERATE_TORCH_DEVICE", "mps")),
               .device = "mps"});
  c.push_back({.id = "TM_env_mps_ta_4_42", .host = cpu_host,
               .request = Versions("4.42.4", "0.31.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "mps")),
               .device = "cpu"});
  c.push_back({.id = "TM_env_xpu_ta_4_36", .host = cpu_host,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "xpu")),
               .device = "cpu"});
  // On an Apple host, before 4.43 TrainingArguments takes mps only through PartialState's device, which
  // ACCELERATE_TORCH_DEVICE of another type replaces: its own order then ends in cpu (executed: 4.36.2 + 0.25.0,
  // 4.40.2 + 0.29.3, 4.42.4 + 0.32.1 answer cpu; 4.43.4 + 0.33.0, with its own mps branch, answers mps).
  const auto mps_host = H({{v1::ROW_MPS, 1}});
  c.push_back({.id = "TM_env_cpu_on_mps_ta_4_40", .host = mps_host,
               .request = Versions("4.40.2", "0.29.3", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cpu")),
               .device = "cpu", .words = {"ACCELERATE_TORCH_DEVICE=cpu made PartialState's device cpu"}});
  c.push_back({.id = "TM_env_cuda_on_mps_ta_4_36", .host = mps_host,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cuda")),
               .device = "cpu"});
  // From 4.43 a host with no accelerator of TrainingArguments' order falls back to ACCELERATE_TORCH_DEVICE, and a
  // cuda one then meets torch.cuda.set_device, which fails without a CUDA device (the search: 4.43.2 + 0.33.0 and
  // 4.46.2 + 1.1.0 on a cpu host); another type is answered as set.
  c.push_back({.id = "TE_env_cuda_no_cuda_ta_4_43", .host = cpu_host,
               .request = Versions("4.43.2", "0.33.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cuda")),
               .code = kPrecondition, .words = {"torch.cuda.set_device", "V-TF-TA-ENV", "unset ACCELERATE_TORCH_DEVICE"}});
  c.push_back({.id = "TE_env_cuda1_no_cuda_ta_5_15", .host = cpu_host,
               .request = Versions("5.15.0", "1.14.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cuda:1")),
               .code = kPrecondition});
  c.push_back({.id = "TE_env_cuda_no_cuda_ta_4_42", .host = cpu_host,
               .request = Versions("4.42.4", "0.32.1", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cuda")),
               .device = "cpu"});
  c.push_back({.id = "TE_env_xpu_no_xpu_ta_4_43", .host = cpu_host,
               .request = Versions("4.43.2", "0.33.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "xpu")),
               .device = "xpu"});
  c.push_back({.id = "TM_env_cpu_on_mps_ta_4_43", .host = mps_host,
               .request = Versions("4.43.4", "0.33.0", Req::Train(TA).Env("ACCELERATE_TORCH_DEVICE", "cpu")),
               .device = "mps"});
  // ---- ACCELERATE_USE_CPU: TrainingArguments reads it only when use_cpu is false; Accelerator() always ----
  c.push_back({.id = "UC_maybe_ta_use_cpu", .host = cuda2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).UseCpu().Env("ACCELERATE_USE_CPU", "maybe")),
               .device = "cpu", .words = {"does not read it", "Accelerator(), which Trainer builds"}});
  c.push_back({.id = "UC_maybe_ta_use_cpu_strict", .host = cuda2,
               .request = Versions("4.36.2", "0.25.0",
                                   Req::Train(TA).UseCpu().Strict().Env("ACCELERATE_USE_CPU", "maybe")),
               .code = kPrecondition, .words = {"strict", "raises ValueError"}});
  c.push_back({.id = "UC_maybe_ta", .host = cuda2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Env("ACCELERATE_USE_CPU", "maybe")),
               .code = kInvalid, .words = {"env.ACCELERATE_USE_CPU='maybe'"}});
  c.push_back({.id = "UC_maybe_acc_use_cpu", .host = cuda2,
               .request = Versions("", "0.25.0", Req::Train(ACC).UseCpu().Env("ACCELERATE_USE_CPU", "maybe")),
               .code = kInvalid, .words = {"env.ACCELERATE_USE_CPU='maybe'"}});
  // ---- V-TF-XLA-CPU: TrainingArguments before 4.39 on a torch_xla job with a device torch_xla cannot map ----
  c.push_back({.id = "XC_use_cpu_4_36", .host = tpu2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).UseCpu().Runtime({"xla"})), .code = kPrecondition,
               .words = {"raises RuntimeError", "xm.xla_real_devices", "device cpu",
                         "V-TF-XLA-CPU (Transformers 4.36.2 < 4.39.0", "use Transformers >= 4.39.0"}});
  c.push_back({.id = "XC_accelerate_use_cpu_4_38", .host = tpu2,
               .request = Versions("4.38.2", "0.28.0",
                                   Req::Train(TA).Runtime({"xla"}).Env("ACCELERATE_USE_CPU", "1")),
               .code = kPrecondition, .words = {"V-TF-XLA-CPU"}});
  c.push_back({.id = "XC_use_cpu_4_39", .host = tpu2,
               .request = Versions("4.39.0", "0.28.0", Req::Train(TA).UseCpu().Runtime({"xla"})), .device = "cpu"});
  // Accelerate 0.29.2 puts XLA before the cpu flag: the device is xla:0, which torch_xla maps.
  c.push_back({.id = "XC_use_cpu_4_38_acc_0_29_2", .host = tpu2,
               .request = Versions("4.38.2", "0.29.2", Req::Train(TA).UseCpu().Runtime({"xla"})), .device = "xla:0"});
  c.push_back({.id = "XC_no_use_cpu_4_36", .host = tpu2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Runtime({"xla"})), .device = "xla:0"});
  c.push_back({.id = "XC_accelerator_4_36", .host = tpu2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(ACC).UseCpu().Runtime({"xla"})), .device = "cpu"});
  c.push_back({.id = "XC_no_torch_xla_4_36", .host = tpu2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).UseCpu().Runtime({"cpu"})), .device = "cpu"});
  // ---- V-TF-XLA-DEVICES: up to Transformers 4.41 the same check hands hpu, mps, ... (and mlu before 4.40) over ----
  const auto cpu = H({});
  c.push_back({.id = "XD_hpu_4_40", .host = cpu,
               .request = Versions("4.40.2", "0.29.3",
                                   Req::Train(TA).Runtime({"cpu", "xla"}).Env("ACCELERATE_TORCH_DEVICE", "hpu")),
               .code = kPrecondition,
               .words = {"raises RuntimeError", "USE_TORCH_XLA is not false", "device hpu", "xm.xla_real_devices",
                         "V-TF-XLA-DEVICES (Transformers 4.40.2 < 4.42.0", "use Transformers >= 4.42.0",
                         "or set USE_TORCH_XLA=0"}});
  c.push_back({.id = "XD_hpu_4_41_1", .host = cpu,
               .request = Versions("4.41.1", "0.30.1",
                                   Req::Train(TA).Runtime({"cpu", "xla"}).Env("ACCELERATE_TORCH_DEVICE", "hpu")),
               .code = kPrecondition, .words = {"V-TF-XLA-DEVICES"}});
  c.push_back({.id = "XD_hpu_4_42", .host = cpu,
               .request = Versions("4.42.0", "0.31.0",
                                   Req::Train(TA).Runtime({"cpu", "xla"}).Env("ACCELERATE_TORCH_DEVICE", "hpu")),
               .device = "hpu"});
  // USE_TORCH_XLA=0 (Transformers 4.39+ does not see torch_xla) or no torch_xla: nothing asks xm.xla_real_devices,
  // and without its XLA check TrainingArguments' own chain ends in cpu (ACCELERATE_TORCH_DEVICE unread before 4.43).
  c.push_back({.id = "XD_hpu_4_40_use_torch_xla_0", .host = cpu,
               .request = Versions("4.40.2", "0.29.3",
                                   Req::Train(TA).Runtime({"cpu", "xla"}).Env("ACCELERATE_TORCH_DEVICE", "hpu")
                                       .Env("USE_TORCH_XLA", "0")),
               .device = "cpu"});
  c.push_back({.id = "XD_hpu_4_40_no_torch_xla", .host = cpu,
               .request = Versions("4.40.2", "0.29.3",
                                   Req::Train(TA).Runtime({"cpu"}).Env("ACCELERATE_TORCH_DEVICE", "hpu")),
               .device = "cpu"});
  // A torchrun world of one that Accelerate before 0.28 runs as a single process with cpu=True: TrainingArguments'
  // own XLA check still takes PartialState's device, ACCELERATE_TORCH_DEVICE's or cpu, which the bf16 check then
  // hands to xm.xla_real_devices (the search's cases, executed at 4.36.0 / 4.36.1 + 0.25.0: xpu:0, RuntimeError).
  c.push_back({.id = "XC_world1_use_cpu_env_xpu_4_36", .host = cpu,
               .request = Versions("4.36.0", "0.25.0",
                                   Req::Train(TA).Rank(0, 1).UseCpu().Runtime({"cpu", "xla"})
                                       .Env("ACCELERATE_TORCH_DEVICE", "xpu:0")
                                       .Packages({{"torch", "2.8.0"}, {"torch_xla", "2.1.0"}})),
               .device = "xpu:0", .words = {"T-XLA TrainingArguments' own XLA check passes"}});
  c.push_back({.id = "XC_world1_accelerate_use_cpu_cuda_host_4_36", .host = cuda2,
               .request = Versions("4.36.1", "0.25.0",
                                   Req::Train(TA).Rank(0, 1).Runtime({"cuda", "xla"}).Env("ACCELERATE_USE_CPU", "1")
                                       .Packages({{"torch", "2.8.0"}, {"torch_xla", "2.5.0"}})),
               .code = kPrecondition, .words = {"V-TF-XLA-CPU", "device cpu"}});
  c.push_back({.id = "XC_cuda_host_4_36", .host = cuda2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Runtime({"cuda", "xla"})), .device = "cuda"});
  // ---- USE_TORCH_XLA: read by Accelerate from 0.28 (str_to_bool), Transformers from 4.39 (1 ON YES TRUE) ----
  c.push_back({.id = "UX_maybe_4_36_acc_0_25", .host = tpu2,
               .request = Versions("4.36.2", "0.25.0", Req::Train(TA).Runtime({"xla"}).Env("USE_TORCH_XLA", "maybe")),
               .device = "xla:0", .words = {"USE_TORCH_XLA=maybe is set, but this Accelerate does not read it"}});
  c.push_back({.id = "UX_maybe_acc_0_27_auto", .host = cuda2,
               .request = Versions("4.36.2", "0.27.2", Req::Infer("auto").Env("USE_TORCH_XLA", "maybe")),
               .device = "cuda:0"});
  c.push_back({.id = "UX_maybe_acc_0_28", .host = tpu2,
               .request = Versions("4.38.2", "0.28.0", Req::Train(TA).Runtime({"xla"}).Env("USE_TORCH_XLA", "maybe")),
               .code = kInvalid, .words = {"env.USE_TORCH_XLA='maybe'", "import accelerate raises ValueError"}});
  // Transformers 4.39 reads any value but 1, ON, YES, TRUE as off: its own XLA check does not pass, so
  // TrainingArguments takes its single-process chain (cuda:0); 4.38 ignores the value (Accelerate's `cuda`).
  for (const char* value : {"maybe", "y"}) {
    c.push_back({.id = absl::StrCat("UX_", value, "_4_39_acc_0_27"), .host = cuda2,
                 .request = Versions("4.39.0", "0.27.2",
                                     Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", value)),
                 .device = "cuda:0"});
    c.push_back({.id = absl::StrCat("UX_", value, "_4_38_acc_0_27"), .host = cuda2,
                 .request = Versions("4.38.2", "0.27.2",
                                     Req::Train(TA).Runtime({"cuda", "xla"}).Env("USE_TORCH_XLA", value)),
                 .device = "cuda", .words = {"V-TF-XLA-ENV (Transformers 4.38.2 < 4.39.0"}});
  }
  c.push_back({.id = "UX_y_4_39_acc_0_28", .host = tpu2,
               .request = Versions("4.39.0", "0.28.0", Req::Train(ACC).Runtime({"xla"}).Env("USE_TORCH_XLA", "y")),
               .device = "xla:0"});
  // ---- device_map="auto" on Intel GPUs: whether get_max_memory reads their free memory --------------------
  const Packages stock26 = {{"torch", "2.6.0+xpu"}}, stock25 = {{"torch", "2.5.1+xpu"}};
  const Packages ipex25 = {{"torch", "2.5.1"}, {"intel_extension_for_pytorch", "2.5.10+xpu"}};
  const Packages ipex24 = {{"torch", "2.4.1"}, {"intel_extension_for_pytorch", "2.4.0+xpu"}};
  struct Auto {
    const char* id;
    const char* acc;
    Packages packages;
    bool told;
    const char* device;
    const char* rule;
  };
  for (const Auto& a : std::vector<Auto>{
           {"XM_ipex_0_34", "0.34.2", ipex25, true, "cpu", "V-ACC-XPU-MEM-IPEX (Accelerate 0.34.2 < 1.0.0"},
           {"XM_untold_0_34", "0.34.2", {}, false, "cpu", "whatever the job's packages"},
           {"XM_ipex_1_0", "1.0.1", ipex25, true, "cpu", "use Accelerate >= 1.1.0"},
           {"XM_ipex_1_1", "1.1.0", ipex25, true, "xpu:0", ""},
           {"XM_old_ipex_1_2", "1.2.1", ipex24, true, "cpu", "V-ACC-XPU-MEM-FIX"},
           {"XM_stock_1_2", "1.2.1", stock26, true, "cpu", "V-ACC-XPU-MEM-STOCK (Accelerate 1.2.1 < 1.3.0"},
           {"XM_stock_1_3", "1.3.0", stock26, true, "xpu:0", ""},
           {"XM_old_stock_1_3", "1.3.0", stock25, true, "cpu", "torch 2.5.1+xpu and no usable"},
           {"XM_untold_1_2", "1.2.1", {}, false, "xpu:0", "the job's packages are not known"},
           {"XM_untold_1_3", "1.3.0", {}, false, "xpu:0", ""}}) {
    Req r = Versions("", a.acc, Req::Infer("auto"));
    if (a.told) r.Packages(a.packages);
    c.push_back({.id = a.id, .host = xpu2, .request = r, .device = a.device,
                 .words = *a.rule ? std::vector<std::string>{a.rule} : std::vector<std::string>{}});
  }
  // get_max_memory probes the first row of its order and no other: on a CUDA + Intel GPU host the Intel GPUs'
  // missing budget leaves the model on cpu, not on the CUDA GPUs.
  c.push_back({.id = "XM_cuda_xpu_1_2", .host = H({{CUDA, 2}, {v1::ROW_XPU, 2}}),
               .request = Versions("", "1.2.1", Req::Infer("auto").Packages({{"torch", "2.6.0"}})), .device = "cpu",
               .words = {"get_max_memory probes xpu", "and no other row"}});
  c.push_back({.id = "XM_strict_0_34", .host = xpu2,
               .request = Versions("", "0.34.2", Req::Infer("auto").Strict()), .code = kPrecondition,
               .words = {"strict", "max_memory_allocated", "answer without strict: cpu"}});
  return c;
}

class ReleaseQuirkCases : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(ReleaseQuirkCases, Resolves) { ExpectVersionCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Semantics, ReleaseQuirkCases, ::testing::ValuesIn(Cases()), CaseId);

// An Intel GPU whose budget the release cannot read: the answer's max_memory is the library's own, each Intel GPU
// at 0 (or, 1.0.x with Intel Extension for PyTorch, left out) and the spill-over device, so a job that passes it
// gets what the library does; a readable one has every Intel GPU in devices.
TEST(ReleaseQuirks, UnreadableXpuMemoryLeavesOnlyTheSpillOverBudget) {
  const v1::Inventory inv = HostOf({{v1::ROW_XPU, 2}})();
  absl::StatusOr<v1::ResolveDeviceResponse> before =
      placement::Resolve(inv, Versions("", "1.2.1", Req::Infer("auto").Packages({{"torch", "2.6.0+xpu"}})));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->max_memory().size(), 3u) << before->DebugString();
  EXPECT_EQ(before->max_memory().at("0"), 0u);
  EXPECT_EQ(before->max_memory().at("1"), 0u);
  EXPECT_GT(before->max_memory().at("cpu"), 0u);
  EXPECT_EQ(absl::StrJoin(before->devices(), ","), "cpu");
  // 1.0.x with Intel Extension for PyTorch: the Intel GPUs have no key at all.
  absl::StatusOr<v1::ResolveDeviceResponse> left_out = placement::Resolve(
      inv, Versions("", "1.0.1", Req::Infer("auto").Packages({{"torch", "2.5.1"},
                                                              {"intel_extension_for_pytorch", "2.5.10+xpu"}})));
  ASSERT_TRUE(left_out.ok()) << left_out.status();
  EXPECT_EQ(left_out->max_memory().size(), 1u) << left_out->DebugString();
  absl::StatusOr<v1::ResolveDeviceResponse> after =
      placement::Resolve(inv, Versions("", "1.3.0", Req::Infer("auto").Packages({{"torch", "2.6.0+xpu"}})));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(absl::StrJoin(after->devices(), ","), "xpu:0,xpu:1,cpu");
}

// V-TF-TORCH, V-TF-TP-IMPORT, V-TF-USE-TF: below its release's torch minimum, or (4.x) with USE_TF / USE_TORCH saying so,
// Transformers disables PyTorch at import and every Transformers API fails in the job (executed at the tags:
// 4.51.3 takes torch 2.0.1, 4.52.0 does not; 5.0.0 takes 2.2.0 and not 2.1.2; 5.1.0 not 2.3.1; 5.14.0 takes 2.4.1,
// 5.15.0 does not, nor 2.5.0a0; 4.57.6 with USE_TF=1 or USE_TORCH=0 fails, 5.0.0 with USE_TF=1 does not; with
// torch 2.1.0 and 2.4.1, pipeline and from_pretrained fail at 4.52.0 and 4.52.2 and not at 4.52.1, 4.52.3, 4.52.4). The
// answer is the rules' own, beside a warning and a hazard; only where the job's Transformers is known.
TEST(ReleaseQuirks, TransformersThatDisablesPyTorchIsAWarningAndAHazard) {
  const v1::Inventory cuda2 = HostOf({{CUDA, 2}})();
  struct Case {
    const char* id;
    Req request;
    const char* device;
    std::vector<std::string> warning;  // words of one warning; empty: no warning names V-TF-TORCH or V-TF-USE-TF
  };
  auto fp = [](const char* tf, const char* acc, const char* torch) {
    return Versions(tf, acc, Req::Infer("auto").Packages({{"torch", torch}}));
  };
  auto ta = [](const char* tf, const char* acc, const char* torch) {
    return Versions(tf, acc, Req::Train(TA).Packages({{"torch", torch}}));
  };
  const std::vector<Case> cases = {
      {"fp_5_15_torch_2_4", fp("5.15.0", "1.14.0", "2.4.1"), "cuda:0",
       {"torch 2.4.1 (the test's job) is below 2.5, the minimum of Transformers 5.15.0", "Disabling PyTorch because "
        "PyTorch >= 2.5 is required", "from_pretrained fails in the job", "install torch >= 2.5.0, or a Transformers "
        "release before 5.15.0 (V-TF-TORCH-2.5)"}},
      {"fp_5_14_torch_2_4", fp("5.14.0", "1.13.0", "2.4.1"), "cuda:0", {}},
      {"fp_5_15_torch_2_5", fp("5.15.0", "1.14.0", "2.5.0+cu124"), "cuda:0", {}},
      {"fp_5_15_torch_2_5_post", fp("5.15.0", "1.14.0", "2.5.0.post1"), "cuda:0", {}},
      {"fp_5_15_ngc_prerelease", fp("5.15.0", "1.14.0", "2.5.0a0+872d972e41.nv24.08"), "cuda:0",
       {"2.5.0a0+872d972e41.nv24.08", "a pre-release or dev build of it", "(V-TF-TORCH-2.5)"}},
      {"fp_5_15_torch_2_3", fp("5.15.0", "1.14.0", "2.3.1"), "cuda:0",
       {"below 2.5", "a Transformers release before 5.1.0 (V-TF-TORCH-2.5)"}},
      {"ta_5_0_torch_2_1", ta("5.0.0", "1.11.0", "2.1.2"), "cuda:0", {"below 2.2", "TrainingArguments fails",
                                                                      "before 5.0.0 (V-TF-TORCH-2.2)"}},
      {"ta_5_0_torch_2_2", ta("5.0.0", "1.11.0", "2.2.0"), "cuda:0", {}},
      {"ta_5_1_torch_2_3", ta("5.1.0", "1.11.0", "2.3.1"), "cuda:0", {"below 2.4", "(V-TF-TORCH-2.4)"}},
      {"ta_4_52_torch_2_0", ta("4.52.0", "1.7.0", "2.0.1"), "cuda:0", {"below 2.1", "before 4.52.0 (V-TF-TORCH-2.1)"}},
      {"ta_4_52_torch_2_1_rc", ta("4.52.4", "1.7.0", "2.1.0rc1"), "cuda:0", {"a pre-release or dev build"}},
      {"ta_4_51_torch_2_0", ta("4.51.3", "1.6.0", "2.0.1"), "cuda:0", {}},
      // 4.52.0 and 4.52.2 cannot import their models below torch 2.5 (NameError: Replicate); 4.52.1 and 4.52.3
      // can, and TrainingArguments alone imports none.
      {"fp_4_52_0_torch_2_4", fp("4.52.0", "1.7.0", "2.4.1"), "cuda:0",
       {"torch 2.4.1 (the test's job) is below 2.5, and Transformers 4.52.0 fails to import its models",
        "name 'Replicate' is not defined", "install Transformers 4.52.3 or 4.52.4", "(V-TF-TP-IMPORT"}},
      {"fp_4_52_1_torch_2_4", fp("4.52.1", "1.7.0", "2.4.1"), "cuda:0", {}},
      {"fp_4_52_2_torch_2_4", fp("4.52.2", "1.7.0", "2.4.1"), "cuda:0", {"Transformers 4.52.2 fails to import"}},
      {"fp_4_52_3_torch_2_4", fp("4.52.3", "1.7.0", "2.4.1"), "cuda:0", {}},
      {"fp_4_52_2_torch_2_5", fp("4.52.2", "1.7.0", "2.5.1"), "cuda:0", {}},
      {"ta_4_52_2_torch_2_4", ta("4.52.2", "1.7.0", "2.4.1"), "cuda:0", {}},
      {"pipe_4_52_0_torch_2_1", Versions("4.52.0", "1.7.0", Req::Pipe("0").Packages({{"torch", "2.1.0"}})), "cuda:0",
       {"pipeline fails in the job", "(V-TF-TP-IMPORT"}},
      {"pipe_5_15_torch_2_4", Versions("5.15.0", "1.14.0", Req::Pipe("0").Packages({{"torch", "2.4.1"}})), "cuda:0",
       {"pipeline fails in the job"}},
      // Accelerate's own API does not import Transformers; an emulated release is not the job's.
      {"accelerate_torch_2_0", Versions("5.15.0", "1.14.0", Req::Train(ACC).Packages({{"torch", "2.0.1"}})), "cuda",
       {}},
      {"fp_release_not_told_torch_2_0", Versions("", "1.14.0", Req::Infer("auto").Packages({{"torch", "2.0.1"}})),
       "cuda:0", {}},
      {"fp_transformers_release_unknown", Versions("", "1.14.0", Req::Infer("auto").Packages({{"torch", "2.0.1"},
                                                                                              {"transformers", ""}})),
       "cuda:0", {}},
      {"ta_emulated_4_x_use_tf", Versions("", "1.0.1", Req::Train(TA).Env("USE_TF", "1")), "cuda:0", {}},
      {"fp_unreadable_torch", fp("5.15.0", "1.14.0", "nightly"), "cuda:0",
       {"torch's version 'nightly' (the test's job) is not one packaging reads", "minimum, 2.5",
        "install a torch release >= 2.5.0 (V-TF-TORCH-2.5)"}},
      {"fp_unreadable_torch_4_51", fp("4.51.3", "1.6.0", "nightly"), "cuda:0", {}},
      // Before 5.0 USE_TF is read first: torch's release is never looked at.
      {"ta_4_52_use_tf_and_torch_2_0", Versions("4.52.0", "1.7.0", Req::Train(TA).Env("USE_TF", "1")
                                                                      .Packages({{"torch", "2.0.1"}})), "cuda:0",
       {"USE_TF='1'", "unset USE_TF (V-TF-USE-TF)"}},
      {"pipe_4_57_use_tf", Versions("4.57.6", "1.10.1", Req::Pipe("0").Env("USE_TF", "yes")), "cuda:0",
       {"pipeline fails in the job, or runs on TensorFlow where it is installed"}},
      {"ta_4_57_use_tf_long_s", Versions("4.57.6", "1.10.1", Req::Train(TA).Env("USE_TF", "ye\xC5\xBF")), "cuda:0",
       {"USE_TF='ye"}},
      {"ta_4_57_use_tf", Versions("4.57.6", "1.10.1", Req::Train(TA).Env("USE_TF", "1")), "cuda:0",
       {"USE_TF='1' (Transformers 4.57.6, before 5.0)", "Disabling PyTorch because USE_TF is set",
        "TrainingArguments fails in the job whatever the device", "unset USE_TF (V-TF-USE-TF)"}},
      {"ta_4_57_use_tf_on", Versions("4.57.6", "1.10.1", Req::Train(TA).Env("USE_TF", "on")), "cuda:0",
       {"USE_TF='on'"}},
      {"ta_4_57_use_torch_0", Versions("4.57.6", "1.10.1", Req::Train(TA).Env("USE_TORCH", "0")), "cuda:0",
       {"USE_TORCH='0'", "unset USE_TORCH or set USE_TORCH=1 (V-TF-USE-TF)"}},
      {"ta_4_36_use_torch_0_use_tf", Versions("4.36.2", "0.25.0", Req::Train(TA).Env("USE_TORCH", "no")
                                                                    .Env("USE_TF", "YES")), "cuda:0",
       {"unset USE_TORCH or set USE_TORCH=1 and unset USE_TF"}},
      {"ta_4_57_use_torch_auto_use_tf_no", Versions("4.57.6", "1.10.1", Req::Train(TA).Env("USE_TORCH", "auto")
                                                                          .Env("USE_TF", "no")), "cuda:0", {}},
      {"ta_5_0_use_tf", Versions("5.0.0", "1.11.0", Req::Train(TA).Env("USE_TF", "1")), "cuda:0", {}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.id);
    absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(cuda2, k.request);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->device(), k.device);
    std::vector<std::string> named;
    for (const std::string& w : got->warnings()) {
      if (absl::StrContains(w, "(V-TF-TORCH-") || absl::StrContains(w, "(V-TF-USE-TF)") ||
          absl::StrContains(w, "(V-TF-TP-IMPORT")) {
        named.push_back(w);
      }
    }
    if (k.warning.empty()) {
      EXPECT_THAT(named, ::testing::IsEmpty());
      continue;
    }
    ASSERT_EQ(named.size(), 1u) << got->DebugString();
    for (const std::string& w : k.warning) EXPECT_THAT(named[0], ::testing::HasSubstr(w));
    // A hazard: strict refuses the same request, naming the rule.
    v1::ResolveDeviceRequest strict = k.request;
    strict.set_strict(true);
    absl::StatusOr<v1::ResolveDeviceResponse> refused = placement::Resolve(cuda2, strict);
    EXPECT_EQ(refused.status().code(), kPrecondition);
    EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr(named[0]));
  }
}

// packaging's version order, as Transformers compares the installed torch with its minimum: each expectation is
// what packaging 23.0's Version(text) < Version("2.5.0") answers (None: InvalidVersion), and whether the text is
// a pre-release or dev release of 2.5.0 itself.
TEST(ReleaseQuirks, PackageVersionBelowFollowsPackagingsOrder) {
  using placement::PackageVersionBelow;
  const placement::Version v25{2, 5, 0};
  struct Case {
    const char* text;
    std::optional<bool> below;
    bool prerelease_of_min;
  };
  const std::vector<Case> cases = {
      {"2.4.1", true, false}, {"2.4.1+cu121", true, false}, {"V2.4", true, false}, {"0!2.4.9", true, false},
      {"2", true, false}, {"1.99.99.99", true, false}, {"2.4.99999999999", true, false},
      {"2.5.0a0", true, true}, {"2.5.0a0+872d972e41.nv24.08", true, true}, {"2.5.0rc1", true, true},
      {"2.5.0.dev20240901", true, true}, {"2.5.0-rc.1", true, true}, {"2.5.0b2", true, true},
      {"2.5.0alpha", true, true}, {"2.5.0pre1", true, true}, {"2.5.0c1", true, true}, {"2.5.0preview", true, true},
      {"2.5.0a.", true, true}, {"2.5.0.dev20240901+cu121", true, true}, {"2.5.0.rc1", true, true},
      {"v2.5.0a0", true, true}, {" 2.5.0a0 ", true, true}, {"0!2.5.0a0", true, true},
      {"2.5.0.post1.dev0", false, false}, {"2.5.0-1.dev3", false, false}, {"2.5", false, false},
      {"2.5.0", false, false}, {"2.5.0+cpu", false, false}, {"2.5.0.post1", false, false}, {"2.5.0-1", false, false},
      {"2.5.0rev2", false, false}, {"2.5.0r", false, false}, {"2.5.0.0.1", false, false}, {"2.5.1a0", false, false},
      {"2.10.0", false, false}, {"1!1.0", false, false}, {" 2.6.0 ", false, false}, {"3", false, false},
      {"2.5.0_post_3", false, false}, {"2.5.0+ubuntu-1.2", false, false},
  };
  for (const Case& k : cases) {
    bool pre = !k.prerelease_of_min;
    EXPECT_EQ(PackageVersionBelow(k.text, v25, &pre), k.below) << k.text;
    EXPECT_EQ(pre, k.prerelease_of_min) << k.text;
  }
  for (const char* invalid : {"", "nightly", "2.5.0+", "2.5.0x", "x!2.5", "2.5.0.", ".5", "2.5.0rcfoo", "2.5.0abc",
                              "2.5.0rabbit", "1!garbage", "2.5.0+a..b", "2.5.0++a", "2..5", "2.5.0-", "2.5.0 rc1",
                              "2.5.0a1b2", "1!", "v", "2.5.0.dev1.dev2", "2.5.0.dev0.post1"}) {
    EXPECT_EQ(PackageVersionBelow(invalid, v25), std::nullopt) << invalid;
  }
  EXPECT_EQ(PackageVersionBelow(std::string(300, '1'), v25), std::nullopt);  // bounded
}

}  // namespace
}  // namespace devplace::testing
