// The request (docs/SEMANTICS.md sections 2 and 10): its bounds and validation, the workload and
// convention, LOCAL_RANK / WORLD_SIZE from the fields or env (T8), runtime_backends, the variables
// Accelerate reads as flags or a device (USE_TORCH_XLA, ACCELERATE_USE_CPU, ACCELERATE_TORCH_DEVICE),
// and what the job's own packages tell (V-JOB).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"
#include "server/placement/device_string.h"
#include "server/placement/job_environment.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"

namespace devplace::placement::resolver_internal {

namespace {

constexpr size_t kMaxDeviceMapBytes = 256;
constexpr int kMaxEnvEntries = 256;
constexpr size_t kMaxEnvEntryBytes = 4096;
constexpr int kMaxListEntries = 1024;

// Accelerate's str_to_bool: 1 for truthy, 0 for falsy, nullopt otherwise.
std::optional<bool> TruthValue(absl::string_view s) {
  const std::string v = absl::AsciiStrToLower(s);
  for (const char* t : {"1", "y", "yes", "t", "true", "on"}) if (v == t) return true;
  for (const char* f : {"0", "n", "no", "f", "false", "off"}) if (v == f) return false;
  return std::nullopt;
}

// The API a convention emulates, as the job's code names it (explanations and warnings speak the
// user's terms, not enum names).
const char* ConventionApi(v1::Convention convention) {
  switch (convention) {
    case v1::CONVENTION_TRAINING_ARGUMENTS: return "TrainingArguments";
    case v1::CONVENTION_ACCELERATE: return "Accelerator";
    case v1::CONVENTION_FROM_PRETRAINED: return "from_pretrained";
    case v1::CONVENTION_PIPELINE: return "pipeline";
    default: return "this convention";
  }
}

}  // namespace

// Python's int() on a string: optional surrounding whitespace, optional sign, digits.
std::optional<int64_t> PyInt(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  absl::string_view digits = s;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) return std::nullopt;
  return v;
}

// V-JOB: what the job's packages said, and each library the convention needs that is absent.
void Resolution::DescribeJobPython() {
  if (!job_) return;
  const JobPython& job = *job_;
  auto have = [](const char* name, const std::optional<std::string>& v) {
    return v ? absl::StrCat(name, " ", *v) : absl::StrCat(name, " not installed");
  };
  std::string backends;
  if (runtime_from_ == v1::PROVENANCE_GIVEN) {
    backends = "runtime_backends given in the request";
  } else if (runtime_from_ == v1::PROVENANCE_DETECTED) {
    backends = absl::StrCat("runtime_backends detected: ", absl::StrJoin(runtime_list_, ", "), " (V-JOB-BUILD: ",
                            job.backends_reason, ")");
  } else {
    backends = absl::StrCat("runtime_backends not told (", job.backends_reason.empty() ? "no torch" : job.backends_reason,
                            "): every present row's package assumed");
  }
  out_.add_explanation(absl::StrCat("V-JOB the job's packages (", job.source, "): ", have("torch", job.torch), ", ",
                                    have("transformers", job.transformers), ", ", have("accelerate", job.accelerate),
                                    job.plugins.empty() ? "" : absl::StrCat(", ", absl::StrJoin(job.plugins, ", ")),
                                    "; ", backends));
  for (const std::string& problem : job.problems) {
    out_.add_warnings(absl::StrCat("the job's packages (", job.source, ") could not all be read: ", problem,
                                   "; the answer may not be the job's own (V-JOB)"));
  }
  if (!job.torch) {
    out_.add_warnings(absl::StrCat("torch is not installed in ", job.source,
                                   ": the job cannot use any device string until it installs torch (V-JOB)"));
  }
  if (!job.transformers && req_.transformers_version().empty() && convention_ != v1::CONVENTION_ACCELERATE) {
    out_.add_warnings(absl::StrCat("transformers is not installed in ", job.source, ": ", ConventionApi(convention_),
                                   " is Transformers' API, so these cannot be the job's own rules; Transformers ",
                                   versions_.transformers().ToString(), "'s were applied (V-JOB)"));
  }
  const bool needs_accelerate = convention_ == v1::CONVENTION_TRAINING_ARGUMENTS ||
                                convention_ == v1::CONVENTION_ACCELERATE ||
                                (convention_ == v1::CONVENTION_FROM_PRETRAINED && !req_.device_map().empty());
  if (!job.accelerate && req_.accelerate_version().empty() && needs_accelerate) {
    out_.add_warnings(absl::StrCat("accelerate is not installed in ", job.source, ": ", ConventionApi(convention_),
                                   convention_ == v1::CONVENTION_FROM_PRETRAINED ? " with a device_map" : "",
                                   " needs it (the job fails with ImportError), so these cannot be the job's own "
                                   "rules; Accelerate ", versions_.accelerate().ToString(), "'s were applied (V-JOB)"));
  }
}

