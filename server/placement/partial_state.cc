// Accelerate's PartialState (state.py: __init__, _prepare_backend, set_device), the steps of the
// training chain (training_arguments.cc) that both TrainingArguments and Accelerator take through it:
// ACCELERATE_TORCH_DEVICE used verbatim (T-ENV), the XLA device (T-XLA), MULTI_CPU and the
// distributed device of a rank (T-DIST, E-HPU, E-MIG).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"

namespace devplace::placement::resolver_internal {

// The row whose device torch_xla's XLA device is: a visible TPU; a NeuronCore when the job's torch-neuronx
// runs on torch_xla (its packages have both: the Neuron PJRT plug-in, T-XLA-NEURON), and before
// V-ACC-XLA-IMPORT a Neuron core in any case (is_tpu_available() only asked for an XLA device).
const RowState* Resolution::XlaRow() const {
  const RowState* found = nullptr;
  for (const RowState& r : rows_) {
    if (r.vis.units.empty()) continue;
    if (r.backend->row() == v1::ROW_TPU) return &r;
    if (r.backend->row() == v1::ROW_NEURON && (runtime_.count("neuron") || !versions_.Has(Feature::kAccXlaImportOnly))) {
      found = &r;
    }
  }
  return found;
}

// T-XLA-PJRT: what xm.xla_device() does in the job's torch_xla. A TPU (or a Neuron core, XlaRow) is an XLA device in
// every release. Without one, torch_xla 1.13 runs XRT unless PJRT_DEVICE is set, and XRT raises RuntimeError "Missing
// XLA configuration". From 2.0 a process with no PJRT_DEVICE defaults to PJRT_DEVICE=CPU (torch_xla/experimental/
// pjrt.py _maybe_select_default_device at v2.0.0, torch_xla/runtime.py from v2.1.0), so xla:0 is the host's CPU;
// unless PJRT_SELECT_DEFAULT_DEVICE=0, or in 2.0 an XRT_* variable or GPU_NUM_DEVICES (XRT then), or from 2.1 to
// 2.8 GPU_NUM_DEVICES > 0 (PJRT_DEVICE=GPU/CUDA). With PJRT_SELECT_DEFAULT_DEVICE=0 and no PJRT_DEVICE, 2.1 to 2.4
// raise NotImplementedError from requires_pjrt on xla_device, which no library's check catches; from 2.5 (no
// requires_pjrt there) the runtime raises RuntimeError "$PJRT_DEVICE is not set.", as for an empty PJRT_DEVICE. The
// release: the job's torch_xla, else its torch's MAJOR.MINOR (torch_xla releases pair with torch's), else 2.1
// (assumed: every torch_xla since 2.0, March 2023, runs PJRT; 1.13 was the last XRT release). Executed at the
// tags: scripts/fidelity/pjrt_default.py, tests/placement/pjrt_default.txt.
Resolution::XlaDevice Resolution::TorchXlaDevice() {
  if (xla_device_) return *xla_device_;
  std::optional<Version> v;
  std::string from;
  if (job_ && job_->torch_xla && (v = PackageMajorMinor(*job_->torch_xla))) {
    from = absl::StrCat("torch_xla ", *job_->torch_xla, " (", job_->source, ")");
  } else if (job_ && job_->torch && (v = PackageMajorMinor(*job_->torch))) {
    from = absl::StrCat("torch_xla ", v->major, ".", v->minor, " (the release paired with the job's torch ",
                        *job_->torch, ")");
  } else {
    v = Version{2, 1, 0};
    from = "torch_xla 2.1 (its release not told: assumed; every torch_xla since 2.0 runs PJRT, and 2.1 to 2.4 are "
           "the releases of Accelerate < 0.28 and Transformers < 4.39)";
  }
  const std::string* pjrt = Env("PJRT_DEVICE");
  const std::string* select = Env("PJRT_SELECT_DEFAULT_DEVICE");
  const std::string* gpus = Env("GPU_NUM_DEVICES");
  const bool xrt_env = std::any_of(req_.env().begin(), req_.env().end(),
                                   [](const auto& kv) { return absl::StartsWith(kv.first, "XRT_"); });
  const bool pjrt_v2 = v->major >= 2;
  const bool v21 = !(*v < Version{2, 1, 0}), v25 = !(*v < Version{2, 5, 0}), v29 = !(*v < Version{2, 9, 0});
  const bool device = XlaRow() != nullptr;
  const bool cuda = FirstAvailable({"cuda"}) != nullptr;
  XlaDevice got;
  std::string why;
  if (pjrt != nullptr && pjrt->empty()) {
    got = XlaDevice::kNone;
    why = "PJRT_DEVICE set empty: the runtime raises RuntimeError \"$PJRT_DEVICE is not set.\"";
  } else if (pjrt != nullptr) {
    const bool cpu = absl::StartsWith(*pjrt, "CPU");
    got = cpu || device || cuda ? XlaDevice::kFound : XlaDevice::kNone;
    why = absl::StrCat("PJRT_DEVICE=", *pjrt, cpu ? ": the host's CPU"
                                                  : got == XlaDevice::kFound ? ": the host's device"
                                                                             : ": no such device here (RuntimeError)");
  } else if (!pjrt_v2) {
    got = device ? XlaDevice::kFound : XlaDevice::kNone;
    why = device ? "XRT on the TPU" : "XRT without a TPU raises RuntimeError \"Missing XLA configuration\"";
  } else if (v21 && select != nullptr && *select == "0") {
    got = v25 ? XlaDevice::kNone : XlaDevice::kRaises;
    why = v25 ? "PJRT_SELECT_DEFAULT_DEVICE=0, no PJRT_DEVICE: the runtime raises RuntimeError \"$PJRT_DEVICE is not "
                "set.\" (torch_xla >= 2.5)"
              : "PJRT_SELECT_DEFAULT_DEVICE=0, no PJRT_DEVICE: requires_pjrt raises NotImplementedError (torch_xla 2.1 "
                "to 2.4)";
  } else if (!v21 && ((select != nullptr && *select == "0") || gpus != nullptr || xrt_env)) {
    got = device ? XlaDevice::kFound : XlaDevice::kNone;
    why = "no default device (PJRT_SELECT_DEFAULT_DEVICE=0, GPU_NUM_DEVICES or an XRT_ variable set): XRT";
  } else if (int n = 0; v21 && !v29 && gpus != nullptr && absl::SimpleAtoi(*gpus, &n) && n > 0) {
    got = cuda ? XlaDevice::kFound : XlaDevice::kNone;
    why = "GPU_NUM_DEVICES > 0: PJRT_DEVICE=GPU";
  } else {
    got = XlaDevice::kFound;
    why = device ? "PJRT on the TPU" : "no TPU and no PJRT_DEVICE: PJRT_DEVICE=CPU, the host's CPU";
  }
  out_.add_explanation(absl::StrCat("T-XLA-PJRT xm.xla_device() in ", from, ": ", why));
  xla_device_ = got;
  xla_why_ = absl::StrCat(from, ": ", why);
  return got;
}

void Resolution::WarnXlaRaises(absl::string_view who) {
  if (xla_raise_warned_) return;
  xla_raise_warned_ = true;
  const std::string w = absl::StrCat(
      who, " calls xm.xla_device(), which raises NotImplementedError in this torch_xla (2.1 to 2.4) with "
      "PJRT_SELECT_DEFAULT_DEVICE=0 and no PJRT_DEVICE (torch_xla/runtime.py requires_pjrt), and "
      "does not catch it: the job fails at start. Unset PJRT_SELECT_DEFAULT_DEVICE to run on xla:0 (PJRT's default "
      "device), set PJRT_DEVICE=CPU or TPU, or uninstall torch_xla for the answer given here");
  out_.add_warnings(w);
  hazards_.push_back(w);
}

// T-XLA-NEURON: a torch-neuronx job on torch_xla under torchrun (LOCAL_RANK set). torch_xla runs its Neuron
// set-up when imported (Accelerate imports it whenever it reads torch_xla as available).
bool Resolution::NeuronOnXlaTorchrun() const {
  return local_rank_.has_value() && runtime_.count("neuron") && runtime_.count("xla") &&
         (use_torch_xla_ || !versions_.Has(Feature::kAccXlaImportOnly));
}

// T-XLA-NEURON: what torch_xla's Neuron set-up at import (torch_xla/_internal/neuron.py
// configure_pjrt_environment and neuron_utils.remap_visible_cores, first in torch_xla 2.5) does to
// NEURON_RT_VISIBLE_CORES under torchrun, before the Neuron runtime reads it: unset or empty becomes LOCAL_RANK;
// a set list (entries N or A-B, mutually exclusive) must hold LOCAL_WORLD_SIZE cores (default 1; one core with a
// local world of 1 is kept as is) and becomes its entry at position LOCAL_RANK, else torch_xla raises ValueError
// (FAILED_PRECONDITION here). A list torch_xla's own parser refuses is left to the visibility rules (malformed:
// INVALID_ARGUMENT). Executed against torch_xla's code at its tags: scripts/fidelity/neuron_xla.py,
// tests/placement/neuron_xla_remap.txt.
absl::StatusOr<std::optional<std::string>> Resolution::TorchXlaNeuronCores(int host_cores) {
  const int rank = *local_rank_;
  const std::string* cores = Env("NEURON_RT_VISIBLE_CORES");
  int core = rank;
  if (cores == nullptr || cores->empty()) {
    if (rank < host_cores) {
      out_.add_explanation(absl::StrCat("T-XLA-NEURON NEURON_RT_VISIBLE_CORES unset under torchrun: torch_xla sets it "
                                        "to LOCAL_RANK=", rank, " (torch_xla/_internal/neuron.py "
                                        "configure_pjrt_environment, torch_xla >= 2.5)"));
    }
  } else {
    // torch_xla's get_visible_cores_list, bounded: no host has kMaxListed NeuronCores, so a longer list is refused
    // here (torch_xla would build it, then find that it is not LOCAL_WORLD_SIZE long).
    constexpr int64_t kMaxListed = 1 << 16;
    std::vector<int> list;
    std::set<int> seen;
    for (absl::string_view e : absl::StrSplit(*cores, ',')) {
      int a = 0, b = 0;
      const bool ok = ParseCoreEntry(e, &a, &b);
      if (!ok) return std::optional<std::string>();  // torch_xla raises too; the visibility rules say why
      if (static_cast<int64_t>(b) - a + 1 + static_cast<int64_t>(list.size()) > kMaxListed) {
        return absl::InvalidArgumentError(absl::StrCat("env.NEURON_RT_VISIBLE_CORES='", *cores, "' lists more than ",
                                                       kMaxListed, " NeuronCores; accepted: core index N, inclusive "
                                                       "range A-B, or a comma list of them, e.g. 0-1,4"));
      }
      for (int c = a;; ++c) {
        if (!seen.insert(c).second) return std::optional<std::string>();  // overlapping entries: likewise
        list.push_back(c);
        if (c == b) break;
      }
    }
    const int count = static_cast<int>(list.size());
    int local_world = 1;
    if (const std::string* lws = Env("LOCAL_WORLD_SIZE"); lws != nullptr && !lws->empty()) {
      if (!absl::SimpleAtoi(*lws, &local_world) || local_world <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("env.LOCAL_WORLD_SIZE=", *lws,
                                                       " is not a positive integer (torchrun sets it per node)"));
      }
    }
    if (count <= 1 && local_world == 1) {
      out_.add_explanation(absl::StrCat("T-XLA-NEURON NEURON_RT_VISIBLE_CORES=", *cores, " with LOCAL_WORLD_SIZE 1: "
                                        "torch_xla keeps it (neuron_utils.remap_visible_cores, torch_xla >= 2.5)"));
      return std::optional<std::string>();
    }
    if (local_world != count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "torch_xla raises ValueError: LOCAL_WORLD_SIZE ", local_world, " is not equal to the ", count,
          " NeuronCore(s) of NEURON_RT_VISIBLE_CORES=", *cores, " (neuron_utils.remap_visible_cores, torch_xla >= 2.5: "
          "list one core per local process, or set LOCAL_WORLD_SIZE to the count)"));
    }
    if (rank >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "torch_xla raises ValueError: LOCAL_RANK ", rank, " is not below the ", count,
          " NeuronCore(s) of NEURON_RT_VISIBLE_CORES=", *cores, " (neuron_utils.remap_visible_cores, torch_xla >= 2.5)"));
    }
    core = list[rank];
    if (core < host_cores) {
      out_.add_explanation(absl::StrCat("T-XLA-NEURON torch_xla remaps NEURON_RT_VISIBLE_CORES=", *cores,
                                        " to its entry at LOCAL_RANK=", rank, ", NEURON_RT_VISIBLE_CORES=", core,
                                        " (neuron_utils.remap_visible_cores, torch_xla >= 2.5): this process's xla:0"));
    }
  }
  if (core >= host_cores) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local_rank ", rank, ": torch_xla sets NEURON_RT_VISIBLE_CORES=", core,
        cores == nullptr || cores->empty() ? " (LOCAL_RANK, torch_xla/_internal/neuron.py, torch_xla >= 2.5)"
                                           : absl::StrCat(" (the entry at LOCAL_RANK of ", *cores,
                                                          ", neuron_utils.remap_visible_cores, torch_xla >= 2.5)"),
        ", but this host has ", host_cores, " NeuronCore(s): the Neuron runtime finds no such core"));
  }
  return absl::StrCat(core);
}

