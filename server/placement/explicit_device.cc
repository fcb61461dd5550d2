// An explicit device string, for from_pretrained's device_map and pipeline's device (docs/SEMANTICS.md
// sections 6, 7 and 9): the grammar (I-STR), "cuda" as the rank's own GPU (I-CUDA-RANK), whether the
// job's PyTorch parses the type (G-PLUGIN), one Gaudi module per process (H-HPU), and the device
// being visible to the job.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/device_string.h"
#include "server/placement/env_typos.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"
#include "server/placement/visibility.h"

namespace devplace::placement::resolver_internal {

// I-STR: an explicit device string.
absl::Status Resolution::ExplicitString(const std::string& s) {
  const bool pipeline = convention_ == v1::CONVENTION_PIPELINE;
  const char* field = pipeline ? "device_map (pipeline device)" : "device_map";
  if (s == "disk") {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": 'disk' is only valid as a value inside a device_map dict, not as the whole device_map; accepted: a "
        "device name (cpu, cuda:0, ...), an int, or auto, balanced, balanced_low_0, sequential"));
  }
  // I-CUDA-RANK: from_pretrained (Transformers >= 5.0) turns the bare "cuda" into the process's own.
  std::string rewritten;
  if (!pipeline && s == "cuda") {
    ASSIGN_OR_RETURN(rewritten, CudaForRank());
  }
  const std::string& text = rewritten.empty() ? s : rewritten;
  // Said in every error about the rewritten string.
  const std::string because =
      rewritten.empty() ? ""
                        : absl::StrCat(" (device_map \"cuda\" became ", rewritten, " from the job's LOCAL_RANK",
                                       local_rank_ ? "" : " (unset: 0)", ", ",
                                       versions_.Rule(Feature::kTfDeviceMapCudaRank).id, ")");
  absl::StatusOr<DeviceString> parsed = ParseDeviceString(text, field);
  if (!parsed.ok() && !rewritten.empty()) return absl::InvalidArgumentError(absl::StrCat(parsed.status().message(), because));
  if (!parsed.ok()) {
    std::string hint;
    const std::string lower = absl::AsciiStrToLower(s);
    if (kKeywords.count(lower) && !pipeline) hint = absl::StrCat(" (keywords are case-sensitive: did you mean '", lower, "'?)");
    if (kKeywords.count(s) && pipeline) hint = " (pipeline's device takes a device, not a device_map keyword)";
    if (hint.empty() && !pipeline) {
      const std::vector<std::string> keywords(kKeywords.begin(), kKeywords.end());
      if (std::optional<std::string> near = ClosestName(s, keywords, 2)) hint = absl::StrCat(" (did you mean '", *near, "'?)");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        parsed.status().message(),
        pipeline ? "; or an int (-1 = the model's device, 0, 1, ...)"
                 : "; or an int (0, 1, ...), or one of auto, balanced, balanced_low_0, sequential",
        hint));
  }
  const DeviceString& d = *parsed;
  const std::string canon = d.ToString();
  if (d.type == "hpu") RETURN_IF_ERROR(CheckHpuIndex(canon, d.index, field, req_.env()));  // H-HPU
  // V-TF-PIPE-XPU: from 4.37 the pipeline asks is_torch_xpu_available(check_device=True) of an xpu string before
  // torch.device(); before V-TF-XPU-STOCK (4.42) that sees an Intel GPU only through Intel Extension for PyTorch.
  if (pipeline && d.type == "xpu" && versions_.Has(Feature::kTfPipelineXpuCheck) && !SeesXpu(Library::kTransformers)) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": ", s, ": the pipeline of Transformers ", versions_.transformers().ToString(),
        " raises ValueError('", s, " is not available, you should use device=\"cpu\" instead'): it takes an xpu "
        "device only when is_torch_xpu_available(check_device=True), which before 4.42 needs Intel Extension for "
        "PyTorch, and the job has ",
        job_->ipex ? absl::StrCat("only the CPU variant of intel_extension_for_pytorch (", *job_->ipex, ")")
                   : std::string("no intel_extension_for_pytorch"),
        " (",
        versions_.Rule(Feature::kTfPipelineXpuCheck).id, ", ", versions_.Rule(Feature::kTfStockXpu).id,
        "); install intel_extension_for_pytorch of the job's torch MAJOR.MINOR, or Transformers >= 4.42 with "
        "torch >= 2.4, or pass device=\"cpu\""));
  }
  // G-PLUGIN: torch.device() is the first thing both APIs do with the string.
  const TorchParse parse = CanTorchParse(d.type, JobTorchOf());
  if (parse.verdict == TorchParse::kFails) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": ", s, ": the job's PyTorch cannot parse device type '", d.type, "': ", parse.why, "; ",
        pipeline ? "pipeline's torch.device(" : "from_pretrained's torch.device(", "\"", s,
        "\") raises RuntimeError \"Expected one of cpu, cuda, ... device type at start of device string: ", d.type,
        "\"", pipeline ? "" : ", reported as ValueError \"When passing device_map as a string, the value needs to be a "
                               "device name ...\"",
        "; ", parse.fix, " (G-PLUGIN)"));
  }
  if (!parse.why.empty()) {
    out_.add_explanation(absl::StrCat("G-PLUGIN ", parse.why, parse.verdict == TorchParse::kParses
                                                                    ? ": the job has it"
                                                                    : ": runtime_backends not told, assumed installed"));
  }
  out_.add_explanation(absl::StrCat("I-STR device string '", s, "' -> ", canon));
  if (d.type == "cpu") {
    AnswerCpu("I-STR cpu is always available");
    return absl::OkStatus();
  }
  // T-XLA-NEURON: with torch-neuronx on torch_xla (the job has both) the XLA devices are its
  // NeuronCores, as in training: device_map "xla" / "xla:N" is the N-th core it sees.
  if (const RowState* x = d.type == "xla" && runtime_.count("xla") ? XlaRow() : nullptr;
      x != nullptr && x->backend->row() == v1::ROW_NEURON) {
    const int idx = d.has_index() ? d.index : 0;
    if (idx >= static_cast<int>(x->vis.units.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ": ", canon, " is not visible to this job: it sees ", Visible(*x), because));
    }
    Answer(*x, canon);
    out_.set_package("torch_xla");
    Place(*x, idx)->set_device(canon);
    out_.add_explanation(absl::StrCat("T-XLA-NEURON ", canon, " is a NeuronCore: the job's torch-neuronx runs on "
                                      "torch_xla, whose XLA devices are the NeuronCores it sees"));
    return absl::OkStatus();
  }
  const std::string want = d.type == "xla" ? "tpu" : d.type;
  // An xla device is torch_xla's: torch parses "xla" without it, but moving weights there fails, so a job whose
  // runtime_backends lack xla (a torch-tpu job has its own `tpu` device) cannot use it.
  if (d.type == "xla" && !runtime_.empty() && !runtime_.count("xla")) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": ", canon, " is torch_xla's device, and runtime_backends lacks xla (torch_xla not importable): "
        "torch parses the string, but moving the model there fails; install torch_xla, or name the job's own device",
        runtime_.count("tpu") ? " (torch-tpu: tpu:0)" : ""));
  }
  const RowState* present = nullptr;
  for (const RowState& r : rows_) {
    if (r.backend->device_type() != want) continue;
    if (r.available || (d.type == "xla" && !r.vis.units.empty())) {
      const int idx = d.has_index() ? d.index : 0;
      if (idx >= static_cast<int>(r.vis.units.size())) {
        return absl::FailedPreconditionError(absl::StrCat(
            field, ": ", canon, " is not visible to this job: it sees ", Visible(r), because,
            rewritten.empty() ? "" : "; with one visible GPU per process pass device_map=\"cuda:0\""));
      }
      Answer(r, canon);
      if (d.type == "xla") out_.set_package("torch_xla");
      Place(r, idx)->set_device(canon);
      return absl::OkStatus();
    }
    present = &r;
  }
  if (present != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", canon, " cannot be used by this job: ", present->reason, because));
  }
  return absl::FailedPreconditionError(absl::StrCat(field, ": ", canon, " names ", want,
                                                    ", but this host has no such device; available: ", AvailableText(),
                                                    because));
}