namespace {

// Python's str.upper() of an environment value, for comparing with ASCII words: ASCII upper-cased, and the two
// characters whose upper case is an ASCII letter (U+017F long s -> S, U+0131 dotless i -> I).
std::string PyUpper(absl::string_view value) {
  std::string out = absl::StrReplaceAll(value, {{"\xC5\xBF", "S"}, {"\xC4\xB1", "I"}});
  absl::AsciiStrToUpper(&out);
  return out;
}

}  // namespace

// V-JOB-TORCH (V-TF-USE-TF, V-TF-TORCH, V-TF-TP-IMPORT): Transformers' APIs need Transformers to import its
// PyTorch side. Before 5.0, USE_TF / USE_TORCH can turn it off (read first, before torch is looked at); below the
// release's torch minimum, or with a torch version packaging cannot read, it is off too; and two patch releases
// fail to import their models below torch 2.5. The job fails whatever the device: the answer stays the rules'
// answer, beside a warning and a hazard (strict refuses). Only where the job's Transformers release is known
// (given, or read from its packages): an emulated release is not the job's.
void Resolution::TransformersImportWarnings() {
  if (convention_ == v1::CONVENTION_ACCELERATE || !versions_.transformers_job()) return;
  const std::string release = versions_.transformers().ToString();
  const char* api = ConventionApi(convention_);
  auto warn = [&](std::string w) {
    hazards_.push_back(w);
    out_.add_warnings(std::move(w));
  };
  if (!versions_.Has(Feature::kTfNoUseTf)) {
    static const std::set<std::string>* const kTrue = new std::set<std::string>{"1", "ON", "YES", "TRUE"};
    const std::string* use_tf = Env("USE_TF");
    const std::string* use_torch = Env("USE_TORCH");
    const std::string tf = use_tf ? PyUpper(*use_tf) : "AUTO";
    const std::string pt = use_torch ? PyUpper(*use_torch) : "AUTO";
    const bool torch_off = !(kTrue->count(pt) || pt == "AUTO");
    if (kTrue->count(tf) || torch_off) {
      warn(absl::StrCat(
          torch_off ? absl::StrCat("USE_TORCH='", use_torch->substr(0, 64), "'")
                    : absl::StrCat("USE_TF='", use_tf->substr(0, 64), "'"),
          " (Transformers ", release, ", before 5.0): Transformers disables PyTorch at import (\"Disabling PyTorch "
          "because USE_TF is set\"), so ", api,
          convention_ == v1::CONVENTION_PIPELINE ? " fails in the job, or runs on TensorFlow where it is installed "
                                                   "(this answer is PyTorch's)"
                                                 : " fails in the job whatever the device",
          "; ", torch_off ? "unset USE_TORCH or set USE_TORCH=1" : "unset USE_TF",
          torch_off && kTrue->count(tf) ? " and unset USE_TF" : "", " (", versions_.Rule(Feature::kTfNoUseTf).id,
          ")"));
      return;  // Transformers looks at torch no further
    }
  }
  if (!job_ || !job_->torch) return;
  const std::string& torch = *job_->torch;
  if (const auto minimum = versions_.TorchMinimum()) {
    const Version& m = minimum->first;
    bool pre = false;
    const std::optional<bool> below = PackageVersionBelow(torch, m, &pre);
    if (torch.empty()) {
      out_.add_explanation(absl::StrCat("V-TF-TORCH torch's release is not told (", job_->source, "): not compared ",
                                        "with Transformers ", release, "'s minimum, torch >= ", m.ToString()));
    } else if (!below) {
      warn(absl::StrCat("torch's version '", torch.substr(0, 64), "' (", job_->source, ") is not one packaging ",
                        "reads (PEP 440), and Transformers ", release, " compares the installed torch with its minimum, ",
                        m.major, ".", m.minor, ": it cannot import its PyTorch side (InvalidVersion, or PyTorch "
                        "disabled), so ", api, " fails in the job whatever the device; install a torch release "
                        ">= ", m.ToString(), " (", minimum->second->id, ")"));
      return;
    } else if (*below) {
      // The first release whose minimum is above the job's torch: the newest Transformers that still takes it
      // is the release before.
      Version raised = minimum->second->since;
      for (const auto& [min, rule] : TorchMinimumRules()) {
        if (PackageVersionBelow(torch, min).value_or(false)) {
          raised = rule->since;
          break;
        }
      }
      warn(absl::StrCat(
          "torch ", torch.substr(0, 64), " (", job_->source, ") is below ", m.major, ".", m.minor,
          pre ? " (a pre-release or dev build of it, below it in packaging's version order)" : "", ", the minimum of "
          "Transformers ", release, ": Transformers disables PyTorch at import (\"Disabling PyTorch because PyTorch >= ",
          m.major, ".", m.minor, " is required\"), so ", api, " fails in the job whatever the device; install torch >= ",
          m.ToString(), ", or a Transformers release before ", raised.ToString(), " (", minimum->second->id, ")"));
      return;  // the job cannot import Transformers' PyTorch side at all: nothing else to say of it
    }
  }
  // V-TF-TP-IMPORT: 4.52.0 and 4.52.2 build tensor-parallel layouts when modeling_utils is imported, naming
  // Replicate, which they import only from torch 2.5 (integrations/tensor_parallel.py); 4.52.1 reverted the
  // change, 4.52.3 guarded it. TrainingArguments alone does not import it.
  const Version& tf = versions_.transformers();
  if ((tf == Version{4, 52, 0} || tf == Version{4, 52, 2}) && convention_ != v1::CONVENTION_TRAINING_ARGUMENTS &&
      PackageVersionBelow(torch, Version{2, 5, 0}).value_or(false)) {
    warn(absl::StrCat(
        "torch ", torch.substr(0, 64), " (", job_->source, ") is below 2.5, and Transformers ", release,
        " fails to import its models with it (NameError: name 'Replicate' is not defined), so ", api,
        " fails in the job whatever the device; install Transformers 4.52.3 or 4.52.4 (or 4.52.1), or torch >= 2.5.0 "
        "(V-TF-TP-IMPORT: integrations/tensor_parallel.py, huggingface/transformers#38263, fixed by 597e159145)"));
  }
}