// Whether PartialState picks XLA (T-XLA, V-ACC-XLA-IMPORT, V-ACC-XLA-CPU).
bool Resolution::XlaApplies(bool state_cpu) {
  if (!runtime_.count("xla")) return false;
  if (!versions_.Has(Feature::kAccXlaImportOnly)) {  // is_tpu_available(): no USE_TORCH_XLA yet
    // No CUDA GPU, then xm.xla_device() (T-XLA-PJRT), called before PartialState looks at cpu.
    const bool cuda = FirstAvailable({"cuda"}) != nullptr;
    const XlaDevice device = cuda ? XlaDevice::kNone : TorchXlaDevice();
    if (device == XlaDevice::kRaises) WarnXlaRaises(absl::StrCat("Accelerate ", versions_.accelerate().ToString(),
                                                                 "'s is_tpu_available()"));
    if (device != XlaDevice::kFound || state_cpu) {
      out_.add_explanation(absl::StrCat("T-XLA not taken: ", versions_.Cite(Feature::kAccXlaImportOnly), "; here ",
                                        cuda ? "a CUDA GPU is available"
                                             : device != XlaDevice::kFound ? "xm.xla_device() finds no XLA device"
                                                                           : "cpu is set"));
      return false;
    }
    if (const std::string* v = Env("USE_TORCH_XLA")) {
      out_.add_explanation(absl::StrCat("T-XLA USE_TORCH_XLA=", *v, " is set, but this Accelerate does not read it "
                                        "(V-ACC-XLA-IMPORT)"));
    }
    return true;
  }
  if (!use_torch_xla_) return false;
  if (state_cpu && !versions_.Has(Feature::kAccXlaBeforeCpu)) {
    out_.add_explanation(absl::StrCat("T-XLA not taken: ", versions_.Cite(Feature::kAccXlaBeforeCpu)));
    return false;
  }
  return true;
}

