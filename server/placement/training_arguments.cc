// Training (docs/SEMANTICS.md section 5): the chain of TrainingArguments.device (Transformers'
// TrainingArguments._setup_devices) and of Accelerator().device, which shares it step for step: T-ENV,
// T-XLA, T-DIST, T-CPU, then the single-process order (T-TA, T-ACC). The steps PartialState takes for
// both are in partial_state.cc; which release orders what is versions.cc's data.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/versions.h"

namespace devplace::placement::resolver_internal {

absl::Status Resolution::Training() {
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
  // T-ENV first: PartialState.__init__ sets its device from ACCELERATE_TORCH_DEVICE before
  // anything else and set_device then returns early, so it beats cpu, MULTI_CPU and XLA.
  if (acc && torch_device_env_) {
    out_.add_explanation(absl::StrCat(
        "T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
        ": PartialState.__init__ takes it as the device before anything else and set_device returns early, so it "
        "wins over cpu, ACCELERATE_USE_CPU, MULTI_CPU and XLA; used verbatim, without validation or rank offset"));
    return AnswerVerbatim(*torch_device_env_);
  }
  // T-XLA
  if (XlaApplies(state_cpu)) {
    if (torch_device_env_) {
      out_.add_explanation(absl::StrCat("T-ENV TrainingArguments' XLA branch passes PartialState.device, which "
                                        "ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(), " set first"));
      return AnswerVerbatim(*torch_device_env_);
    }
    return AnswerXla(state_cpu);
  }
  // Distributed types of PartialState._prepare_backend.
  if (local_rank_) {
    if (state_cpu) return MultiCpu(acc, absl::StrCat("T-CPU ", req_.use_cpu() ? "use_cpu=true" : "env ACCELERATE_USE_CPU is truthy",
                                                " with LOCAL_RANK set: MULTI_CPU"));
    const OrderRule& chain = versions_.Order(OrderKind::kAccDistributed);
    out_.add_explanation(absl::StrCat("T-DIST backend order ", versions_.Cite(chain)));
    if (const RowState* r = FirstAvailable(chain.order)) {
      if (!acc && torch_device_env_) {
        out_.add_explanation(absl::StrCat("T-ENV distributed TrainingArguments passes PartialState.device, which "
                                          "ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(), " set first"));
        return AnswerVerbatim(*torch_device_env_);
      }
      return Distributed(*r, chain);
    }
    if (!versions_.Has(Feature::kAccMultiCpuNeedsCpu)) {
      return MultiCpu(acc, absl::StrCat("T-DIST no row of ", OrderText(chain.order), " is available; ",
                                        versions_.Cite(Feature::kAccMultiCpuNeedsCpu), ": MULTI_CPU"));
    }
    out_.add_explanation(absl::StrCat("T-DIST no row of ", OrderText(chain.order),
                                      " is available: Accelerate >= 1.13 treats the process as a single one (",
                                      versions_.Cite(Feature::kAccMultiCpuNeedsCpu), ")"));
  }
  // Single process (distributed type NO).
  if (acc && state_cpu) {
    AnswerCpu(absl::StrCat("T-CPU ", req_.use_cpu() ? "use_cpu=true" : "env ACCELERATE_USE_CPU is truthy", ": cpu"));
    return absl::OkStatus();
  }
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
  const OrderRule& rule = versions_.Order(acc ? OrderKind::kAccDefaultDevice : OrderKind::kTfSingle);
  const OrderRule& other_rule = versions_.Order(acc ? OrderKind::kTfSingle : OrderKind::kAccDefaultDevice);
  const std::vector<std::string>& order = rule.order;
  const RowState* r = FirstAvailable(order);
  const bool ta_env_fallback = versions_.Has(Feature::kTfTaTorchDeviceFallback);
  AutomaticChoiceHazards();
  const char* id = acc ? "T-ACC" : "T-TA";
  out_.add_explanation(absl::StrCat(id, " single-process order ", versions_.Cite(rule)));
  // The other convention's pick, when the two disagree (e.g. CUDA + XPU).
  const RowState* other = FirstAvailable(other_rule.order);
  if (r != nullptr && other != nullptr && other != r) {
    out_.add_explanation(absl::StrCat(
        "note: the conventions disagree on this host: ", acc ? "TrainingArguments.device" : "Accelerator().device",
        " would pick ", other->backend->name(), " (", OrderText(other_rule.order), ")"));
  }
  NeverPicked(order, acc ? absl::StrCat("Accelerator().device (Accelerate ", versions_.accelerate().ToString(), ")")
                         : absl::StrCat("TrainingArguments.device (Transformers ", versions_.transformers().ToString(), ")"),
              std::string(rule.id), r == nullptr && !(!acc && torch_device_env_ && ta_env_fallback),
              acc ? "Accelerate has no branch for it; use TrainingArguments (Transformers >= 5.8 for tpu:0) or name "
                    "the device (<type>) yourself"
                  : "name the device (<type>) yourself");
  if (r == nullptr) {
    if (!acc && torch_device_env_ && ta_env_fallback) {
      out_.add_explanation(absl::StrCat("T-TA no row of ", OrderText(order),
                                        " is available: TrainingArguments falls back to ACCELERATE_TORCH_DEVICE (",
                                        versions_.Cite(Feature::kTfTaTorchDeviceFallback), ")"));
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