const std::string* Resolution::Env(const char* name) const {
  auto it = req_.env().find(name);
  return it == req_.env().end() ? nullptr : &it->second;
}

// Reads env `name` as Accelerate's str_to_bool into `flag` (left as is when unset).
absl::Status Resolution::EnvFlag(const char* name, absl::string_view consequence, bool& flag) const {
  const std::string* v = Env(name);
  if (v == nullptr) return absl::OkStatus();
  std::optional<bool> b = TruthValue(*v);
  if (!b) {
    return absl::InvalidArgumentError(absl::StrCat("env.", name, "='", *v, "': invalid truth value (", consequence,
                                                   "); accepted, case-insensitive: 1 y yes t true on / 0 n no f false off"));
  }
  flag = *b;
  return absl::OkStatus();
}

absl::Status Resolution::ValidateRequest() {
  RETURN_IF_ERROR(CheckEnums());
  RETURN_IF_ERROR(ReadJobPackages());
  RETURN_IF_ERROR(ApplyConvention());
  RETURN_IF_ERROR(CheckBounds());
  RETURN_IF_ERROR(CheckTrainingDeviceMap());
  RETURN_IF_ERROR(ReadRankAndWorldSize());
  RETURN_IF_ERROR(ReadRuntimeBackends());
  return ReadAccelerateVariables();
}

// Proto3 enums are open: a number outside the enum arrives as itself, and must not be read as one
// of the known values (or print as an empty name).
absl::Status Resolution::CheckEnums() const {
  if (!v1::Workload_IsValid(req_.workload())) {
    return absl::InvalidArgumentError(absl::StrCat("workload: ", req_.workload(),
                                                   " is not a Workload value; accepted: WORKLOAD_TRAINING (1), "
                                                   "WORKLOAD_INFERENCE (2)"));
  }
  if (!v1::Convention_IsValid(req_.convention())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "convention: ", req_.convention(),
        " is not a Convention value; accepted: CONVENTION_UNSPECIFIED (0), CONVENTION_TRAINING_ARGUMENTS (1), "
        "CONVENTION_ACCELERATE (2), CONVENTION_FROM_PRETRAINED (3), CONVENTION_PIPELINE (4)"));
  }
  return absl::OkStatus();
}

