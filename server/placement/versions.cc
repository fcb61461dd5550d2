#include "server/placement/versions.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"

namespace devplace::placement {
namespace {

using L = Library;
using F = Feature;
using K = OrderKind;

// The last Transformers 4.x minor line, emulated when only an Accelerate release below 1.1.0 is named.
constexpr Version kLast4x{4, 57, 0};


// Each row: the boundary, the rule id, what changed, where it lives, and /*commits=*/ the commit(s)
// that brought it; `since` is the first release tag, patch releases included, that contains any of
// them (a change can reach a patch release as a release-branch commit of its own and main as another).
// scripts/fidelity/run.py --boundaries checks them against every release tag and writes
// tests/placement/version_boundaries.txt, which versions_test.cc holds this table to; run.py --probes
// executes each row's covering workload at the tags around it.
std::vector<FeatureRule> MakeAccelerateFeatureRules() {
  return {
      {F::kAccXlaImportOnly, L::kAccelerate, {0, 28, 0}, "V-ACC-XLA-IMPORT",
       "is_torch_xla_available() only tests that torch_xla imports (and USE_TORCH_XLA): torch_xla installed means "
       "XLA, with or without a TPU; before 0.28 is_tpu_available() needed an XLA device (a TPU, a Neuron core "
       "through torch-neuronx, or from torch_xla 2.0 its PJRT CPU device, T-XLA-PJRT) and no CUDA GPU, and "
       "USE_TORCH_XLA was not read",
       "huggingface/accelerate:src/accelerate/utils/imports.py is_torch_xla_available (first tag v0.28.0, PR #2176; "
       "is_tpu_available up to v0.27.2)",
       /*commits=*/"b443be70"},
      {F::kAccLocalRankDistributed, L::kAccelerate, {0, 28, 0}, "V-ACC-LOCAL-RANK",
       "PartialState.__init__ makes a process launched with LOCAL_RANK MULTI_CPU (MULTI_XPU on an Intel GPU) when "
       "no CUDA GPU or NPU takes it, even in a world of one (single-process torchrun: LOCAL_RANK=0, WORLD_SIZE=1); "
       "before 0.28 that branch needed a world size (PMI_SIZE, OMPI_COMM_WORLD_SIZE, MV2_COMM_WORLD_SIZE, "
       "WORLD_SIZE) above 1, so such a process was a single one (type NO): ACCELERATE_TORCH_DEVICE kept, else cpu "
       "with cpu=True, else default_device",
       "huggingface/accelerate:src/accelerate/state.py PartialState.__init__ (first tag v0.28.0, PR #2473; "
       "executed at v0.25.0, read at every tag from v0.25.0 to v0.27.2)",
       /*commits=*/"fa83efc3"},
      {F::kAccSetDevice, L::kAccelerate, {0, 29, 0}, "V-ACC-SET-DEVICE",
       "PartialState.set_device keeps a device ACCELERATE_TORCH_DEVICE set, in the MULTI_CPU branch too (the XLA "
       "branch only from 0.29.2, V-ACC-XLA-CPU), and a MULTI_CPU process gets cpu; before 0.29 the MULTI_CPU branch "
       "set cpu (cpu=True), else xpu:<local_rank> or default_device (mps on an Apple host) over it",
       "huggingface/accelerate:src/accelerate/state.py PartialState.set_device, _prepare_backend (first tag v0.29.0, "
       "PR #2576; PartialState.__init__ up to v0.28.0)",
       /*commits=*/"11568e56"},
      {F::kAccXlaBeforeCpu, L::kAccelerate, {0, 29, 2}, "V-ACC-XLA-CPU",
       "XLA is a backend of _prepare_backend, chosen before the cpu flag, so it wins over use_cpu / "
       "ACCELERATE_USE_CPU, and its device is set by set_device, which keeps a device ACCELERATE_TORCH_DEVICE set; "
       "before 0.29.2 PartialState.__init__ took the XLA branch only when `not cpu` and set xm.xla_device() over "
       "ACCELERATE_TORCH_DEVICE",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend, set_device (first tag v0.29.2: "
       "the release-branch commit \"Patch for v0.29.2\"; on the main line PR #2634, first tag v0.30.0)",
       /*commits=*/"759a9336 6386f701"},
      {F::kAccSetDeviceByType, L::kAccelerate, {0, 29, 2}, "V-ACC-WORLD-1",
       "set_device gives a process launched with LOCAL_RANK its distributed type's device, <type>:<local_rank>, "
       "even in a world of one (single-process torchrun: LOCAL_RANK=0, WORLD_SIZE=1); in 0.29.0 and 0.29.1 "
       "set_device tested num_processes == 1 and gave such a process default_device, the bare type (`cuda`, "
       "`npu`, `mps` on an Apple host) or cpu with cpu=True; before 0.29 PartialState.__init__ set "
       "<type>:<local_rank> itself",
       "huggingface/accelerate:src/accelerate/state.py PartialState.set_device (first tag v0.29.2: the "
       "release-branch commit \"Patch for v0.29.2\"; on the main line PR #2634, first tag v0.30.0; the "
       "num_processes test came with PR #2576, V-ACC-SET-DEVICE)",
       /*commits=*/"759a9336 6386f701"},
      {F::kAccStockXpu, L::kAccelerate, {0, 32, 0}, "V-ACC-XPU-STOCK",
       "is_xpu_available() accepts stock PyTorch's torch.xpu (torch >= 2.4); before 0.32 Accelerate sees an Intel "
       "GPU only through Intel Extension for PyTorch (intel_extension_for_pytorch installed)",
       "huggingface/accelerate:src/accelerate/utils/imports.py is_xpu_available (first tag v0.32.0, PR #2825)",
       /*commits=*/"3b5a00e0"},
      {F::kAccIndexModulo, L::kAccelerate, {0, 33, 0}, "V-ACC-MODULO",
       "the distributed device index is local_process_index % device_count() (several processes may share a "
       "device); before 0.33 it was local_process_index itself, and a rank beyond the visible count fails in "
       "torch.<type>.set_device",
       "huggingface/accelerate:src/accelerate/state.py PartialState.set_device (first tag v0.33.0, PR #2916)",
       /*commits=*/"c6da9f86"},
      {F::kAccXpuBare, L::kAccelerate, {1, 0, 0}, "V-ACC-XPU-BARE",
       "default_device returns `xpu`; before 1.0 it returned `xpu:0`",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v1.0.0, PR #3133)",
       /*commits=*/"10776115"},
      {F::kAccXpuMemoryIpex, L::kAccelerate, {1, 0, 0}, "V-ACC-XPU-MEM-IPEX",
       "get_max_memory reads an XPU's free memory through Intel Extension for PyTorch's mem_get_info when IPEX is "
       "installed, behind compare_versions(<IPEX's version string>, ...), which looks the string up as a package "
       "name and raises: with IPEX every Intel GPU \"seems unavailable\" and device_map=\"auto\" loads on cpu, until "
       "V-ACC-XPU-MEM-FIX; before 1.0 torch.xpu's own figures were read",
       "huggingface/accelerate:src/accelerate/utils/memory.py get_xpu_available_memory (first tag v1.0.0, PR #3076)",
       /*commits=*/"4b4c0369"},
      {F::kAccXpuMemoryIpexFixed, L::kAccelerate, {1, 1, 0}, "V-ACC-XPU-MEM-FIX",
       "get_xpu_available_memory parses IPEX's version before comparing it, so an IPEX job's Intel GPUs count in "
       "get_max_memory again; in 1.0.x they did not (V-ACC-XPU-MEM-IPEX)",
       "huggingface/accelerate:src/accelerate/utils/memory.py get_xpu_available_memory (first tag v1.1.0, PR #3165)",
       /*commits=*/"292954b5"},
      {F::kAccXpuMemoryStock, L::kAccelerate, {1, 3, 0}, "V-ACC-XPU-MEM-STOCK",
       "get_xpu_available_memory reads stock PyTorch's torch.xpu.mem_get_info (torch >= 2.6) when the job has no "
       "Intel Extension for PyTorch; before 1.3 such a job's Intel GPUs got torch.xpu.max_memory_allocated, the "
       "memory this process has allocated (about 0 at start-up), so device_map=\"auto\" put every module on cpu",
       "huggingface/accelerate:src/accelerate/utils/memory.py get_xpu_available_memory (first tag v1.3.0, PR #3275)",
       /*commits=*/"d6d3e03c"},
      {F::kAccBalancedXpuUncounted, L::kAccelerate, {0, 31, 0}, "V-ACC-BALANCED-XPU",
       "get_balanced_memory counts a device only when torch.device(<its index key>) has the expected type, and an "
       "index is a CUDA device to torch, so Intel GPUs (like NPU, MLU, MUSA, SDAA and HPU devices, counted that way "
       "since get_max_memory first measured them) are no longer counted: no balancing, no 90 % buffer, no low_zero; "
       "before 0.31 an Intel GPU counted by get_device_properties(i).dev_type == \"gpu\"",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_balanced_memory (first tag v0.31.0, PR #2826)",
       /*commits=*/"30cb7ece"},
      {F::kAccMultiCpuNeedsCpu, L::kAccelerate, {1, 13, 0}, "V-ACC-MULTICPU",
       "a multi-process launch with no accelerator is MULTI_CPU only with cpu=True; otherwise the distributed type "
       "is NO and every process is a single one; before 1.13 it became MULTI_CPU (device cpu) anyway",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v1.13.0, PR #3883)",
       /*commits=*/"4826b66d"},
  };
}

std::vector<FeatureRule> MakeTransformersFeatureRules() {
  return {
      {F::kTfUseCpu, L::kTransformers, {4, 32, 0}, "V-TF-USE-CPU",
       "TrainingArguments has use_cpu; before 4.32 the same switch is spelled no_cuda=True (use_cpu does not "
       "exist there)",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments (first tag v4.32.0, PR #24863)",
       /*commits=*/"9dc965bb40"},
      {F::kTfPipelineXpuCheck, L::kTransformers, {4, 37, 0}, "V-TF-PIPE-XPU",
       "pipeline(device=...) raises ValueError for a device string containing xpu unless "
       "is_torch_xpu_available(check_device=True), which before 4.42 (V-TF-XPU-STOCK) needs Intel Extension for "
       "PyTorch; before it, torch.device() took the string and the model was moved there",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.37.0, PR #28326, "
       "the same commit as V-TF-PIPE-4.37)",
       /*commits=*/"a573ac74fd"},
      {F::kTfXlaReadsEnv, L::kTransformers, {4, 39, 0}, "V-TF-XLA-ENV",
       "is_torch_xla_available() reads USE_TORCH_XLA, so USE_TORCH_XLA=0 turns TrainingArguments' own XLA check off; "
       "before 4.39 that check (is_torch_tpu_available: torch_xla importable and xm.xla_device() works) ignored it "
       "and passed PartialState.device on, Accelerate's `cuda` on a CUDA host, not cuda:0",
       "huggingface/transformers:src/transformers/utils/import_utils.py is_torch_xla_available (first tag v4.39.0, "
       "PR #29334; is_torch_tpu_available up to v4.38.2)",
       /*commits=*/"873d9bb3cc"},
      {F::kTfXlaCpuDevice, L::kTransformers, {4, 39, 0}, "V-TF-XLA-CPU",
       "get_xla_device_type answers CPU for a cpu device; before 4.39, once TrainingArguments' own XLA check passed "
       "(torch_xla importable), __post_init__'s mixed-precision check called xm.xla_real_devices on any device "
       "that is not cuda, npu or xpu, which torch_xla refuses for all but xla:N: TrainingArguments(use_cpu=True) "
       "raised RuntimeError",
       "huggingface/transformers:src/transformers/training_args.py get_xla_device_type (first tag v4.39.0, "
       "PR #29334)",
       /*commits=*/"873d9bb3cc"},
      {F::kTfNoXlaDeviceCheck, L::kTransformers, {4, 42, 0}, "V-TF-XLA-DEVICES",
       "__post_init__'s mixed-precision checks no longer call get_xla_device_type; before 4.42, once Transformers "
       "saw torch_xla, its bf16 check handed every device but cuda, npu and xpu (mlu too from 4.40, cpu answered "
       "CPU from 4.39) to xm.xla_real_devices, which torch_xla refuses for all but xla:N: TrainingArguments on "
       "hpu, mps, musa or sdaa raised RuntimeError",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments.__post_init__ (first tag "
       "v4.42.0, PR #30999)",
       /*commits=*/"537deb7869"},
      {F::kTfStockXpu, L::kTransformers, {4, 42, 0}, "V-TF-XPU-STOCK",
       "is_torch_xpu_available() accepts stock PyTorch's torch.xpu (torch >= 2.4); before 4.42 Transformers sees an "
       "Intel GPU only through Intel Extension for PyTorch (intel_extension_for_pytorch installed)",
       "huggingface/transformers:src/transformers/utils/import_utils.py is_torch_xpu_available (first tag v4.42.0, "
       "PR #31238)",
       /*commits=*/"eed9ed6798"},
      {F::kTfTaMpsBranch, L::kTransformers, {4, 43, 0}, "V-TF-TA-MPS",
       "single-process TrainingArguments has its own MPS branch (after use_cpu), so ACCELERATE_USE_CPU alone leaves "
       "it on mps; before 4.43 mps came only through PartialState's device, which ACCELERATE_USE_CPU makes cpu and "
       "ACCELERATE_TORCH_DEVICE of another type makes that type",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.43.0, PR #31812)",
       /*commits=*/"ae9dd02ee1"},
      {F::kTfTaTorchDeviceFallback, L::kTransformers, {4, 43, 0}, "V-TF-TA-ENV",
       "single-process TrainingArguments with no accelerator falls back to ACCELERATE_TORCH_DEVICE; before it, "
       "the chain ended in `cuda:0 if cuda else cpu`",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.43.0, PR #31751)",
       /*commits=*/"2aa2a14481"},
      {F::kTfPipelineAccelDefault, L::kTransformers, {4, 47, 0}, "V-TF-PIPE-DEFAULT",
       "pipeline(device=None) puts the model on accelerator index 0, and an int device with no recognised "
       "accelerator is cpu; before it, device=None stayed on cpu (device -1; from 4.42 with a warning) and such "
       "an int raised ValueError (before 4.37, whose order knows only CUDA, it became cuda:<n>, which fails)",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.47.0, PR #34026 "
       "\"Better defaults\"; PR #31398 of 4.42 only added the warning)",
       /*commits=*/"05863817d6"},
      {F::kTfV5, L::kTransformers, {5, 0, 0}, "V-TF-V5",
       "v5: no_cuda and use_mps_device are removed, and Accelerate >= 1.1.0 is required (hpu:0 joined the "
       "single-process chain in 4.50, neuron:0 in 5.4: the V-TF-TA rows)",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments, setup.py (first tag v5.0.0, "
       "PRs #41017, #41234)",
       /*commits=*/"65dcd66cc8 c562c5d801"},
      // Rules of device_map normalisation (docs/SEMANTICS.md section 6, I-CUDA-RANK).
      {F::kTfOwnBalancedMemory, L::kTransformers, {5, 0, 0}, "V-TF-BALANCED",
       "from_pretrained's _get_device_map calls Transformers' own get_balanced_memory, which counts every "
       "accelerator key with a budget above 0, whatever the device type; before 5.0 it called Accelerate's, which "
       "counts only the devices torch.device(<index>) calls CUDA (V-ACC-BALANCED-XPU)",
       "huggingface/transformers:src/transformers/integrations/accelerate.py get_balanced_memory (first tag v5.0.0, "
       "PR #41548)",
       /*commits=*/"5db730786d"},
      {F::kTfCpuBudget90, L::kTransformers, {5, 0, 0}, "V-TF-CPU-90",
       "from_pretrained's _get_device_map reads the budgets through Transformers' own get_max_memory, which, when "
       "the job passes no max_memory, keeps 90 % of Accelerate's cpu budget (the available RAM), so what does not "
       "fit goes to disk sooner; the key \"mps\" (Apple silicon, where Accelerate gives no \"cpu\" key) stays "
       "whole; before 5.0 the cpu budget was all the available RAM",
       "huggingface/transformers:src/transformers/integrations/accelerate.py get_max_memory (first tag v5.0.0, "
       "PR #42632)",
       /*commits=*/"1d86d00ec3"},
      {F::kTfDeviceMapCudaRank, L::kTransformers, {5, 0, 0}, "V-TF-CUDA-RANK",
       "check_and_set_device_map turns the exact string \"cuda\" into cuda:<int(LOCAL_RANK), default 0> before "
       "torch.device(); no other device type is rewritten; before 5.0 from_pretrained passed torch.device(\"cuda\") "
       "on, the current CUDA device (cuda:0 unless the job called torch.cuda.set_device)",
       "huggingface/transformers:src/transformers/integrations/accelerate.py check_and_set_device_map (first tag "
       "v5.0.0, PR #42897; 4.x: modeling_utils.py PreTrainedModel.from_pretrained)",
       /*commits=*/"05c7e4a487"},
      // V-TF-TORCH: the torch release below which Transformers disables PyTorch at import
      // (utils/import_utils.py: is_torch_available() is False, "Disabling PyTorch because PyTorch >= X is
      // required"); each row raises the minimum of the one before.
      {F::kTfTorchMin21, L::kTransformers, {4, 52, 0}, "V-TF-TORCH-2.1",
       "Transformers disables PyTorch when the installed torch is below 2.1 (packaging's version order: 2.1.0a0 is "
       "below): is_torch_available() is False, so TrainingArguments, pipeline and from_pretrained fail in the job; "
       "before 4.52 any torch was taken",
       "huggingface/transformers:src/transformers/utils/import_utils.py _torch_available (first tag v4.52.0, "
       "PR #37234)",
       /*commits=*/"371c44d0ef"},
      {F::kTfTorchMin22, L::kTransformers, {5, 0, 0}, "V-TF-TORCH-2.2",
       "the minimum is torch 2.2 (is_torch_available() compares the installed torch itself)",
       "huggingface/transformers:src/transformers/utils/import_utils.py is_torch_available (first tag v5.0.0, "
       "PR #40925)",
       /*commits=*/"6eff44bb8d"},
      {F::kTfTorchMin24, L::kTransformers, {5, 1, 0}, "V-TF-TORCH-2.4", "the minimum is torch 2.4",
       "huggingface/transformers:src/transformers/utils/import_utils.py is_torch_available (first tag v5.1.0, "
       "PR #41307)",
       /*commits=*/"a276a763fa"},
      {F::kTfTorchMin25, L::kTransformers, {5, 15, 0}, "V-TF-TORCH-2.5", "the minimum is torch 2.5",
       "huggingface/transformers:src/transformers/utils/import_utils.py is_torch_available (first tag v5.15.0, "
       "PR #47609)",
       /*commits=*/"fdbd8b06fc"},
      {F::kTfNoUseTf, L::kTransformers, {5, 0, 0}, "V-TF-USE-TF",
       "USE_TF and USE_TORCH are not read (TensorFlow and JAX support removed); before 5.0 Transformers disabled "
       "PyTorch at import when USE_TF was 1/ON/YES/TRUE or USE_TORCH was set to anything but those or AUTO "
       "(upper-cased), before it looked at torch, so TrainingArguments and from_pretrained failed in the job and "
       "pipeline failed or ran on TensorFlow",
       "huggingface/transformers:src/transformers/utils/import_utils.py USE_TF, USE_TORCH (first tag v5.0.0, "
       "PR #40760)",
       /*commits=*/"4df2529d79"},
      {F::kTfNativeTpu, L::kTransformers, {5, 9, 0}, "V-TF-TPU",
       "TrainingArguments selects tpu:0 when torch_tpu is available (after neuron:0, before cuda:0); Accelerate has "
       "no TPU branch",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v5.9.0, PR #45918)",
       /*commits=*/"6308a20ba4"},
  };
}

std::vector<OrderRule> MakeAccelerateOrderRules() {
  return {
      {K::kAccDefaultDevice, L::kAccelerate, {0, 25, 0}, {"mps", "cuda", "xpu", "npu"}, "V-ACC-DD-0.25",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (release commit of v0.25.0)",
       /*commits=*/"d08c23c2"},
      {K::kAccDefaultDevice, L::kAccelerate, {0, 29, 0}, {"mps", "mlu", "cuda", "xpu", "npu"}, "V-ACC-DD-0.29",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v0.29.0, PR #2552)",
       /*commits=*/"f2778d65"},
      {K::kAccDefaultDevice, L::kAccelerate, {0, 33, 0}, {"mps", "mlu", "musa", "cuda", "xpu", "npu"}, "V-ACC-DD-0.33",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v0.33.0, PR #2917)",
       /*commits=*/"12a007d5"},
      {K::kAccDefaultDevice, L::kAccelerate, {0, 34, 0}, {"mps", "mlu", "musa", "npu", "cuda", "xpu"}, "V-ACC-DD-0.34",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v0.34.0, PR #3021)",
       /*commits=*/"5536a3a8"},
      {K::kAccDefaultDevice, L::kAccelerate, {1, 5, 0}, {"mps", "mlu", "sdaa", "musa", "npu", "hpu", "cuda", "xpu"},
       "V-ACC-DD-1.5",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v1.5.0, PRs #3330, "
       "#3378)",
       /*commits=*/"ac3749dc d9e6af87"},
      {K::kAccDefaultDevice, L::kAccelerate, {1, 13, 0},
       {"mps", "mlu", "sdaa", "musa", "npu", "hpu", "cuda", "xpu", "neuron"}, "V-ACC-DD-1.13",
       "huggingface/accelerate:src/accelerate/state.py PartialState.default_device (first tag v1.13.0, PR #3935)",
       /*commits=*/"3bffed54"},

      {K::kAccDistributed, L::kAccelerate, {0, 25, 0}, {"cuda", "npu", "xpu"}, "V-ACC-DIST-0.25",
       "huggingface/accelerate:src/accelerate/state.py PartialState.__init__ (release commit of v0.25.0)",
       /*commits=*/"d08c23c2"},
      {K::kAccDistributed, L::kAccelerate, {0, 29, 0}, {"mlu", "cuda", "npu", "xpu"}, "V-ACC-DIST-0.29",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v0.29.0, PRs #2552, "
       "#2576)",
       /*commits=*/"f2778d65 11568e56"},
      {K::kAccDistributed, L::kAccelerate, {0, 33, 0}, {"mlu", "musa", "cuda", "npu", "xpu"}, "V-ACC-DIST-0.33",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v0.33.0, PR #2917)",
       /*commits=*/"12a007d5"},
      {K::kAccDistributed, L::kAccelerate, {0, 34, 0}, {"mlu", "musa", "npu", "cuda", "xpu"}, "V-ACC-DIST-0.34",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v0.34.0, PR #3021)",
       /*commits=*/"5536a3a8"},
      // 1.5 to 1.13: MLU's branch is an `if` of its own and the chain after it (SDAA first) starts
      // again, so any later row wins over MLU (fixed in 1.14, PR #4057).
      {K::kAccDistributed, L::kAccelerate, {1, 5, 0}, {"sdaa", "musa", "npu", "hpu", "cuda", "mlu", "xpu"},
       "V-ACC-DIST-1.5",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v1.5.0, PRs #3330, "
       "#3378: `if is_mlu_available()` then `if is_sdaa_available() ... elif`)",
       /*commits=*/"ac3749dc d9e6af87"},
      {K::kAccDistributed, L::kAccelerate, {1, 6, 0}, {"sdaa", "musa", "npu", "hpu", "cuda", "xpu", "mlu"},
       "V-ACC-DIST-1.6",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v1.6.0, PR #3401: "
       "XPU joins the chain, with xccl)",
       /*commits=*/"9c4eeb9b"},
      {K::kAccDistributed, L::kAccelerate, {1, 13, 0}, {"sdaa", "musa", "npu", "hpu", "cuda", "xpu", "neuron", "mlu"},
       "V-ACC-DIST-1.13",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v1.13.0, PR #3935)",
       /*commits=*/"3bffed54"},
      {K::kAccDistributed, L::kAccelerate, {1, 14, 0}, {"mlu", "sdaa", "musa", "npu", "hpu", "cuda", "xpu", "neuron"},
       "V-ACC-DIST-1.14",
       "huggingface/accelerate:src/accelerate/state.py PartialState._prepare_backend (first tag v1.14.0, PR #4057: "
       "MLU part of the elif chain)",
       /*commits=*/"6b6d0ec6"},

      {K::kAccMaxMemory, L::kAccelerate, {0, 25, 0}, {"xpu", "cuda"}, "V-ACC-MEM-0.25",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_max_memory (release commit of v0.25.0)",
       /*commits=*/"d08c23c2"},
      {K::kAccMaxMemory, L::kAccelerate, {0, 26, 0}, {"npu", "xpu", "cuda"}, "V-ACC-MEM-0.26",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_max_memory (first tag v0.26.0, PR #2222)",
       /*commits=*/"9964f90f"},
      {K::kAccMaxMemory, L::kAccelerate, {0, 29, 0}, {"npu", "mlu", "xpu", "cuda"}, "V-ACC-MEM-0.29",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_max_memory (first tag v0.29.0, PR #2552)",
       /*commits=*/"f2778d65"},
      {K::kAccMaxMemory, L::kAccelerate, {0, 33, 0}, {"npu", "mlu", "musa", "xpu", "cuda"}, "V-ACC-MEM-0.33",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_max_memory (first tag v0.33.0, PR #2917)",
       /*commits=*/"12a007d5"},
      {K::kAccMaxMemory, L::kAccelerate, {1, 5, 0}, {"npu", "mlu", "sdaa", "musa", "xpu", "hpu", "cuda"}, "V-ACC-MEM-1.5",
       "huggingface/accelerate:src/accelerate/utils/modeling.py get_max_memory (first tag v1.5.0, PRs #3330, #3378)",
       /*commits=*/"ac3749dc d9e6af87"},
  };
}

std::vector<OrderRule> MakeTransformersOrderRules() {
  return {
      {K::kTfSingle, L::kTransformers, {4, 30, 0}, {"mps", "cuda"}, "V-TF-TA-4.30",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (release commit "
       "of v4.30.0; MPS through PartialState's device)",
       /*commits=*/"fe861e578f"},
      {K::kTfSingle, L::kTransformers, {4, 32, 0}, {"mps", "npu", "cuda"}, "V-TF-TA-4.32",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.32.0, PR #24879)",
       /*commits=*/"9c875839c0"},
      {K::kTfSingle, L::kTransformers, {4, 34, 0}, {"mps", "xpu", "npu", "cuda"}, "V-TF-TA-4.34",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first release "
       "v4.34.0, PR #25714)",
       /*commits=*/"70a98024b1"},
      {K::kTfSingle, L::kTransformers, {4, 40, 0}, {"mps", "xpu", "mlu", "npu", "cuda"}, "V-TF-TA-4.40",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.40.0, PR #29627)",
       /*commits=*/"75769744e9"},
      // 4.42 dropped the `device.type == "mps"` clause that took PartialState's mps; 4.43 added its own
      // MPS branch (executed: 4.42.4 on an Apple host gives cpu).
      {K::kTfSingle, L::kTransformers, {4, 42, 0}, {"xpu", "mlu", "npu", "cuda"}, "V-TF-TA-4.42",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.42.0, PR #29781: no MPS)",
       /*commits=*/"92d1d97c05"},
      {K::kTfSingle, L::kTransformers, {4, 43, 0}, {"mps", "xpu", "mlu", "npu", "cuda"}, "V-TF-TA-4.43",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.43.0, PR #31812: its own MPS branch)",
       /*commits=*/"ae9dd02ee1"},
      {K::kTfSingle, L::kTransformers, {4, 45, 0}, {"mps", "xpu", "mlu", "musa", "npu", "cuda"}, "V-TF-TA-4.45",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.45.0, PR #31913)",
       /*commits=*/"a22ff36e0e"},
      {K::kTfSingle, L::kTransformers, {4, 50, 0}, {"mps", "xpu", "mlu", "musa", "npu", "hpu", "cuda"}, "V-TF-TA-4.50",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v4.50.0, PR #36424)",
       /*commits=*/"89f6956015"},
      {K::kTfSingle, L::kTransformers, {5, 4, 0}, {"mps", "xpu", "mlu", "musa", "npu", "hpu", "neuron", "cuda"},
       "V-TF-TA-5.4",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v5.4.0, PR #44302)",
       /*commits=*/"f4825d59e7"},
      {K::kTfSingle, L::kTransformers, {5, 9, 0},
       {"mps", "xpu", "mlu", "musa", "npu", "hpu", "neuron", "tpu", "cuda"}, "V-TF-TA-TPU",
       "huggingface/transformers:src/transformers/training_args.py TrainingArguments._setup_devices (first tag "
       "v5.9.0, PR #45918)",
       /*commits=*/"6308a20ba4"},

      {K::kTfPipeline, L::kTransformers, {4, 30, 0}, {"cuda"}, "V-TF-PIPE-4.30",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (release commit of v4.30.0: an "
       "int n is cuda:<n> whatever the host has)",
       /*commits=*/"fe861e578f"},
      {K::kTfPipeline, L::kTransformers, {4, 37, 0}, {"cuda", "xpu"}, "V-TF-PIPE-4.37",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.37.0, PR #28326)",
       /*commits=*/"a573ac74fd"},
      {K::kTfPipeline, L::kTransformers, {4, 38, 0}, {"cuda", "npu", "xpu"}, "V-TF-PIPE-4.38",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.38.0, PR #28885)",
       /*commits=*/"5f96855761"},
      {K::kTfPipeline, L::kTransformers, {4, 40, 0}, {"mlu", "cuda", "npu", "xpu", "mps"}, "V-TF-PIPE-4.40",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.40.0, PRs #29627, "
       "#30080)",
       /*commits=*/"75769744e9 8c00b53eb0"},
      {K::kTfPipeline, L::kTransformers, {4, 45, 0}, {"mlu", "musa", "cuda", "npu", "xpu", "mps"}, "V-TF-PIPE-4.45",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.45.0, PR #31913)",
       /*commits=*/"a22ff36e0e"},
      {K::kTfPipeline, L::kTransformers, {4, 50, 0}, {"mlu", "musa", "cuda", "npu", "hpu", "xpu", "mps"},
       "V-TF-PIPE-4.50",
       "huggingface/transformers:src/transformers/pipelines/base.py Pipeline.__init__ (first tag v4.50.0, PR #36424)",
       /*commits=*/"89f6956015"},
  };
}

std::string OrderWords(const std::vector<std::string>& order) {
  std::vector<std::string> up;
  for (const std::string& t : order) up.push_back(t == "neuron" ? "Neuron" : absl::AsciiStrToUpper(t));
  return absl::StrJoin(up, ", ");
}

}  // namespace

std::string Version::ToString() const { return absl::StrCat(major, ".", minor, ".", patch); }

absl::string_view LibraryName(Library lib) { return lib == Library::kTransformers ? "Transformers" : "Accelerate"; }

const std::vector<FeatureRule>& FeatureRules() {
  static const std::vector<FeatureRule>* rules = [] {
    auto* all = new std::vector<FeatureRule>(MakeAccelerateFeatureRules());
    for (FeatureRule& r : MakeTransformersFeatureRules()) all->push_back(std::move(r));
    return all;
  }();
  return *rules;
}

const std::vector<OrderRule>& OrderRules() {
  static const std::vector<OrderRule>* rules = [] {
    auto* all = new std::vector<OrderRule>(MakeAccelerateOrderRules());
    for (OrderRule& r : MakeTransformersOrderRules()) all->push_back(std::move(r));
    return all;
  }();
  return *rules;
}

Version MinVersion(Library lib) { return lib == Library::kTransformers ? Version{4, 30, 0} : Version{0, 25, 0}; }
// The newest releases. Adding one: docs/SEMANTICS.md section 10 "Adding a release".
Version NewestVersion(Library lib) { return lib == Library::kTransformers ? Version{5, 15, 0} : Version{1, 14, 0}; }

namespace {

// The newest MAJOR.MINOR line the rules were read against (V-SKEW): the newest release's, and for
// Accelerate the main branch's next line (X.(Y+1).0.dev0, which no table row names a change in yet).
Version NewestLineRead(Library lib) {
  const Version newest = NewestVersion(lib);
  return lib == Library::kTransformers ? newest : Version{newest.major, newest.minor + 1, 0};
}

}  // namespace

bool NewerThanRules(Library lib, const Version& v) {
  const Version line = NewestLineRead(lib);
  return v.major != line.major ? v.major > line.major : v.minor > line.minor;
}

std::string NewestRules() {
  return absl::StrCat("Transformers ", NewestVersion(Library::kTransformers).ToString(), ", Accelerate ",
                      NewestVersion(Library::kAccelerate).ToString());
}

std::string SupportedRange(Library lib) {
  const std::string newest = NewestVersion(lib).ToString();
  const Version line = NewestLineRead(lib);
  return absl::StrCat(MinVersion(lib).ToString(), " or newer (rules up to ", line.major, ".", line.minor, ".x",
                      lib == Library::kAccelerate
                          ? absl::StrCat(", ", line.major, ".", line.minor, " being the main branch's ", line.major, ".",
                                         line.minor, ".0.dev0")
                          : "",
                      "; a later release gets ", newest, "'s rules and a warning, V-SKEW)");
}

absl::StatusOr<Version> ParseLibraryVersion(Library lib, absl::string_view text, absl::string_view field) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", text.substr(0, 64), "' ", why, "; accepted: ",
                                                   LibraryName(lib), " ", SupportedRange(lib),
                                                   ", written X.Y or X.Y.Z (a suffix such as .dev0, rc1 or +local "
                                                   "is read as that release), or empty for the newest"));
  };
  // The numeric part ends at the first character that is neither a digit nor a dot followed by a
  // digit; what follows must be a recognised suffix.
  size_t end = 0;
  while (end < text.size() && (absl::ascii_isdigit(static_cast<unsigned char>(text[end])) ||
                               (text[end] == '.' && end + 1 < text.size() &&
                                absl::ascii_isdigit(static_cast<unsigned char>(text[end + 1]))))) {
    ++end;
  }
  const absl::string_view numbers = text.substr(0, end);
  absl::string_view suffix = text.substr(end);
  if (!suffix.empty()) {
    absl::string_view s = suffix;
    if (s[0] == '+') {
      if (s.size() == 1) return bad("is not a version");
    } else {
      if (s[0] == '.' || s[0] == '-') s.remove_prefix(1);
      bool known = false;
      for (absl::string_view tag : {"dev", "rc", "a", "b", "post"}) {
        if (absl::StartsWith(s, tag)) {
          absl::string_view digits = s.substr(tag.size());
          const size_t plus = digits.find('+');
          if (plus != absl::string_view::npos) digits = digits.substr(0, plus);
          known = std::all_of(digits.begin(), digits.end(),
                              [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
          break;
        }
      }
      if (!known) return bad("is not a version");
    }
  }
  std::vector<absl::string_view> parts = absl::StrSplit(numbers, '.');
  if (numbers.empty() || parts.size() < 2 || parts.size() > 3) return bad("is not a version");
  int v[3] = {0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!ParseDecimal(parts[i], &v[i]) || v[i] > 9999) return bad("is not a version");
  }
  const Version got{v[0], v[1], v[2]};
  if (got < MinVersion(lib)) return bad("is older than devplace supports");
  return got;  // a release newer than the rules is the caller's to read (V-SKEW)
}

absl::StatusOr<LibraryVersions> LibraryVersions::FromRequest(absl::string_view transformers,
                                                             absl::string_view accelerate) {
  return FromRequest(Requested{std::string(transformers), ""}, Requested{std::string(accelerate), ""});
}

absl::StatusOr<LibraryVersions> LibraryVersions::FromRequest(const Requested& requested_transformers,
                                                             const Requested& requested_accelerate) {
  const absl::string_view transformers = requested_transformers.text, accelerate = requested_accelerate.text;
  // A detected release names where it came from, and how to override it, in any error.
  auto field = [](absl::string_view name, absl::string_view package, const Requested& r) {
    return r.detected_in.empty() ? std::string(name)
                                 : absl::StrCat(name, " (empty; job_environment has ", package, " ", r.text, " in ",
                                                r.detected_in, ": set ", name, " to override)");
  };
  LibraryVersions v;
  v.transformers_detected_in_ = requested_transformers.detected_in;
  v.accelerate_detected_in_ = requested_accelerate.detected_in;
  v.transformers_ = NewestVersion(Library::kTransformers);
  v.accelerate_ = NewestVersion(Library::kAccelerate);
  // V-SKEW: a release newer than the rules is emulated as the newest release the rules know.
  auto take = [](Library lib, const Version& job, Version& emulated, std::optional<Version>& job_release,
                 bool& newer) {
    job_release = job;
    newer = NewerThanRules(lib, job);
    emulated = newer ? NewestVersion(lib) : job;
  };
  if (!transformers.empty()) {
    absl::StatusOr<Version> t = ParseLibraryVersion(Library::kTransformers, transformers,
                                                   field("transformers_version", "transformers", requested_transformers));
    if (!t.ok()) return t.status();
    take(Library::kTransformers, *t, v.transformers_, v.transformers_job_, v.transformers_newer_);
    v.transformers_newest_ = false;
  }
  if (!accelerate.empty()) {
    absl::StatusOr<Version> a = ParseLibraryVersion(Library::kAccelerate, accelerate,
                                                   field("accelerate_version", "accelerate", requested_accelerate));
    if (!a.ok()) return a.status();
    take(Library::kAccelerate, *a, v.accelerate_, v.accelerate_job_, v.accelerate_newer_);
    v.accelerate_newest_ = false;
  }
  if (v.Has(Feature::kTfV5) && v.accelerate_ < Version{1, 1, 0}) {
    if (v.transformers_newest_) {
      // Only the Accelerate release was named, and Transformers 5 cannot run with it: the job
      // has Transformers 4, so emulate the last 4.x line (the 4.x rules are the same from 4.42 on).
      v.transformers_ = kLast4x;
      v.transformers_v4_for_accelerate_ = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "accelerate_version: ", v.accelerate_.ToString(), " with transformers_version ",
          v.transformers_job_.value_or(v.transformers_).ToString(),
          ": Transformers 5 requires Accelerate >= 1.1.0 (V-TF-V5); accepted: accelerate_version 1.1.0 or "
          "newer, or a Transformers 4.x transformers_version"));
    }
  }
  return v;
}

namespace {

// A cursor over a lower-cased version string, matching the pieces of packaging's VERSION_PATTERN.
struct VersionCursor {
  absl::string_view s;
  size_t i = 0;
  bool Sep(size_t at) const { return at < s.size() && (s[at] == '-' || s[at] == '_' || s[at] == '.'); }
  size_t Digits(size_t at) const {
    size_t n = 0;
    while (at + n < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[at + n]))) ++n;
    return n;
  }
  // [-_.]? <one of labels, first match in the pattern's order> [-_.]? [0-9]*, from i; true and i moved past it
  // when it matches.
  bool Segment(std::initializer_list<absl::string_view> labels) {
    size_t j = i + (Sep(i) ? 1 : 0);
    for (absl::string_view label : labels) {
      if (s.substr(j, label.size()) != label) continue;
      j += label.size();
      j += Sep(j) ? 1 : 0;
      i = j + Digits(j);
      return true;
    }
    return false;
  }
};

// digits -> a number, saturating far above any release part a rule names.
int64_t PartValue(absl::string_view digits) {
  int64_t v = 0;
  for (char c : digits) {
    if (v > (int64_t{1} << 58)) return v;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::optional<bool> PackageVersionBelow(absl::string_view text, const Version& min, bool* prerelease_of_min) {
  if (prerelease_of_min != nullptr) *prerelease_of_min = false;
  constexpr size_t kMaxBytes = 256;
  text = absl::StripAsciiWhitespace(text);
  if (text.size() > kMaxBytes) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(text);
  VersionCursor c{lower};
  if (c.s.substr(0, 1) == "v") c.i = 1;
  bool later_epoch = false;
  if (const size_t n = c.Digits(c.i); n > 0 && c.s.substr(c.i + n, 1) == "!") {
    later_epoch = PartValue(c.s.substr(c.i, n)) > 0;
    c.i += n + 1;
  }
  std::vector<int64_t> release;
  while (true) {
    const size_t n = c.Digits(c.i);
    if (n == 0) return std::nullopt;
    release.push_back(PartValue(c.s.substr(c.i, n)));
    c.i += n;
    if (c.s.substr(c.i, 1) != "." || c.Digits(c.i + 1) == 0) break;
    ++c.i;
  }
  const bool pre = c.Segment({"alpha", "a", "beta", "b", "preview", "pre", "c", "rc"});
  bool post = false;
  if (c.s.substr(c.i, 1) == "-" && c.Digits(c.i + 1) > 0) {
    c.i += 1 + c.Digits(c.i + 1);
    post = true;
  } else {
    post = c.Segment({"post", "rev", "r"});
  }
  const bool dev = c.Segment({"dev"});
  if (c.s.substr(c.i, 1) == "+") {  // a local label: [a-z0-9]+ ([-_.] [a-z0-9]+)*
    ++c.i;
    while (true) {
      size_t n = 0;
      while (c.i + n < c.s.size() && absl::ascii_isalnum(static_cast<unsigned char>(c.s[c.i + n]))) ++n;
      if (n == 0) return std::nullopt;
      c.i += n;
      if (!c.Sep(c.i)) break;
      ++c.i;
    }
  }
  if (c.i != c.s.size()) return std::nullopt;
  if (later_epoch) return false;  // an epoch >= 1 is after every release of epoch 0
  const int64_t want[3] = {min.major, min.minor, min.patch};
  for (size_t i = 0; i < std::max<size_t>(release.size(), 3); ++i) {
    const int64_t have = i < release.size() ? release[i] : 0;
    const int64_t need = i < 3 ? want[i] : 0;
    if (have != need) return have < need;
  }
  // The release is `min`'s: a pre-release, or a dev release that is not a post-release's, comes before it.
  const bool below = pre || (dev && !post);
  if (prerelease_of_min != nullptr) *prerelease_of_min = below;
  return below;
}

const std::vector<std::pair<Version, const FeatureRule*>>& TorchMinimumRules() {
  static const auto* const rows = [] {
    auto* out = new std::vector<std::pair<Version, const FeatureRule*>>();
    for (const auto& [feature, minimum] : {std::make_pair(Feature::kTfTorchMin21, Version{2, 1, 0}),
                                           std::make_pair(Feature::kTfTorchMin22, Version{2, 2, 0}),
                                           std::make_pair(Feature::kTfTorchMin24, Version{2, 4, 0}),
                                           std::make_pair(Feature::kTfTorchMin25, Version{2, 5, 0})}) {
      for (const FeatureRule& r : FeatureRules()) {
        if (r.feature == feature) out->emplace_back(minimum, &r);
      }
    }
    return out;
  }();
  return *rows;
}

std::optional<std::pair<Version, const FeatureRule*>> LibraryVersions::TorchMinimum() const {
  std::optional<std::pair<Version, const FeatureRule*>> best;
  for (const auto& row : TorchMinimumRules()) {
    if (transformers_ >= row.second->since) best = row;
  }
  return best;
}

bool LibraryVersions::Has(Feature f) const {
  const FeatureRule& r = Rule(f);
  return Of(r.library) >= r.since;
}

const FeatureRule& LibraryVersions::Rule(Feature f) const {
  for (const FeatureRule& r : FeatureRules()) {
    if (r.feature == f) return r;
  }
  return FeatureRules().front();  // unreachable: every Feature has a row (tested)
}

const OrderRule& LibraryVersions::Order(OrderKind kind) const {
  const OrderRule* best = nullptr;
  for (const OrderRule& r : OrderRules()) {
    if (r.kind == kind && Of(r.library) >= r.since) best = &r;
  }
  if (best != nullptr) return *best;
  for (const OrderRule& r : OrderRules()) {
    if (r.kind == kind) return r;  // below every row: the oldest (cannot happen within the supported range)
  }
  return OrderRules().front();
}

std::string LibraryVersions::Cite(Feature f) const {
  const FeatureRule& r = Rule(f);
  const Version& have = Of(r.library);
  return absl::StrCat(r.id, " (", LibraryName(r.library), " ", have.ToString(), have >= r.since ? " >= " : " < ",
                      r.since.ToString(), ": ", r.what, "; ", r.source, ")");
}

std::string LibraryVersions::Cite(const OrderRule& r) const {
  return absl::StrCat(r.id, " (", LibraryName(r.library), " ", Of(r.library).ToString(), ", order since ",
                      r.since.ToString(), ": ", OrderWords(r.order), "; ", r.source, ")");
}

std::vector<std::string> LibraryVersions::SkewWarnings() const {
  std::vector<std::string> out;
  auto one = [&](Library lib, const std::optional<Version>& job, const Version& emulated, bool newer,
                 const std::string& detected_in) {
    if (!newer || !job) return;
    const absl::string_view field = lib == Library::kTransformers ? "transformers_version" : "accelerate_version";
    out.push_back(absl::StrCat(
        LibraryName(lib), " ", job->ToString(),
        detected_in.empty() ? absl::StrCat(" (", field, ")") : absl::StrCat(" (detected in ", detected_in, ")"),
        " is newer than the newest release devplace knows, so ", LibraryName(lib), " ", emulated.ToString(),
        "'s rules were applied: if ", job->ToString(), " changed how it picks a device, the job may get another "
        "one; upgrade devplaced for ", job->major, ".", job->minor, "'s rules, or set ", field, " to ",
        emulated.ToString(), " to apply these without this warning (V-SKEW)"));
  };
  one(Library::kTransformers, transformers_job_, transformers_, transformers_newer_, transformers_detected_in_);
  one(Library::kAccelerate, accelerate_job_, accelerate_, accelerate_newer_, accelerate_detected_in_);
  return out;
}

std::string LibraryVersions::Describe() const {
  auto one = [](Library lib, const Version& v, bool newest, const std::string& detected_in,
                const std::optional<Version>& job, bool newer) {
    if (newer && job) {
      return absl::StrCat(LibraryName(lib), " ", v.ToString(), " (the newest rules devplace has: the job's ",
                          job->ToString(), detected_in.empty() ? ", given," : absl::StrCat(", detected in ", detected_in, ","),
                          " is newer, V-SKEW)");
    }
    // A line after the newest release that the rules were read against on the main branch (V-SKEW).
    const Version release = NewestVersion(lib);
    const std::string main_branch =
        (v.major != release.major ? v.major > release.major : v.minor > release.minor)
            ? absl::StrCat(" (no ", v.major, ".", v.minor, " release in the rules: the main branch's ", v.major, ".",
                           v.minor, ".0.dev0 was read, with ", release.ToString(), "'s rules)")
            : "";
    if (!detected_in.empty()) {
      return absl::StrCat(LibraryName(lib), " ", v.ToString(), " (detected in ", detected_in, ")", main_branch);
    }
    return absl::StrCat(LibraryName(lib), " ", v.ToString(),
                        newest ? absl::StrCat(" (", lib == Library::kTransformers ? "transformers_version" : "accelerate_version",
                                              " empty: the newest devplace knows)")
                               : "",
                        main_branch);
  };
  const std::string tf =
      transformers_v4_for_accelerate_
          ? absl::StrCat("Transformers ", transformers_.ToString(),
                         " (transformers_version empty, and Transformers 5 needs Accelerate >= 1.1.0: the last 4.x line)")
          : one(Library::kTransformers, transformers_, transformers_newest_, transformers_detected_in_,
                transformers_job_, transformers_newer_);
  return absl::StrCat("V emulating ", tf, " and ",
                      one(Library::kAccelerate, accelerate_, accelerate_newest_, accelerate_detected_in_,
                          accelerate_job_, accelerate_newer_),
                      "; version rules: docs/SEMANTICS.md section 10");
}

}  // namespace devplace::placement