absl::Status Resolution::AnswerXla(bool state_cpu) {
  const RowState* tpu = XlaRow();
  // The XLA branch sets its device from xm.xla_device(): where that raises (T-XLA-PJRT), the job fails there. The
  // answer stays the library's choice, xla:0, beside the warning (a hazard).
  const XlaDevice xla = tpu == nullptr || Env("PJRT_SELECT_DEFAULT_DEVICE") != nullptr || Env("PJRT_DEVICE") != nullptr
                            ? TorchXlaDevice()
                            : XlaDevice::kFound;
  const std::string branch = absl::StrCat("Accelerate ", versions_.accelerate().ToString(), "'s PartialState (its XLA branch)");
  if (xla == XlaDevice::kRaises) WarnXlaRaises(branch);
  if (xla == XlaDevice::kNone) {
    const std::string w = absl::StrCat(branch, " sets its device from xm.xla_device(), which raises RuntimeError here (",
                                       xla_why_, "): the job fails at start. Set USE_TORCH_XLA=0 or uninstall "
                                       "torch_xla to run without XLA");
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  out_.set_device("xla:0");
  out_.set_backend(tpu != nullptr ? tpu->backend->row() : v1::ROW_UNSPECIFIED);
  out_.set_package("torch_xla");
  out_.add_devices("xla:0");
  if (tpu != nullptr) {
    int idx = tpu->vis.units.size() > 1 && local_rank_ ? *local_rank_ % static_cast<int>(tpu->vis.units.size()) : 0;
    // T-XLA-NEURON: the process's NeuronCore is the first it sees. A single process keeps the job's
    // NEURON_RT_VISIBLE_CORES; under torchrun the visible cores are those torch_xla's set-up left
    // (TorchXlaNeuronCores, applied when the rows were computed).
    if (tpu->backend->row() == v1::ROW_NEURON && runtime_.count("neuron")) {
      idx = 0;
      if (!local_rank_) {
        out_.add_explanation("T-XLA-NEURON a single process (no LOCAL_RANK): the Neuron runtime gives torch_xla the "
                             "first visible NeuronCore as xla:0");
      }
    }
    Place(*tpu, idx)->set_device("xla:0");
    out_.add_explanation(absl::StrCat("T-XLA torch_xla is importable (runtime_backends has xla) and its XLA device is ",
                                      tpu->backend->name(), ": Accelerate picks the XLA device before any other check; "
                                      "each process sees xla:0 (", versions_.Cite(Feature::kAccXlaImportOnly), ")"));
  } else {
    // No TPU here, the job still gets XLA: import-only (>= 0.28), or torch_xla's PJRT CPU device (T-XLA-PJRT).
    // Name what it gets without it: USE_TORCH_XLA=0 where the release reads it, else without torch_xla.
    const bool reads_env = versions_.Has(Feature::kAccXlaImportOnly);
    v1::ResolveDeviceRequest without = req_;
    if (reads_env) {
      (*without.mutable_env())["USE_TORCH_XLA"] = "0";
    } else {
      without.clear_runtime_backends();
      for (const std::string& b : runtime_list_) {
        if (b != "xla") without.add_runtime_backends(b);
      }
      auto* packages = without.mutable_job_environment()->mutable_packages();
      packages->erase(std::remove_if(packages->begin(), packages->end(),
                                     [](const v1::PythonPackage& p) { return NormalizePackageName(p.name()) == "torch-xla"; }),
                      packages->end());
    }
    without.set_strict(false);
    v1::ResolveDeviceResponse alt;
    const std::string other = Resolution(inv_, without, &alt).Run().ok() ? alt.device()
                                                                        : "the device devplace would otherwise answer";
    out_.add_explanation(absl::StrCat("T-XLA torch_xla is importable (runtime_backends has xla", reads_env ? ", USE_TORCH_XLA not false): " : "): ",
                                      reads_env ? versions_.Cite(Feature::kAccXlaImportOnly)
                                                : "is_tpu_available() finds torch_xla's PJRT CPU device (T-XLA-PJRT)",
                                      " -> the XLA device xla:0 although no TPU is visible"));
    const std::string w =
        reads_env ? absl::StrCat("torch_xla is installed (runtime_backends has xla) and Accelerate ",
                                 versions_.accelerate().ToString(), " only tests that it imports: the job gets the XLA "
                                 "device xla:0, not ", other, "; set USE_TORCH_XLA=0 or uninstall torch_xla to get ", other)
                  : absl::StrCat("torch_xla is installed (runtime_backends has xla) and, with no TPU and no PJRT_DEVICE, "
                                 "defaults to PJRT_DEVICE=CPU (torch_xla >= 2.0), so Accelerate ",
                                 versions_.accelerate().ToString(), "'s is_tpu_available() finds an XLA device: the "
                                 "job gets xla:0 (the CPU through XLA), not ", other, "; this release does not read "
                                 "USE_TORCH_XLA: uninstall torch_xla to get ", other);
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  if (state_cpu) {
    const std::string w = absl::StrCat("XLA wins over use_cpu in Accelerate: the XLA check comes before the cpu flag (",
                                       versions_.Rule(Feature::kAccXlaBeforeCpu).id,
                                       "), so the job runs on xla:0 (set USE_TORCH_XLA=0 to honour use_cpu)");
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  return absl::OkStatus();
}

// MULTI_CPU: Accelerate's device is cpu (printed cpu:0); distributed TrainingArguments passes it
// through, or ACCELERATE_TORCH_DEVICE when set.
absl::Status Resolution::MultiCpu(bool acc, bool state_cpu, const std::string& why) {
  if (!versions_.Has(Feature::kAccSetDevice)) {
    // Before 0.29 the MULTI_CPU branch set the device itself: cpu with cpu=True, else default_device,
    // which is mps on an Apple host (the other accelerators took their own branches before it).
    if (torch_device_env_) {
      out_.add_explanation(absl::StrCat("T-ENV ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(),
                                        " is overwritten by the MULTI_CPU branch: ", versions_.Cite(Feature::kAccSetDevice)));
    }
    const RowState* mps = state_cpu ? nullptr : FirstAvailable({"mps"});
    if (mps != nullptr) {
      AutomaticChoiceHazards();
      out_.add_explanation(absl::StrCat(why, "; the MULTI_CPU branch takes default_device, which is mps here (",
                                        versions_.Cite(Feature::kAccSetDevice), ")"));
      Answer(*mps, "mps");
      Place(*mps, 0);
      return absl::OkStatus();
    }
    AutomaticChoiceHazards();
    AnswerCpu(absl::StrCat(why, ": cpu"));
    return absl::OkStatus();
  }
  if (!acc && torch_device_env_) {
    out_.add_explanation(absl::StrCat(why, "; distributed TrainingArguments passes PartialState.device, which "
                                      "ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(), " set first"));
    return AnswerVerbatim(*torch_device_env_);
  }
  AutomaticChoiceHazards();
  AnswerCpu(absl::StrCat(why, ": cpu (Accelerate prints it as cpu:0, the same device)"));
  return absl::OkStatus();
}

absl::Status Resolution::AnswerVerbatim(const DeviceString& d) {
  const std::string s = d.ToString();
  if (d.type == "cpu") {
    AnswerCpu(absl::StrCat("device ", s));
    return absl::OkStatus();
  }
  for (const RowState& r : rows_) {
    if (!r.available || r.backend->device_type() != d.type) continue;
    Answer(r, s);
    const int idx = d.has_index() ? d.index : 0;
    if (idx < static_cast<int>(r.vis.units.size())) {
      Place(r, idx);
    } else {
      out_.add_warnings(absl::StrCat("ACCELERATE_TORCH_DEVICE=", s, " is used verbatim, but the job sees only ", Visible(r)));
    }
    return absl::OkStatus();
  }
  out_.set_device(s);
  out_.set_backend(v1::ROW_UNSPECIFIED);
  out_.add_devices(s);
  out_.add_warnings(absl::StrCat("ACCELERATE_TORCH_DEVICE=", s, " is used verbatim, but no ", d.type,
                                 " device is available to this job",
                                 torch_device_env_note_.empty()
                                     ? ""
                                     : absl::StrCat("; ", torch_device_env_note_,
                                                    ", and without it torch.device fails at start-up (runtime_backends "
                                                    "not told, G-PLUGIN)")));
  return absl::OkStatus();
}

absl::Status Resolution::Distributed(const RowState& row, const OrderRule& chain) {
  const RowState* r = &row;
  const int rank = *local_rank_;
  AutomaticChoiceHazards();
  const int n = static_cast<int>(r->vis.units.size());
  const bool modulo = versions_.Has(Feature::kAccIndexModulo);
  const int idx = modulo ? rank % n : rank;
  const std::string type = r->backend->device_type();
  const bool hpu = r->backend->row() == v1::ROW_HPU;
  const std::string device = hpu ? "hpu:0" : absl::StrCat(type, ":", idx);
  out_.add_explanation(absl::StrCat("T-DIST first available of ", OrderText(chain.order), " is ", r->backend->name(),
                                    " with ", n, " visible device(s)"));
  if (!hpu && !modulo && rank >= n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local_rank ", rank, ": ", versions_.Cite(Feature::kAccIndexModulo), "; the job sees ", n, " ", type,
        " device(s) (", Visible(*r), "), so the process asks for ", type, ":", rank,
        ", which does not exist (torch.", type, ".set_device fails); use Accelerate >= 0.33, or a visibility "
        "mask that leaves each rank its own device"));
  }
  if (r->vis.masked && n == 1 && modulo) {
    out_.add_explanation(absl::StrCat("P3 the visibility mask leaves one device: the process is pinned to it as ",
                                      type, ":0 whatever its local_rank"));
  } else if (hpu) {
    out_.add_explanation(absl::StrCat("E-HPU the process acquires the module at position local_rank % ", n, " = ",
                                      rank % n, "; inside the process the device is hpu:0"));
  } else if (modulo) {
    out_.add_explanation(absl::StrCat("T-DIST device = ", type, ":(local_rank ", rank, " % ", n, ") = ", device, " (",
                                      versions_.Rule(Feature::kAccIndexModulo).id, ")"));
  } else {
    out_.add_explanation(absl::StrCat("T-DIST device = ", type, ":local_rank = ", device, " (",
                                      versions_.Cite(Feature::kAccIndexModulo), ")"));
  }
  if (modulo && rank >= n && !(r->vis.masked && n == 1) && !r->vis.mig_implicit) {  // MIG: its own warning below
    // The lower ranks on the same device: idx, idx + n, ... (at most 8 named: local_rank is
    // unbounded in a request and must not turn into an unbounded list).
    constexpr int kNamed = 8;
    const int64_t count = (static_cast<int64_t>(rank) - idx + n - 1) / n;
    std::vector<std::string> sharing;
    for (int64_t k = 0; k < std::min<int64_t>(count, kNamed); ++k) sharing.push_back(absl::StrCat(idx + k * n));
    if (count > kNamed) sharing.push_back(absl::StrCat("and ", count - kNamed, " more"));
    const std::string w = absl::StrCat("local_rank ", rank, " wraps onto ", type, ":", idx, " (", n,
                                       " visible device(s), Accelerate >= 0.33 uses local_rank % count): it shares the "
                                       "device with local rank(s) ", absl::StrJoin(sharing, ", "));
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  if (r->vis.mig_implicit && (!world_size_ || *world_size_ > 1)) {  // E-MIG: every rank enumerates the same single MIG instance
    const std::string w = absl::StrCat(
        "MIG: each CUDA process of this job enumerates one MIG instance, the same one, so all its ranks (local_rank ",
        rank, world_size_ ? absl::StrCat(" of world_size ", *world_size_) : "", ") share cuda:0 instead of one device "
        "each; give each rank its own instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (this host's: ",
        absl::StrJoin(r->vis.mig_instances, ", "), ")");
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  Answer(*r, device);
  Place(*r, hpu ? rank % n : idx)->set_device(device);
  return absl::OkStatus();
}

}  // namespace devplace::placement::resolver_internal