// V-JOB: the job's packages fill what the request leaves empty: the library releases applied and
// the runtime backends (given, else the job's torch build's).
absl::Status Resolution::ReadJobPackages() {
  if (req_.has_job_environment()) {
    ASSIGN_OR_RETURN(JobPython job, ReadJobPython(req_.job_environment()));
    job_ = std::move(job);
  }
  LibraryVersions::Requested tf{req_.transformers_version(), ""}, acc{req_.accelerate_version(), ""};
  if (job_ && tf.text.empty() && job_->transformers) tf = {*job_->transformers, job_->source};
  if (job_ && acc.text.empty() && job_->accelerate) acc = {*job_->accelerate, job_->source};
  ASSIGN_OR_RETURN(versions_, LibraryVersions::FromRequest(tf, acc));
  runtime_list_.assign(req_.runtime_backends().begin(), req_.runtime_backends().end());
  runtime_from_ = runtime_list_.empty() ? v1::PROVENANCE_DEFAULT : v1::PROVENANCE_GIVEN;
  if (runtime_list_.empty() && job_ && !job_->backends.empty()) {
    runtime_list_ = job_->backends;
    runtime_from_ = v1::PROVENANCE_DETECTED;
  }
  return absl::OkStatus();
}

// The workload is required; the convention defaults to the workload's (TrainingArguments for
// training, from_pretrained for inference) and must be one of its.
absl::Status Resolution::ApplyConvention() {
  if (req_.workload() == v1::WORKLOAD_UNSPECIFIED) {
    return absl::InvalidArgumentError("workload: required; accepted: WORKLOAD_TRAINING, WORKLOAD_INFERENCE");
  }
  const bool training = req_.workload() == v1::WORKLOAD_TRAINING;
  convention_ = req_.convention();
  if (convention_ == v1::CONVENTION_UNSPECIFIED) {
    convention_ = training ? v1::CONVENTION_TRAINING_ARGUMENTS : v1::CONVENTION_FROM_PRETRAINED;
  }
  const bool training_conv = convention_ == v1::CONVENTION_TRAINING_ARGUMENTS || convention_ == v1::CONVENTION_ACCELERATE;
  if (training != training_conv) {
    return absl::InvalidArgumentError(absl::StrCat(
        "convention: ", v1::Convention_Name(convention_), " (", ConventionApi(convention_), ") does not apply to ",
        v1::Workload_Name(req_.workload()), "; accepted: TRAINING_ARGUMENTS or ACCELERATE (TrainingArguments, "
        "Accelerator) for training, FROM_PRETRAINED or PIPELINE (from_pretrained, pipeline) for inference"));
  }
  return absl::OkStatus();
}

// Bounds, so that no answer or error echoes megabytes back (values are quoted in messages), and
// job_devices' nodes as absolute paths (P1).
absl::Status Resolution::CheckBounds() const {
  if (req_.device_map().size() > kMaxDeviceMapBytes) {
    return absl::InvalidArgumentError(absl::StrCat("device_map: ", req_.device_map().size(), " bytes; at most ",
                                                   kMaxDeviceMapBytes, " (a device string, an int or a keyword)"));
  }
  if (req_.env_size() > kMaxEnvEntries) {
    return absl::InvalidArgumentError(absl::StrCat("env: ", req_.env_size(), " entries; at most ", kMaxEnvEntries,
                                                   " (only the placement variables matter)"));
  }
  for (const auto& [key, value] : req_.env()) {
    if (key.size() + value.size() > kMaxEnvEntryBytes) {
      return absl::InvalidArgumentError(absl::StrCat("env.", key.substr(0, 64), ": ", key.size() + value.size(),
                                                     " bytes; at most ", kMaxEnvEntryBytes, " per variable"));
    }
  }
  if (req_.runtime_backends_size() > kMaxListEntries ||
      req_.job_devices().device_nodes_size() > kMaxListEntries) {
    return absl::InvalidArgumentError(absl::StrCat("runtime_backends / job_devices.device_nodes: at most ",
                                                   kMaxListEntries, " entries"));
  }
  for (int i = 0; i < req_.job_devices().device_nodes_size(); ++i) {
    const std::string& node = req_.job_devices().device_nodes(i);
    if (node.empty() || node[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "job_devices.device_nodes[", i, "]: '", node.substr(0, 64), "' is not an absolute path; accepted: ",
          "/dev paths such as /dev/nvidia1 or /dev/dri/renderD129 (P1)"));
    }
  }
  return absl::OkStatus();
}