// I-CUDA-RANK: what from_pretrained's check_and_set_device_map makes of device_map "cuda": from
// Transformers 5.0, cuda:<int(LOCAL_RANK), default 0>; before, "cuda" itself (empty return).
absl::StatusOr<std::string> Resolution::CudaForRank() {
  const FeatureRule& rule = versions_.Rule(Feature::kTfDeviceMapCudaRank);
  if (!versions_.Has(Feature::kTfDeviceMapCudaRank)) {
    out_.add_explanation(absl::StrCat("I-CUDA-RANK device_map \"cuda\" stays cuda: ",
                                      versions_.Cite(Feature::kTfDeviceMapCudaRank)));
    return std::string();
  }
  // LOCAL_RANK=-1 (Accelerate's "not distributed") is no exception here: "cuda:-1" does not parse.
  const std::string* env_rank = Env("LOCAL_RANK");
  if (!req_.has_local_rank() && env_rank != nullptr && PyInt(*env_rank) == -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_map: cuda with env.LOCAL_RANK=", *env_rank, ": Transformers ", versions_.transformers().ToString(),
        " turns device_map \"cuda\" into \"cuda:-1\" (", rule.id, "), which torch.device() refuses, so "
        "from_pretrained raises ValueError; accepted: unset LOCAL_RANK or set it to 0, 1, ..., or pass "
        "device_map=\"cuda:0\""));
  }
  const int rank = local_rank_.value_or(0);
  const std::string device = absl::StrCat("cuda:", rank);
  out_.add_explanation(absl::StrCat("I-CUDA-RANK device_map \"cuda\" -> ", device, " (LOCAL_RANK ",
                                    local_rank_ ? absl::StrCat("= ", rank) : "unset: 0", "): ",
                                    versions_.Cite(Feature::kTfDeviceMapCudaRank)));
  return device;
}

std::string Resolution::AvailableText() const {
  std::vector<std::string> v;
  for (const RowState& r : rows_) if (r.available) v.push_back(Visible(r));
  v.push_back("cpu");
  return absl::StrJoin(v, ", ");
}

}  // namespace devplace::placement::resolver_internal
