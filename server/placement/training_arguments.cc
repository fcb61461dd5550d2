// Training (docs/SEMANTICS.md section 5): the chain of TrainingArguments.device (Transformers'
// TrainingArguments._setup_devices) and of Accelerator().device, which shares it step for step: T-ENV,
// T-XLA, T-DIST, T-CPU, then the single-process order (T-TA, T-ACC). The steps PartialState takes for
// both are in partial_state.cc; which release orders what is versions.cc's data.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/versions.h"

namespace devplace::placement::resolver_internal {

absl::Status Resolution::Training() {
  RETURN_IF_ERROR(TrainingChain());
  return XlaRealDevicesCheck();
}

// V-TF-XLA-CPU, V-TF-XLA-DEVICES: until Transformers 4.42, TrainingArguments.__post_init__'s bf16 check (evaluated
// whatever the precision flags, which come last in its condition) calls get_xla_device_type(self.device) for any
// device that is not cuda, npu or xpu, nor mlu from 4.40 (the commit that added mlu to the single-process order,
// V-TF-TA-4.40). Once Transformers sees torch_xla, that is xm.xla_real_devices([device]), which torch_xla refuses
// for anything but xla:N (RuntimeError): the job stops in TrainingArguments(...), no device to answer. From 4.39
// get_xla_device_type answers "CPU" for a cpu device without asking torch_xla (V-TF-XLA-CPU); hpu, mps, musa,
// sdaa, ... still raise until 4.42 removed the checks (V-TF-XLA-DEVICES). What "sees torch_xla" means is
// get_xla_device_type's own test: is_torch_tpu_available() before 4.39, only where xm.xla_device() finds a device
// (T-XLA-PJRT); is_torch_xla_available() from 4.39, the import and USE_TORCH_XLA (TfXlaCheckPasses).
absl::Status Resolution::XlaRealDevicesCheck() {
  if (convention_ != v1::CONVENTION_TRAINING_ARGUMENTS || versions_.Has(Feature::kTfNoXlaDeviceCheck) ||
      !runtime_.count("xla")) {
    return absl::OkStatus();
  }
  const std::string& device = out_.device();
  const std::string type = device.substr(0, device.find(':'));
  if (type == "cuda" || type == "npu" || type == "xpu" || type == "xla") return absl::OkStatus();
  const std::vector<std::string>& single = versions_.Order(OrderKind::kTfSingle).order;
  if (type == "mlu" && std::find(single.begin(), single.end(), "mlu") != single.end()) return absl::OkStatus();
  const bool cpu_answered = versions_.Has(Feature::kTfXlaCpuDevice);
  if (type == "cpu" && cpu_answered) return absl::OkStatus();
  const bool sees_xla = cpu_answered ? tf_use_torch_xla_ : TorchXlaDevice() == XlaDevice::kFound;
  if (!sees_xla) return absl::OkStatus();
  const Feature rule = type == "cpu" ? Feature::kTfXlaCpuDevice : Feature::kTfNoXlaDeviceCheck;
  return absl::FailedPreconditionError(absl::StrCat(
      "TrainingArguments of Transformers ", versions_.transformers().ToString(), " raises RuntimeError while it is "
      "built: torch_xla is importable (runtime_backends has xla)",
      cpu_answered ? " and USE_TORCH_XLA is not false, so Transformers sees it"
                   : " and finds an XLA device, so its XLA check passes",
      ", and __post_init__'s mixed-precision check hands its device ", device,
      " to torch_xla's xm.xla_real_devices, which takes only xla:N devices (", versions_.Cite(rule), "); use Transformers >= ",
      versions_.Rule(rule).since.ToString(), ", or remove torch_xla from the job's environment",
      cpu_answered ? " (or set USE_TORCH_XLA=0)" : ""));
}

// V-ACC-LOCAL-RANK: before Accelerate 0.28 PartialState.__init__ took LOCAL_RANK as a distributed launch only
// for a CUDA GPU or an NPU (and not cpu); MULTI_CPU / MULTI_XPU needed a world size above 1, so a world of one
// elsewhere is a single process, whose device both conventions then pick as one (type NO). Explains when true.
bool Resolution::WorldOfOneIsSingle(bool state_cpu) {
  if (!local_rank_ || world_size_ != 1 || versions_.Has(Feature::kAccLocalRankDistributed)) return false;
  const RowState* r = FirstAvailable(versions_.Order(OrderKind::kAccDistributed).order);
  if (!state_cpu && r != nullptr && (r->backend->device_type() == "cuda" || r->backend->device_type() == "npu")) {
    return false;
  }
  out_.add_explanation(absl::StrCat("T-DIST local_rank ", *local_rank_, " in a world of one, no CUDA GPU or NPU ",
                                    state_cpu ? "used (cpu=True)" : "available", ": a single process (type NO), ",
                                    versions_.Cite(Feature::kAccLocalRankDistributed)));
  return true;
}

// Before Transformers 4.42 TrainingArguments' single process keeps PartialState's device when its type is mps
// (`if device.type == "mps"`, checked before use_cpu), and a single PartialState's device is ACCELERATE_TORCH_DEVICE
// when set, over cpu too: ACCELERATE_TORCH_DEVICE=mps is the answer there whatever the host. Explains when true.
bool Resolution::TaKeepsMpsFromEnv() {
  const std::vector<std::string>& order = versions_.Order(OrderKind::kTfSingle).order;
  if (!torch_device_env_ || torch_device_env_->type != "mps" || versions_.Has(Feature::kTfTaMpsBranch) ||
      std::find(order.begin(), order.end(), "mps") == order.end()) {
    return false;
  }
  out_.add_explanation(absl::StrCat("T-ENV ACCELERATE_TORCH_DEVICE=mps is PartialState's device, and ",
                                    "TrainingArguments keeps a device of type mps before use_cpu and its own order (",
                                    versions_.Cite(versions_.Order(OrderKind::kTfSingle)), ")"));
  return true;
}

// TrainingArguments' own XLA check. From 4.39 is_torch_xla_available(): the import and USE_TORCH_XLA (V-TF-XLA-ENV).
// Before, is_torch_tpu_available(): xm.xla_device() in a try that catches RuntimeError only (T-XLA-PJRT: torch_xla
// >= 2.0 finds its PJRT CPU device on any host; 2.1 to 2.4 may raise NotImplementedError, which it does not catch).
bool Resolution::TfXlaCheckPasses() {
  if (!runtime_.count("xla")) return false;
  if (versions_.Has(Feature::kTfXlaReadsEnv)) return tf_use_torch_xla_;
  const XlaDevice device = TorchXlaDevice();
  if (device == XlaDevice::kRaises) {
    WarnXlaRaises(absl::StrCat("Transformers ", versions_.transformers().ToString(),
                               "'s is_torch_tpu_available() (TrainingArguments._setup_devices)"));
  }
  return device == XlaDevice::kFound;
}

absl::Status Resolution::TrainingChain() {
  const bool acc = convention_ == v1::CONVENTION_ACCELERATE;
  const char* api = acc ? "Accelerator().device" : "TrainingArguments.device";
  out_.add_explanation(absl::StrCat("convention ", acc ? "accelerate" : "training_arguments", ": emulating ", api,
                                    local_rank_ ? absl::StrCat(", distributed (local_rank ", *local_rank_,
                                                               world_size_ ? absl::StrCat(", world_size ", *world_size_) : "", ")")
                                                : ", single process"));
  if (!acc && req_.use_cpu() && !versions_.Has(Feature::kTfUseCpu)) {
    out_.add_explanation(absl::StrCat("note: ", versions_.Cite(Feature::kTfUseCpu),
                                      ": read use_cpu as no_cuda=True, which means the same there"));
  }
  // PartialState's cpu flag: TrainingArguments passes `use_cpu or ACCELERATE_USE_CPU`, Accelerator
  // reads both too.
  const bool state_cpu = req_.use_cpu() || accelerate_use_cpu_;
  // Before Accelerate 0.29 MULTI_CPU set the device over ACCELERATE_TORCH_DEVICE (V-ACC-SET-DEVICE), before 0.29.2 XLA.
  const bool env_kept = versions_.Has(Feature::kAccSetDevice);
  const bool env_kept_xla = versions_.Has(Feature::kAccXlaBeforeCpu);
  // 0.29.0 and 0.29.1 keep it everywhere but in the XLA branch: that is decided first.
  std::optional<bool> xla;
  if (acc && torch_device_env_ && env_kept && !env_kept_xla) xla = XlaApplies(state_cpu);
  // T-ENV first: PartialState.__init__ sets its device from ACCELERATE_TORCH_DEVICE before
  // anything else and set_device then returns early, so it beats cpu, MULTI_CPU and XLA.
  if (acc && torch_device_env_ && env_kept && !xla.value_or(false)) {
    out_.add_explanation(absl::StrCat(
        "T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
        ": PartialState.__init__ takes it as the device before anything else and set_device returns early, so it "
        "wins over cpu, ACCELERATE_USE_CPU, MULTI_CPU", env_kept_xla ? " and XLA" : "",
        "; used verbatim, without validation or rank offset"));
    return AnswerVerbatim(*torch_device_env_);
  }
  // T-XLA
  if (xla.has_value() ? *xla : XlaApplies(state_cpu)) {
    if (torch_device_env_ && env_kept_xla) {
      out_.add_explanation(absl::StrCat("T-ENV ", acc ? "Accelerator" : "TrainingArguments' XLA branch passes "
                                        "PartialState.device, which", " ACCELERATE_TORCH_DEVICE=",
                                        torch_device_env_->ToString(), " set first"));
      return AnswerVerbatim(*torch_device_env_);
    }
    if (torch_device_env_) {
      out_.add_explanation(absl::StrCat("T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
                                        " is overwritten by the XLA branch: ",
                                        versions_.Cite(env_kept ? Feature::kAccXlaBeforeCpu : Feature::kAccSetDevice)));
    }
    return AnswerXla(state_cpu);
  }
  // TrainingArguments' own XLA check (torch_xla importable; USE_TORCH_XLA read only from Transformers
  // 4.39, V-TF-XLA-ENV) comes before its single-process chain and passes PartialState.device on. Reaching
  // here, PartialState did not pick XLA: before Accelerate 0.28 on a host with a CUDA GPU
  // (V-ACC-XLA-IMPORT), or USE_TORCH_XLA=0 read by Accelerate but not by that Transformers. The job
  // gets Accelerate's device, `cuda`, without DataParallel.
  const bool tf_xla = !acc && TfXlaCheckPasses();
  // A single process (type NO): no LOCAL_RANK, or a world of one that Accelerate before 0.28 runs as one.
  const bool single = !local_rank_ || WorldOfOneIsSingle(state_cpu);
  if (!acc && single && tf_xla) {
    out_.add_explanation(absl::StrCat("T-XLA TrainingArguments' own XLA check passes (torch_xla importable), so it "
                                      "takes PartialState.device, which is not XLA here: ",
                                      versions_.Cite(Env("USE_TORCH_XLA") != nullptr &&
                                                             !versions_.Has(Feature::kTfXlaReadsEnv)
                                                         ? Feature::kTfXlaReadsEnv
                                                         : Feature::kAccXlaImportOnly)));
    if (torch_device_env_) return AnswerVerbatim(*torch_device_env_);
    if (state_cpu) {
      AnswerCpu("T-CPU PartialState(cpu=True): cpu");
      return absl::OkStatus();
    }
    return SingleProcess(/*acc=*/true);
  }
  // Distributed types of PartialState._prepare_backend.
  if (!single) {
    if (state_cpu) return MultiCpu(acc, /*state_cpu=*/true, absl::StrCat("T-CPU ", req_.use_cpu() ? "use_cpu=true" : "env ACCELERATE_USE_CPU is truthy",
                                                " with LOCAL_RANK set: MULTI_CPU"));
    // V-ACC-WORLD-1: 0.29.0 and 0.29.1 give a world of one (single-process torchrun) default_device, as a
    // single process gets it, or the device ACCELERATE_TORCH_DEVICE set first.
    if (world_size_ == 1 && versions_.Has(Feature::kAccSetDevice) && !versions_.Has(Feature::kAccSetDeviceByType)) {
      out_.add_explanation(absl::StrCat("T-DIST local_rank ", *local_rank_, " in a world of one: ",
                                        versions_.Cite(Feature::kAccSetDeviceByType)));
      if (torch_device_env_) return AnswerVerbatim(*torch_device_env_);
      return SingleProcess(/*acc=*/true);
    }
    const OrderRule& chain = versions_.Order(OrderKind::kAccDistributed);
    out_.add_explanation(absl::StrCat("T-DIST backend order ", versions_.Cite(chain)));
    if (const RowState* r = FirstAvailable(chain)) {
      // Before 0.29 the MULTI_XPU launch shares the MULTI_CPU branch, which sets the device itself.
      if (torch_device_env_ && (env_kept || r->backend->device_type() != "xpu")) {
        out_.add_explanation(absl::StrCat("T-ENV distributed ", acc ? "Accelerator" : "TrainingArguments passes PartialState.device, which",
                                          " keeps ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(), " set first"));
        return AnswerVerbatim(*torch_device_env_);
      }
      return Distributed(*r, chain);
    }
    if (!versions_.Has(Feature::kAccMultiCpuNeedsCpu)) {
      return MultiCpu(acc, /*state_cpu=*/false, absl::StrCat("T-DIST no row of ", OrderText(chain.order), " is available; ",
                                        versions_.Cite(Feature::kAccMultiCpuNeedsCpu), ": MULTI_CPU"));
    }
    out_.add_explanation(absl::StrCat("T-DIST no row of ", OrderText(chain.order),
                                      " is available: Accelerate >= 1.13 treats the process as a single one (",
                                      versions_.Cite(Feature::kAccMultiCpuNeedsCpu), ")"));
  }
  // Single process (distributed type NO).
  if (acc && torch_device_env_) {  // before 0.29 (V-ACC-SET-DEVICE): kept here, over cpu too
    out_.add_explanation(absl::StrCat("T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
                                      ": a single process keeps it (", versions_.Cite(Feature::kAccSetDevice), ")"));
    return AnswerVerbatim(*torch_device_env_);
  }
  if (acc && state_cpu) {
    AnswerCpu(absl::StrCat("T-CPU ", req_.use_cpu() ? "use_cpu=true" : "env ACCELERATE_USE_CPU is truthy", ": cpu"));
    return absl::OkStatus();
  }
  if (!acc && TaKeepsMpsFromEnv()) return AnswerVerbatim(*torch_device_env_);
  if (!acc && req_.use_cpu()) {
    AnswerCpu("T-CPU use_cpu=true: cpu");
    return absl::OkStatus();
  }
  if (!acc && accelerate_use_cpu_) {
    const std::string w = "ACCELERATE_USE_CPU is truthy but TrainingArguments.device checks only use_cpu (quirk T13): "
                          "TrainingArguments reports the accelerator below while Accelerate itself will use cpu; pass "
                          "use_cpu=True instead";
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  return SingleProcess(acc);
}

// The device string a single-process API gives for a row.
std::string Resolution::SingleDevice(bool acc, const std::string& type) const {
  if (type == "mps") return "mps";
  if (acc) return type == "xpu" && !versions_.Has(Feature::kAccXpuBare) ? "xpu:0" : type;
  return absl::StrCat(type, ":0");
}

absl::Status Resolution::SingleProcess(bool acc) {
  OrderRule rule = versions_.Order(acc ? OrderKind::kAccDefaultDevice : OrderKind::kTfSingle);
  const OrderRule& other_rule = versions_.Order(acc ? OrderKind::kTfSingle : OrderKind::kAccDefaultDevice);
  if (!acc && (accelerate_use_cpu_ || torch_device_env_) && !versions_.Has(Feature::kTfTaMpsBranch) &&
      FirstAvailable({"mps"}) != nullptr) {
    // Before 4.43 mps came only through PartialState's device, which ACCELERATE_TORCH_DEVICE (set first; of type
    // mps TaKeepsMpsFromEnv answered) or else ACCELERATE_USE_CPU made another.
    rule.order.erase(std::remove(rule.order.begin(), rule.order.end(), "mps"), rule.order.end());
    out_.add_explanation(absl::StrCat("T-TA mps is not taken: ", versions_.Cite(Feature::kTfTaMpsBranch), "; ",
                                      torch_device_env_ ? absl::StrCat("ACCELERATE_TORCH_DEVICE=",
                                                                       torch_device_env_->ToString(),
                                                                       " made PartialState's device ",
                                                                       torch_device_env_->ToString())
                                                        : "ACCELERATE_USE_CPU made PartialState's device cpu"));
  }
  const std::vector<std::string>& order = rule.order;
  const RowState* r = FirstAvailable(rule);
  const bool ta_env_fallback = versions_.Has(Feature::kTfTaTorchDeviceFallback);
  AutomaticChoiceHazards();
  const char* id = acc ? "T-ACC" : "T-TA";
  out_.add_explanation(absl::StrCat(id, " single-process order ", versions_.Cite(rule)));
  // The other convention's pick, when the two disagree (e.g. CUDA + XPU).
  const RowState* other = FirstAvailable(other_rule);
  if (r != nullptr && other != nullptr && other != r) {
    out_.add_explanation(absl::StrCat(
        "note: the conventions disagree on this host: ", acc ? "TrainingArguments.device" : "Accelerator().device",
        " would pick ", other->backend->name(), " (", OrderText(other_rule.order), ")"));
  }
  NeverPicked(order, acc ? absl::StrCat("Accelerator().device (Accelerate ", versions_.accelerate().ToString(), ")")
                         : absl::StrCat("TrainingArguments.device (Transformers ", versions_.transformers().ToString(), ")"),
              std::string(rule.id), r == nullptr && !(!acc && torch_device_env_ && ta_env_fallback),
              acc ? "Accelerate has no branch for it; use TrainingArguments (Transformers >= 5.9 for tpu:0) or name "
                    "the device (<type>) yourself"
                  : "name the device (<type>) yourself");
  if (r == nullptr) {
    if (!acc && torch_device_env_ && ta_env_fallback) {
      out_.add_explanation(absl::StrCat("T-TA no row of ", OrderText(order),
                                        " is available: TrainingArguments falls back to ACCELERATE_TORCH_DEVICE (",
                                        versions_.Cite(Feature::kTfTaTorchDeviceFallback), ")"));
      if (torch_device_env_->type == "cuda") {  // `if device.type == "cuda": torch.cuda.set_device(device)`
        return absl::FailedPreconditionError(absl::StrCat(
            "TrainingArguments of Transformers ", versions_.transformers().ToString(), " raises while it is built: "
            "no CUDA device is visible, so it falls back to ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
            " and calls torch.cuda.set_device on it, which fails without a CUDA device (",
            versions_.Cite(Feature::kTfTaTorchDeviceFallback), "); unset ACCELERATE_TORCH_DEVICE or set it to a "
            "device this host has"));
      }
      return AnswerVerbatim(*torch_device_env_);
    }
    if (!acc && torch_device_env_) {
      out_.add_explanation(absl::StrCat("T-TA ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
                                        " is not read: ", versions_.Cite(Feature::kTfTaTorchDeviceFallback)));
    }
    AnswerCpu(absl::StrCat(id, " no row of ", OrderText(order), " is available: cpu"));
    return absl::OkStatus();
  }
  const std::string type = r->backend->device_type();
  // V-TF-XPU-STOCK: Transformers 4.42 to 4.57's XPU branch needs Intel Extension for PyTorch or
  // Accelerate >= 0.32 (is_accelerate_available("0.32.0.dev")), else TrainingArguments raises ImportError.
  if (!acc && type == "xpu" && versions_.Has(Feature::kTfStockXpu) && versions_.transformers() < Version{5, 0, 0} &&
      versions_.accelerate() < Version{0, 32, 0}) {
    const bool known = job_ && job_->torch;
    const bool ipex = known && job_->ipex && !absl::StrContains(absl::AsciiStrToLower(*job_->ipex), "+cpu");
    const std::string why = absl::StrCat(
        "TrainingArguments of Transformers ", versions_.transformers().ToString(), " raises ImportError \"Using the XPU "
        "PyTorch backend requires `accelerate>=0.32.0.dev`\" for ", r->backend->name(),
        " without Intel Extension for PyTorch, and the job's Accelerate is ", versions_.accelerate().ToString(), " (",
        versions_.Rule(Feature::kTfStockXpu).id, ", training_args.py _setup_devices)");
    if (known && !ipex) return absl::FailedPreconditionError(absl::StrCat(why, ": install accelerate >= 0.32"));
    if (!known) {
      out_.add_warnings(absl::StrCat(why, "; the job's packages are not known, so devplace answers as if it had "
                                     "intel_extension_for_pytorch (send the job's packages: devplace resolve --python_env)"));
    }
  }
  const std::string device = SingleDevice(acc, type);
  out_.add_explanation(absl::StrCat(id, " single process: first available of ", OrderText(order), " is ",
                                    r->backend->name(), " -> ", device));
  if (!acc && torch_device_env_) {
    out_.add_explanation(absl::StrCat("T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
                                      " is ignored by single-process TrainingArguments while an accelerator is available"));
  }
  Answer(*r, device);
  Place(*r, 0);
  if (!acc && type == "cuda" && r->vis.units.size() > 1) {
    for (size_t i = 1; i < r->vis.units.size(); ++i) {
      out_.add_devices(absl::StrCat("cuda:", i));
      Place(*r, static_cast<int>(i));
    }
    out_.add_explanation(absl::StrCat("T-TA ", r->vis.units.size(), " visible CUDA devices: TrainingArguments wraps the "
                                      "model in DataParallel over all of them (n_gpu = ", r->vis.units.size(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace devplace::placement::resolver_internal