// TrainingArguments and Accelerator choose the device themselves: a training request has no
// device_map.
absl::Status Resolution::CheckTrainingDeviceMap() const {
  if (req_.workload() == v1::WORKLOAD_TRAINING && !req_.device_map().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_map: '", req_.device_map(), "' given for a training workload; TrainingArguments and Accelerator "
        "choose the device themselves: leave device_map empty (use use_cpu or env ACCELERATE_TORCH_DEVICE to steer)"));
  }
  return absl::OkStatus();
}

// local_rank / world_size: fields or env, which must agree (T8).
absl::Status Resolution::ReadRankAndWorldSize() {
  std::optional<int64_t> env_rank, env_world;
  if (const std::string* v = Env("LOCAL_RANK")) {
    env_rank = PyInt(*v);
    if (!env_rank) {
      return absl::InvalidArgumentError(absl::StrCat("env.LOCAL_RANK='", *v, "': not an integer (Accelerate does "
                                                     "int(os.environ[\"LOCAL_RANK\"])); accepted: 0, 1, ..."));
    }
  }
  if (const std::string* v = Env("WORLD_SIZE")) {
    env_world = PyInt(*v);
    if (!env_world) {
      return absl::InvalidArgumentError(absl::StrCat("env.WORLD_SIZE='", *v, "': not an integer; accepted: 1, 2, ..."));
    }
  }
  if (req_.has_local_rank() && env_rank && *env_rank != req_.local_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("local_rank: ", req_.local_rank(), " disagrees with env.LOCAL_RANK=",
                                                   *env_rank, "; give one or make them equal"));
  }
  if (req_.has_world_size() && env_world && *env_world != req_.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: ", req_.world_size(), " disagrees with env.WORLD_SIZE=",
                                                   *env_world, "; give one or make them equal"));
  }
  if (req_.has_local_rank()) {
    if (req_.local_rank() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("local_rank: ", req_.local_rank(), " is negative; accepted: 0, 1, ... "
                                                     "(leave it unset for a single process)"));
    }
    local_rank_ = req_.local_rank();
  } else if (env_rank && *env_rank != -1) {  // Accelerate's default -1 means "not distributed"
    if (*env_rank < 0 || *env_rank > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("env.LOCAL_RANK=", *env_rank, " is out of range; accepted: 0, 1, ..."));
    }
    local_rank_ = static_cast<int>(*env_rank);
  }
  if (req_.has_world_size()) world_size_ = req_.world_size();
  else if (env_world) world_size_ = *env_world;
  if (world_size_ && *world_size_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: ", *world_size_, " is below 1; accepted: 1, 2, ..."));
  }
  if (world_size_ && local_rank_ && *local_rank_ >= *world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("local_rank: ", *local_rank_, " is not below world_size ", *world_size_,
                                                   "; accepted: 0..", *world_size_ - 1));
  }
  return absl::OkStatus();
}

// runtime_backends (given or the job's): known tokens ("hip" is ROCm's), one GPU build.
absl::Status Resolution::ReadRuntimeBackends() {
  for (const std::string& r : runtime_list_) {
    if (!IsRuntimeBackendToken(r)) {
      return absl::InvalidArgumentError(absl::StrCat("runtime_backends: unknown backend '", r,
                                                     "'; accepted: ", RuntimeBackendTokens()));
    }
    runtime_.insert(r == "hip" ? "rocm" : r);
  }
  if (runtime_.count("cuda") && runtime_.count("rocm")) {
    return absl::InvalidArgumentError("runtime_backends: lists both cuda and rocm, but one PyTorch build is either a "
                                      "CUDA or a ROCm build; name the one the job has");
  }
  return absl::OkStatus();
}

// The variables Accelerate reads at import and at start-up: USE_TORCH_XLA; for training
// ACCELERATE_USE_CPU and ACCELERATE_TORCH_DEVICE, whose type the job's torch must parse (G-PLUGIN).
absl::Status Resolution::ReadAccelerateVariables() {
  // USE_TORCH_XLA is read only by the releases that have it: Accelerate from 0.28 (str_to_bool at import, any
  // other value a ValueError, V-ACC-XLA-IMPORT), Transformers from 4.39 (upper() in 1, ON, YES, TRUE; any other
  // value turns its XLA check off, V-TF-XLA-ENV). Older releases ignore any value, and so does devplace.
  if (versions_.Has(Feature::kAccXlaImportOnly)) {
    RETURN_IF_ERROR(EnvFlag("USE_TORCH_XLA", "import accelerate raises ValueError", use_torch_xla_));
  }
  if (const std::string* v = Env("USE_TORCH_XLA"); v != nullptr && versions_.Has(Feature::kTfXlaReadsEnv)) {
    const std::string up = absl::AsciiStrToUpper(*v);
    tf_use_torch_xla_ = up == "1" || up == "ON" || up == "YES" || up == "TRUE";
  }
  if (req_.workload() != v1::WORKLOAD_TRAINING) return absl::OkStatus();
  // TrainingArguments reads the variable only when use_cpu is false (`self.use_cpu or strtobool(...)`, every
  // Transformers release from 4.36), so TrainingArguments(use_cpu=True).device is cpu whatever it holds; Accelerator
  // (AcceleratorState, which Trainer builds) parses it always and raises ValueError: a hazard beside cpu (T-CPU).
  const std::string* use_cpu_env = Env("ACCELERATE_USE_CPU");
  if (use_cpu_env != nullptr && !TruthValue(*use_cpu_env) && req_.use_cpu() &&
      convention_ == v1::CONVENTION_TRAINING_ARGUMENTS) {
    const std::string w = absl::StrCat(
        "env.ACCELERATE_USE_CPU='", *use_cpu_env, "': invalid truth value; TrainingArguments(use_cpu=True) does not "
        "read it (use_cpu short-cuts its strtobool), but Accelerator(), which Trainer builds, parses it and raises "
        "ValueError; accepted, case-insensitive: 1 y yes t true on / 0 n no f false off, or unset it");
    out_.add_warnings(w);
    hazards_.push_back(w);
  } else {
    RETURN_IF_ERROR(EnvFlag("ACCELERATE_USE_CPU", "Accelerate and Transformers raise ValueError", accelerate_use_cpu_));
  }
  const std::string* v = Env("ACCELERATE_TORCH_DEVICE");
  if (v == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(DeviceString d, ParseDeviceString(*v, "env.ACCELERATE_TORCH_DEVICE"));
  // G-PLUGIN: PartialState.__init__ hands the string to torch.device() before anything else,
  // and TrainingArguments builds a PartialState too, so both stop there.
  const TorchParse parse = CanTorchParse(d.type, JobTorchOf());
  if (parse.verdict == TorchParse::kFails) {
    return absl::FailedPreconditionError(absl::StrCat(
        "env.ACCELERATE_TORCH_DEVICE=", *v, ": the job's PyTorch cannot parse device type '", d.type, "': ",
        parse.why, "; PartialState.__init__ calls torch.device(\"", *v, "\") before anything else, so ",
        "Accelerator() and TrainingArguments both stop at start-up with RuntimeError \"Expected one of cpu, "
        "cuda, ... device type at start of device string: ", d.type, "\"; ", parse.fix,
        ", or unset ACCELERATE_TORCH_DEVICE (G-PLUGIN)"));
  }
  torch_device_env_ = d;
  torch_device_env_note_ = parse.verdict == TorchParse::kNotTold ? parse.why : "";
  return absl::OkStatus();
}

// What the request tells about the job's torch build (G-PLUGIN): runtime_backends as given, and
// the job's packages.
JobTorch Resolution::JobTorchOf() const {
  JobTorch t;
  if (runtime_from_ == v1::PROVENANCE_GIVEN) t.runtime_given = runtime_list_;
  t.job = job_ ? &*job_ : nullptr;
  return t;
}

}  // namespace devplace::placement::resolver_internal
