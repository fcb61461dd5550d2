#include "server/placement/resolver.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/arena.h"
#include "server/common/status_macros.h"
#include "server/placement/allocation.h"
#include "server/placement/backends.h"
#include "server/placement/device_string.h"
#include "server/placement/env_typos.h"
#include "server/placement/job_environment.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"
#include "server/placement/visibility.h"

namespace devplace::placement {
namespace {

// Orders of SEMANTICS.md (by PyTorch device type; "cuda" is whichever GPU row is available).
// Orders of docs/SEMANTICS.md that did not change across the supported releases (by PyTorch device
// type; "cuda" is whichever GPU row is available). The versioned ones are in versions.cc.
// from_pretrained int: set_module_tensor_to_device maps it to npu/mlu/sdaa/musa:<n>, hpu; otherwise
// PyTorch's int rule takes the current accelerator, PrivateUse1 (neuron, torch-tpu's tpu) first.
const std::vector<std::string> kIntOrder = {"npu", "mlu", "sdaa", "musa", "hpu", "neuron", "tpu", "cuda", "xpu", "mps"};
const std::vector<std::string> kPipelineOrder = {"mlu", "musa", "cuda", "npu", "hpu", "xpu", "mps"};

constexpr size_t kMaxDeviceMapBytes = 256;
constexpr int kMaxEnvEntries = 256;
constexpr size_t kMaxEnvEntryBytes = 4096;
constexpr int kMaxListEntries = 1024;
constexpr int kMaxPlacedDevices = 16;  // entries of ResolveDeviceResponse.placed (BoundPlaced)

// "a, b, c" for at most kMaxPlacedDevices items, else the first ones and "and K more": lists of
// devices in explanation and warning lines stay bounded on big hosts, like `placed` (P-BOUND).
std::string BoundedList(const std::vector<std::string>& items) {
  const size_t shown = std::min(items.size(), static_cast<size_t>(kMaxPlacedDevices));
  std::string text = absl::StrJoin(items.begin(), items.begin() + shown, ", ");
  if (shown < items.size()) absl::StrAppend(&text, " and ", items.size() - shown, " more");
  return text;
}

const std::set<std::string> kKeywords = {"auto", "balanced", "balanced_low_0", "sequential"};

std::string BuildOrderText(const std::vector<std::string>& order) {
  std::vector<std::string> up;
  for (const std::string& t : order) up.push_back(t == "neuron" ? "Neuron" : absl::AsciiStrToUpper(t));
  return absl::StrJoin(up, ", ");
}

// The orders are constants (the two above and the version table's OrderRules()): their texts are
// built once, not on every answer.
std::string OrderText(const std::vector<std::string>& order) {
  static const auto* const texts = [] {
    auto* m = new std::map<const std::vector<std::string>*, std::string>();
    for (const auto* o : {&kIntOrder, &kPipelineOrder}) (*m)[o] = BuildOrderText(*o);
    for (const OrderRule& r : OrderRules()) (*m)[&r.order] = BuildOrderText(r.order);
    return m;
  }();
  const auto it = texts->find(&order);
  return it != texts->end() ? it->second : BuildOrderText(order);
}

// A Python int written as digits in device_map: "0", "12", "-1"; no sign but '-', no spaces,
// no leading zero (anything else is a string and goes through the device-string grammar).
std::optional<int64_t> DeviceMapInt(absl::string_view s) {
  absl::string_view digits = s;
  if (!digits.empty() && digits[0] == '-') digits.remove_prefix(1);
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0') || (digits == "0" && s[0] == '-')) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) return std::nullopt;
  return v;
}

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

// Accelerate's str_to_bool: 1 for truthy, 0 for falsy, nullopt otherwise.
std::optional<bool> TruthValue(absl::string_view s) {
  const std::string v = absl::AsciiStrToLower(s);
  for (const char* t : {"1", "y", "yes", "t", "true", "on"}) if (v == t) return true;
  for (const char* f : {"0", "n", "no", "f", "false", "off"}) if (v == f) return false;
  return std::nullopt;
}

struct RowState {
  const v1::Backend* backend = nullptr;
  RowVisibility vis;
  bool available = false;
  std::string reason;   // why not available
  bool hazard = false;  // counts under `strict` when the choice is automatic
};

class Resolution {
 public:
  // The answer is built in `*out` (empty, not null; on an arena or not), which must outlive this.
  Resolution(const v1::Inventory& inv, const v1::ResolveDeviceRequest& req, v1::ResolveDeviceResponse* out)
      : inv_(inv), req_(req), out_(*out) {}

  // Fills the answer; on an error `*out` holds a partial answer that callers drop.
  absl::Status Run() {
    if (inv_.backends_size() == 0) {
      return absl::UnavailableError("no inventory yet: the first probe of this host has not completed");
    }
    RETURN_IF_ERROR(ValidateRequest());
    out_.add_explanation(versions_.Describe());
    DescribeJobPython();
    RETURN_IF_ERROR(ComputeRows());
    if (req_.workload() == v1::WORKLOAD_TRAINING) {
      RETURN_IF_ERROR(Training());
    } else if (convention_ == v1::CONVENTION_PIPELINE) {
      RETURN_IF_ERROR(Pipeline());
    } else {
      RETURN_IF_ERROR(FromPretrained());
    }
    RenumberingWarnings();
    // H-FOREIGN: visibility variables that cannot apply to the answer's row.
    for (std::string& w : ForeignMaskWarnings(inv_, out_.backend(), req_.env())) out_.add_warnings(std::move(w));
    // E-TYPO: near misses of placement variables (warnings only, never hazards: nothing reads them).
    for (std::string& w : EnvTypoWarnings(req_.env())) out_.add_warnings(std::move(w));
    if (req_.strict() && !hazards_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("strict: ", absl::StrJoin(hazards_, "; "), " (answer without strict: ", out_.device(), ")"));
    }
    BoundPlaced();
    out_.set_inventory_revision(inv_.revision());
    out_.set_transformers_version(versions_.transformers().ToString());
    out_.set_accelerate_version(versions_.accelerate().ToString());
    auto from = [](bool given, bool detected) {
      return given ? v1::PROVENANCE_GIVEN : detected ? v1::PROVENANCE_DETECTED : v1::PROVENANCE_DEFAULT;
    };
    out_.set_transformers_version_from(from(!req_.transformers_version().empty(), versions_.transformers_detected()));
    out_.set_accelerate_version_from(from(!req_.accelerate_version().empty(), versions_.accelerate_detected()));
    out_.set_runtime_backends_from(runtime_from_);
    for (const std::string& r : runtime_list_) out_.add_runtime_backends(r);
    return absl::OkStatus();
  }

  // E-ORDER-SMI: the devices the answer uses, in the job's numbering, against PCI bus order.
  void RenumberingWarnings() {
    for (const auto& [row, indices] : used_) {
      const bool keyed = !out_.max_memory().empty() && out_.backend() == row->backend->row();
      std::string w = RenumberingWarning(row->vis, std::vector<int>(indices.begin(), indices.end()), keyed);
      if (w.empty()) continue;
      out_.add_explanation(absl::StrCat("E-ORDER-SMI ", row->backend->name(), ": the job's ordinals of the devices used "
                                        "differ from PCI bus order (warning given)"));
      out_.add_warnings(std::move(w));
    }
  }

  // V-JOB: what the job's packages said, and each library the convention needs that is absent.
  void DescribeJobPython() {
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
    if (!job.torch) {
      out_.add_warnings(absl::StrCat("torch is not installed in ", job.source,
                                     ": the job cannot use any device string until it installs torch (V-JOB)"));
    }
    if (!job.transformers && req_.transformers_version().empty() && convention_ != v1::CONVENTION_ACCELERATE) {
      out_.add_warnings(absl::StrCat("transformers is not installed in ", job.source, ": ", v1::Convention_Name(convention_),
                                     " is Transformers' API, so these cannot be the job's own rules; Transformers ",
                                     versions_.transformers().ToString(), "'s were applied (V-JOB)"));
    }
    const bool needs_accelerate = convention_ == v1::CONVENTION_TRAINING_ARGUMENTS ||
                                  convention_ == v1::CONVENTION_ACCELERATE ||
                                  (convention_ == v1::CONVENTION_FROM_PRETRAINED && !req_.device_map().empty());
    if (!job.accelerate && req_.accelerate_version().empty() && needs_accelerate) {
      out_.add_warnings(absl::StrCat("accelerate is not installed in ", job.source, ": ", v1::Convention_Name(convention_),
                                     convention_ == v1::CONVENTION_FROM_PRETRAINED ? " with a device_map" : "",
                                     " needs it (the job fails with ImportError), so these cannot be the job's own "
                                     "rules; Accelerate ", versions_.accelerate().ToString(), "'s were applied (V-JOB)"));
    }
  }

 private:
  // ---- request validation ------------------------------------------------------------------

  const std::string* Env(const char* name) const {
    auto it = req_.env().find(name);
    return it == req_.env().end() ? nullptr : &it->second;
  }

  // Reads env `name` as Accelerate's str_to_bool into `flag` (left as is when unset).
  absl::Status EnvFlag(const char* name, absl::string_view consequence, bool& flag) const {
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

  absl::Status ValidateRequest() {
    // Proto3 enums are open: a number outside the enum arrives as itself, and must not be read as
    // one of the known values (or print as an empty name).
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
    const bool training = req_.workload() == v1::WORKLOAD_TRAINING;
    // V-JOB: the job's packages fill what the request leaves empty.
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
    if (req_.workload() == v1::WORKLOAD_UNSPECIFIED) {
      return absl::InvalidArgumentError("workload: required; accepted: WORKLOAD_TRAINING, WORKLOAD_INFERENCE");
    }
    convention_ = req_.convention();
    if (convention_ == v1::CONVENTION_UNSPECIFIED) {
      convention_ = training ? v1::CONVENTION_TRAINING_ARGUMENTS : v1::CONVENTION_FROM_PRETRAINED;
    }
    const bool training_conv = convention_ == v1::CONVENTION_TRAINING_ARGUMENTS || convention_ == v1::CONVENTION_ACCELERATE;
    if (training != training_conv) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convention: ", v1::Convention_Name(convention_), " does not apply to ", v1::Workload_Name(req_.workload()),
          "; accepted: TRAINING_ARGUMENTS or ACCELERATE for training, FROM_PRETRAINED or PIPELINE for inference"));
    }
    // Bounds, so that no answer or error echoes megabytes back (values are quoted in messages).
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
    if (training && !req_.device_map().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device_map: '", req_.device_map(), "' given for a training workload; TrainingArguments and Accelerator "
          "choose the device themselves: leave device_map empty (use use_cpu or env ACCELERATE_TORCH_DEVICE to steer)"));
    }
    // local_rank / world_size: fields or env, which must agree (T8).
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
    // runtime_backends.
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
    RETURN_IF_ERROR(EnvFlag("USE_TORCH_XLA", "import accelerate raises ValueError", use_torch_xla_));
    if (training) {
      RETURN_IF_ERROR(EnvFlag("ACCELERATE_USE_CPU", "Accelerate and Transformers raise ValueError", accelerate_use_cpu_));
      if (const std::string* v = Env("ACCELERATE_TORCH_DEVICE")) {
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
      }
    }
    return absl::OkStatus();
  }

  // What the request tells about the job's torch build (G-PLUGIN): runtime_backends as given, and
  // the job's packages.
  JobTorch JobTorchOf() const {
    JobTorch t;
    if (runtime_from_ == v1::PROVENANCE_GIVEN) t.runtime_given = runtime_list_;
    t.job = job_ ? &*job_ : nullptr;
    return t;
  }

  // ---- availability (P4, P5) ---------------------------------------------------------------

  bool RuntimeHas(const v1::Backend& b) const {
    if (runtime_.empty()) return true;
    const BackendSpec* spec = FindBackend(b.row());
    if (spec != nullptr && runtime_.count(std::string(spec->runtime_backend))) return true;
    // "cuda" (torch.cuda available) also drives AMD GPUs when there is no NVIDIA row to prefer.
    return b.row() == v1::ROW_CUDA_AMD && runtime_.count("cuda") && !HasRow(v1::ROW_CUDA_NVIDIA);
  }

  bool HasRow(v1::Row row) const {
    return std::any_of(inv_.backends().begin(), inv_.backends().end(),
                       [&](const v1::Backend& b) { return b.row() == row; });
  }

  absl::Status ComputeRows() {
    const v1::JobDevices* job = req_.has_job_devices() ? &req_.job_devices() : nullptr;
    // P-DRA: the devices Kubernetes allocated to the job.
    std::optional<JobAllocation> allocation;
    if (req_.has_device_allocation()) {
      ASSIGN_OR_RETURN(allocation, MatchAllocation(inv_, req_.device_allocation()));
      for (const std::string& e : allocation->explanation) out_.add_explanation(e);
      for (const std::string& w : allocation->unmatched) {
        out_.add_warnings(w);
        hazards_.push_back(w);
      }
    }
    for (const v1::Backend& b : inv_.backends()) {
      if (b.row() == v1::ROW_CPU) {
        cpu_ = &b;
        continue;
      }
      RowState r;
      r.backend = &b;
      ASSIGN_OR_RETURN(r.vis, ComputeVisibility(b, req_.env(), job, allocation ? &*allocation : nullptr));
      for (const std::string& e : r.vis.explanation) out_.add_explanation(e);
      for (const std::string& w : r.vis.warnings) out_.add_warnings(w);
      const auto supported = std::find_if(r.vis.units.begin(), r.vis.units.end(),
                                          [](const VisibleUnit& u) { return u.device->supported(); });
      if (r.vis.units.empty()) {
        r.reason = r.vis.hidden_reason;
        r.hazard = r.vis.hidden != Hidden::kMaskEmpty && r.vis.hidden != Hidden::kAllocation;
      } else if (supported == r.vis.units.end()) {
        // Hardware the row's PyTorch backend does not support is not a job misconfiguration.
        r.reason = absl::StrCat(b.hardware(), " present but no device the job sees is a PyTorch ", b.device_type(),
                                " target: ", r.vis.units.front().device->unusable_reason());
      } else if (!RuntimeHas(b) && b.row() == v1::ROW_TPU && runtime_.count("xla")) {
        r.reason = "Google TPU is driven through torch_xla here (runtime_backends has xla, not tpu): the job uses it as "
                   "xla / xla:0; the native tpu device needs torch-tpu";
      } else if (!RuntimeHas(b)) {
        r.reason = absl::StrCat(b.hardware(), " present but the job's PyTorch has no ", b.device_type(),
                                " backend (runtime_backends", runtime_from_ == v1::PROVENANCE_DETECTED ? " detected" : "",
                                ": ", absl::StrJoin(runtime_list_, ", "), "): ",
                                FindBackend(b.row())->install_hint);
        r.hazard = true;
      } else {
        r.available = true;
      }
      rows_.push_back(std::move(r));
    }
    // Both GPU rows map to `cuda`; one PyTorch build drives only one of them.
    RowState* nv = FindRow(v1::ROW_CUDA_NVIDIA);
    RowState* amd = FindRow(v1::ROW_CUDA_AMD);
    if (nv && amd && nv->available && amd->available) {
      amd->available = false;
      amd->reason = "NVIDIA and AMD GPUs are both usable, but one PyTorch build drives only one of them as `cuda`: "
                    "assuming a CUDA build (pass runtime_backends [\"rocm\"] for a ROCm build)";
    }
    std::vector<std::string> avail;
    for (const RowState& r : rows_) {
      if (r.available) avail.push_back(absl::StrCat(r.backend->name(), " (", r.vis.units.size(), " visible)"));
    }
    out_.add_explanation(absl::StrCat("P4 available to the job: ", avail.empty() ? "no accelerator row" : absl::StrJoin(avail, ", "),
                                      "; cpu is always available"));
    // P5: present-but-unusable rows are explained, never hidden.
    for (const RowState& r : rows_) {
      if (!r.available) out_.add_warnings(r.reason);
    }
    return absl::OkStatus();
  }

  RowState* FindRow(v1::Row row) {
    for (RowState& r : rows_) if (r.backend->row() == row) return &r;
    return nullptr;
  }

  const RowState* FirstAvailable(const std::vector<std::string>& order) const {
    for (const std::string& type : order) {
      for (const RowState& r : rows_) {
        if (r.available && r.backend->device_type() == type) return &r;
      }
    }
    return nullptr;
  }

  // Hazards from present rows the job cannot use, for an automatic choice under `strict`.
  void AutomaticChoiceHazards() {
    for (const RowState& r : rows_) {
      if (!r.available && r.hazard) hazards_.push_back(r.reason);
    }
  }

  // ---- answer building ---------------------------------------------------------------------

  // Keeps the answer bounded on big hosts (issue 12): `devices` and `max_memory`, what the job
  // needs, keep every device; `placed`, host identity for people and schedulers, keeps the first
  // kMaxPlacedDevices, and one explanation line says how many more there are.
  // Place() builds only the first kMaxPlacedDevices entries (the rest go to a scratch entry, for
  // their warnings), so a 256-device answer costs 16 entries, not 256 built and 240 dropped.
  void BoundPlaced() {
    if (placed_total_ <= kMaxPlacedDevices) return;
    out_.add_explanation(absl::StrCat("P-BOUND placed lists the first ", kMaxPlacedDevices, " of the ", placed_total_,
                                      " devices used (devices and max_memory name all of them); the host device of "
                                      "each later one is not in this answer: apply the job's visibility variables to "
                                      "GetInventory's devices"));
  }

  // The memory the job sees on `u`, in bytes: the MIG instance's when one is named; none when MIG
  // is on and none is named (CUDA gives the job one instance, whose memory is not the GPU's: no
  // figure is better than a wrong one, and max_memory is then left empty); else the device's,
  // split evenly over its sub-devices when `u` is one.
  static void UnitMemory(const VisibleUnit& u, std::optional<uint64_t>& total, std::optional<uint64_t>& free) {
    total.reset();
    free.reset();
    if (u.partition != nullptr) {
      if (u.partition->has_memory_total_bytes()) total = u.partition->memory_total_bytes();
      if (u.partition->has_memory_free_bytes()) free = u.partition->memory_free_bytes();
      return;
    }
    if (u.device->partitions_size() > 0) return;
    const uint64_t parts = u.sub_device >= 0 && u.device->sub_device_count() > 1 ? u.device->sub_device_count() : 1;
    if (u.device->has_memory_total_bytes()) total = u.device->memory_total_bytes() / parts;
    if (u.device->has_memory_free_bytes()) free = u.device->memory_free_bytes() / parts;
  }

  v1::PlacedDevice* Place(const RowState& r, int job_index) {
    const VisibleUnit& u = r.vis.units[job_index];
    used_[&r].insert(job_index);
    const bool indexed = r.backend->row() != v1::ROW_MPS;
    const bool listed = ++placed_total_ <= kMaxPlacedDevices;
    v1::PlacedDevice* p = listed ? out_.add_placed() : &beyond_;
    if (!listed) beyond_.Clear();  // past the bound only the device string is needed, for a warning
    p->set_device(indexed ? absl::StrCat(r.backend->device_type(), ":", job_index) : r.backend->device_type());
    if (listed) {
      p->set_job_index(indexed ? job_index : -1);
      p->set_host_index(static_cast<int>(u.device->host_index()));
      p->set_pci_bus_id(u.device->pci_bus_id());
      p->set_uuid(u.device->uuid());
      p->set_name(u.device->name());
      p->set_sub_device(u.sub_device);
      std::optional<uint64_t> total, free;
      UnitMemory(u, total, free);
      if (total) p->set_memory_total_bytes(*total);
      if (free) p->set_memory_free_bytes(*free);
      if (u.partition != nullptr) p->set_partition_uuid(u.partition->uuid());  // the job sees this MIG instance
    }
    if (!u.device->supported()) {
      const BackendSpec* spec = FindBackend(r.backend->row());
      const std::string w = absl::StrCat(
          p->device(), " is ", DescribeUnit(u), ", which the runtime enumerates but PyTorch does not support (",
          u.device->unusable_reason(), "): hide it from the job",
          spec->mask_variables.empty() ? "" : absl::StrCat(" with ", spec->mask_variables.front()));
      out_.add_warnings(w);
      hazards_.push_back(w);
    }
    return p;
  }

  void Answer(const RowState& r, const std::string& device) {
    out_.set_device(device);
    out_.set_backend(r.backend->row());
    out_.set_package(r.backend->package());
    out_.add_devices(device);
  }

  void AnswerCpu(const std::string& why) {
    out_.set_device("cpu");
    out_.set_backend(v1::ROW_CPU);
    out_.set_package(cpu_ != nullptr ? cpu_->package() : "torch");
    out_.add_devices("cpu");
    out_.add_explanation(why);
  }

  std::string Visible(const RowState& r) const {
    std::vector<std::string> v;
    for (size_t i = 0; i < r.vis.units.size(); ++i) {
      v.push_back(absl::StrCat(r.backend->device_type(), ":", i, " (", DescribeUnit(r.vis.units[i]), ")"));
    }
    return v.empty() ? "none" : absl::StrJoin(v, ", ");
  }

  // ---- training (docs/SEMANTICS.md section 5) ----------------------------------------------

  absl::Status Training() {
    const bool acc = convention_ == v1::CONVENTION_ACCELERATE;
    const char* api = acc ? "Accelerator().device" : "TrainingArguments.device";
    out_.add_explanation(absl::StrCat("convention ", v1::Convention_Name(convention_), ": emulating ", api,
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

  // Whether PartialState picks XLA (T-XLA, V-ACC-XLA-IMPORT, V-ACC-XLA-CPU).
  bool XlaApplies(bool state_cpu) {
    if (!runtime_.count("xla") || !use_torch_xla_) return false;
    if (!versions_.Has(Feature::kAccXlaImportOnly)) {
      const bool tpu = std::any_of(rows_.begin(), rows_.end(), [](const RowState& r) {
        return r.backend->row() == v1::ROW_TPU && !r.vis.units.empty();
      });
      const bool cuda = FirstAvailable({"cuda"}) != nullptr;
      if (!tpu || cuda || state_cpu) {
        out_.add_explanation(absl::StrCat("T-XLA not taken: ", versions_.Cite(Feature::kAccXlaImportOnly), "; here ",
                                          !tpu ? "no TPU is visible" : cuda ? "a CUDA GPU is available" : "cpu is set"));
        return false;
      }
      return true;
    }
    if (state_cpu && !versions_.Has(Feature::kAccXlaBeforeCpu)) {
      out_.add_explanation(absl::StrCat("T-XLA not taken: ", versions_.Cite(Feature::kAccXlaBeforeCpu)));
      return false;
    }
    return true;
  }

  absl::Status AnswerXla(bool state_cpu) {
    const RowState* tpu = nullptr;
    for (const RowState& r : rows_) if (r.backend->row() == v1::ROW_TPU && !r.vis.units.empty()) tpu = &r;
    out_.set_device("xla:0");
    out_.set_backend(tpu != nullptr ? v1::ROW_TPU : v1::ROW_UNSPECIFIED);
    out_.set_package("torch_xla");
    out_.add_devices("xla:0");
    if (tpu != nullptr) {
      const int idx = tpu->vis.units.size() > 1 && local_rank_ ? *local_rank_ % static_cast<int>(tpu->vis.units.size()) : 0;
      Place(*tpu, idx)->set_device("xla:0");
      out_.add_explanation(absl::StrCat("T-XLA torch_xla is importable (runtime_backends has xla, USE_TORCH_XLA not false) "
                                        "and a TPU is visible: Accelerate picks the XLA device before any other check; "
                                        "each process sees xla:0 (", versions_.Cite(Feature::kAccXlaImportOnly), ")"));
    } else {
      // Import-only check: no TPU here, the job still gets XLA. Name what it gets without it.
      v1::ResolveDeviceRequest without = req_;
      (*without.mutable_env())["USE_TORCH_XLA"] = "0";
      without.set_strict(false);
      v1::ResolveDeviceResponse alt;
      const std::string other = Resolution(inv_, without, &alt).Run().ok() ? alt.device()
                                                                          : "the device devplace would otherwise answer";
      out_.add_explanation(absl::StrCat("T-XLA torch_xla is importable (runtime_backends has xla, USE_TORCH_XLA not "
                                        "false): ", versions_.Cite(Feature::kAccXlaImportOnly),
                                        " -> the XLA device xla:0 although no TPU is visible"));
      const std::string w = absl::StrCat(
          "torch_xla is installed (runtime_backends has xla) and Accelerate ", versions_.accelerate().ToString(),
          " only tests that it imports: the job gets the XLA device xla:0, not ", other,
          "; set USE_TORCH_XLA=0 or uninstall torch_xla to get ", other);
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
  absl::Status MultiCpu(bool acc, const std::string& why) {
    if (!acc && torch_device_env_) {
      out_.add_explanation(absl::StrCat(why, "; distributed TrainingArguments passes PartialState.device, which "
                                        "ACCELERATE_TORCH_DEVICE=", torch_device_env_->ToString(), " set first"));
      return AnswerVerbatim(*torch_device_env_);
    }
    AutomaticChoiceHazards();
    AnswerCpu(absl::StrCat(why, ": cpu (Accelerate prints it as cpu:0, the same device)"));
    return absl::OkStatus();
  }

  absl::Status AnswerVerbatim(const DeviceString& d) {
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

  absl::Status Distributed(const RowState& row, const OrderRule& chain) {
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

  // The device string a single-process API gives for a row.
  std::string SingleDevice(bool acc, const std::string& type) const {
    if (type == "mps") return "mps";
    if (acc) return type == "xpu" && !versions_.Has(Feature::kAccXpuBare) ? "xpu:0" : type;
    return absl::StrCat(type, ":0");
  }

  // Rows the job can use that an automatic choice's order never considers: a warning each, naming
  // the rule; a hazard when the choice fell back to cpu (P6).
  void NeverPicked(const std::vector<std::string>& order, const std::string& who, const std::string& rule,
                   bool fell_to_cpu, const std::string& fix_for_tpu_neuron) {
    for (const RowState& x : rows_) {
      const std::string type = x.backend->device_type();
      if (!x.available || std::find(order.begin(), order.end(), type) != order.end()) continue;
      std::string w = absl::StrCat(x.backend->hardware(), " (", type, ") is available, but ", who,
                                   " never picks it (", rule, ")");
      if ((type == "tpu" || type == "neuron") && !fix_for_tpu_neuron.empty()) {
        absl::StrAppend(&w, ": ", absl::StrReplaceAll(fix_for_tpu_neuron, {{"<type>", type}}));
      }
      out_.add_warnings(w);
      if (fell_to_cpu) hazards_.push_back(w);
    }
  }

  absl::Status SingleProcess(bool acc) {
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

  // ---- inference (SEMANTICS.md section 6) --------------------------------------------------

  absl::Status FromPretrained() {
    const std::string& m = req_.device_map();
    out_.add_explanation(absl::StrCat("convention CONVENTION_FROM_PRETRAINED: emulating from_pretrained(device_map=",
                                      m.empty() ? "None" : absl::StrCat("\"", m, "\""), ")"));
    if (m.empty()) {
      AnswerCpu("I-NONE device_map is None: from_pretrained loads the weights on cpu");
      if (const RowState* r = FirstAvailable(versions_.Order(OrderKind::kAccMaxMemory).order)) {
        out_.add_warnings(absl::StrCat("hint: pass device_map=\"auto\" to use ", r->backend->device_type(), ":0"));
      }
      return absl::OkStatus();
    }
    if (kKeywords.count(m)) return AutoMap(m);
    if (std::optional<int64_t> n = DeviceMapInt(m)) {
      if (*n < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device_map: ", m, ": You can't pass device_map as a negative int. If you want to put the model on the cpu, "
            "pass device_map = 'cpu'"));
      }
      return IntDevice(*n, kIntOrder, "I-INT");
    }
    return ExplicitString(m);
  }

  absl::Status AutoMap(const std::string& keyword) {
    const OrderRule& mem = versions_.Order(OrderKind::kAccMaxMemory);
    const std::vector<std::string>& auto_order = mem.order;
    out_.add_explanation(absl::StrCat("I-AUTO get_max_memory order ", versions_.Cite(mem)));
    const RowState* r = FirstAvailable(auto_order);
    const RowState* mps = FirstAvailable({"mps"});
    AutomaticChoiceHazards();
    for (const RowState& x : rows_) {
      const std::string type = x.backend->device_type();
      if (!x.available || type == "mps" || std::find(auto_order.begin(), auto_order.end(), type) != auto_order.end()) {
        continue;
      }
      out_.add_warnings(absl::StrCat("device_map=\"", keyword, "\" never places on ", x.backend->name(),
                                     " (get_max_memory of Accelerate ", versions_.accelerate().ToString(),
                                     " does not probe it, ", mem.id, "): pass device_map=\"", type, "\" to use it"));
    }
    const uint64_t ram = inv_.host().memory_available_bytes() ? inv_.host().memory_available_bytes()
                                                              : inv_.host().memory_total_bytes();
    const std::string spill = mps != nullptr ? "mps" : "cpu";
    if (r == nullptr) {
      if (mps != nullptr) {
        Answer(*mps, "mps");
        Place(*mps, 0);
        out_.add_explanation(absl::StrCat("I-AUTO no row of ", OrderText(auto_order), " is available; MPS is: mps"));
      } else {
        AnswerCpu(absl::StrCat("I-AUTO no row of ", OrderText(auto_order), " is available: everything on cpu"));
      }
      (*out_.mutable_max_memory())[spill] = ram;
      out_.add_explanation(absl::StrCat("I-MEM max_memory {\"", spill, "\": ", ram, "} (available host RAM)"));
      return absl::OkStatus();
    }
    const std::string type = r->backend->device_type();
    const int n = static_cast<int>(r->vis.units.size());
    Answer(*r, absl::StrCat(type, ":0"));
    Place(*r, 0);
    for (int i = 1; i < n; ++i) {
      out_.add_devices(absl::StrCat(type, ":", i));
      Place(*r, i);
    }
    out_.add_devices(spill);
    out_.add_explanation(absl::StrCat("I-AUTO first available of ", OrderText(auto_order), " is ", r->backend->name(),
                                      ": devices ", type, ":0..", n - 1, ", then ", spill, " for what does not fit"));
    // I-MEM
    std::vector<uint64_t> free(n, 0);
    std::vector<std::string> unknown, total_only;
    for (int i = 0; i < n; ++i) {
      std::optional<uint64_t> unit_total, unit_free;
      UnitMemory(r->vis.units[i], unit_total, unit_free);
      if (unit_free) {
        free[i] = *unit_free;
      } else if (unit_total) {
        free[i] = *unit_total;
        total_only.push_back(out_.devices(i));  // devices(i) is `<type>:i`, as placed(i) would be
      } else {
        unknown.push_back(out_.devices(i));
      }
    }
    if (!unknown.empty()) {
      out_.add_warnings(absl::StrCat("max_memory left empty: the memory of ", BoundedList(unknown),
                                     " is unknown to devplace, and a partial map would push the model to the spill-over "
                                     "device; let Accelerate measure (pass no max_memory)"));
      out_.add_explanation("I-MEM no budgets: device memory unknown");
      return absl::OkStatus();
    }
    if (total_only.size() <= kMaxPlacedDevices) {
      for (const std::string& d : total_only) {
        out_.add_warnings(absl::StrCat("free memory of ", d, " is unknown: its max_memory budget uses total memory"));
      }
    } else {  // one line, bounded, on big hosts
      out_.add_warnings(absl::StrCat("free memory of ", BoundedList(total_only),
                                     " is unknown: their max_memory budgets use total memory"));
    }
    std::vector<uint64_t> budget = free;
    const bool low_zero = keyword == "balanced_low_0";
    std::string how;
    if (keyword == "sequential") {
      how = "sequential: 100 % of each device's free memory";
    } else if (n == 1) {
      budget[0] = static_cast<uint64_t>(std::floor(static_cast<long double>(free[0]) * 0.9L));
      how = "one accelerator: 90 % of its free memory (get_balanced_memory)";
    } else if (req_.has_model_size_bytes()) {
      // get_balanced_memory: model_size // N per device (// (N - 1) with low_zero), last keeps free.
      const uint64_t share = req_.model_size_bytes() / static_cast<uint64_t>(low_zero ? n - 1 : n);
      for (int i = 0; i + 1 < n; ++i) budget[i] = std::min(free[i], share);
      if (low_zero) {
        uint64_t rest = 0;
        for (int i = 1; i + 1 < n; ++i) rest += budget[i];
        rest += budget[n - 1];
        budget[0] = req_.model_size_bytes() > rest ? std::min(free[0], req_.model_size_bytes() - rest) : 0;
      }
      how = absl::StrCat(low_zero ? "balanced_low_0" : "balanced", ": model_size / ", low_zero ? n - 1 : n,
                         " per device except the last, which keeps its free memory",
                         low_zero ? "; device 0 gets only what the others cannot hold" : "",
                         " (no per-layer block headroom: devplace does not know the layers)");
    } else {
      how = "several accelerators and no model_size_bytes: each device's free memory (pass model_size_bytes for "
            "balanced budgets)";
    }
    auto& max_memory = *out_.mutable_max_memory();
    for (int i = 0; i < n; ++i) max_memory[absl::StrCat(i)] = budget[i];
    (*out_.mutable_max_memory())[spill] = ram;
    out_.add_explanation(absl::StrCat("I-MEM ", how, "; \"", spill, "\": available host RAM"));
    // Which vendor library each device figure came from (Device.attributes["memory_source"]).
    std::map<std::string, std::vector<std::string>> sources;
    for (int i = 0; i < n; ++i) {
      const auto& attributes = r->vis.units[i].device->attributes();
      if (const auto it = attributes.find("memory_source"); it != attributes.end()) {
        sources[it->second].push_back(out_.devices(i));
      }
    }
    for (const auto& [source, devices] : sources) {
      out_.add_explanation(absl::StrCat("I-MEM memory of ", BoundedList(devices), " from ", source));
    }
    return absl::OkStatus();
  }

  // An int device (I-INT, pipeline int): `<type>:<n>` on the first available row of `order`.
  absl::Status IntDevice(int64_t n, const std::vector<std::string>& order, const char* rule) {
    const RowState* r = FirstAvailable(order);
    if (r == nullptr) {
      if (convention_ == v1::CONVENTION_PIPELINE && !versions_.Has(Feature::kTfPipelineAccelDefault)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "device_map (pipeline device): ", n, " unrecognized or not available: no row of ", OrderText(order),
            " is available to this job, and the pipeline raises ValueError (", versions_.Cite(Feature::kTfPipelineAccelDefault),
            "); pass device=-1 for cpu", Unavailable()));
      }
      if (convention_ == v1::CONVENTION_PIPELINE) {
        AutomaticChoiceHazards();
        AnswerCpu(absl::StrCat(rule, " device=", n, " with no row of ", OrderText(order), " available: cpu"));
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "device_map: ", n, " means accelerator index ", n, ", but no row of ", OrderText(order),
          " is available to this job (PyTorch: Cannot access accelerator device when none is available); pass "
          "device_map=\"cpu\"", Unavailable()));
    }
    const std::string type = r->backend->device_type();
    if (type == "hpu" && convention_ == v1::CONVENTION_PIPELINE) {  // H-HPU: pipeline makes it hpu:<n>
      RETURN_IF_ERROR(CheckHpuIndex(absl::StrCat("hpu:", n), static_cast<int>(std::min<int64_t>(n, INT32_MAX)),
                                    absl::StrCat("device_map (pipeline device ", n, ")"), req_.env()));
    }
    const int visible = static_cast<int>(r->vis.units.size());
    if (n >= visible) {
      return absl::FailedPreconditionError(absl::StrCat(
          convention_ == v1::CONVENTION_PIPELINE ? "device_map (pipeline device)" : "device_map", ": ", n,
          " means ", type, ":", n, ", but the job sees ", visible, " ", type, " device(s): ", Visible(*r)));
    }
    std::string device = absl::StrCat(type, ":", n);
    int job_index = static_cast<int>(n);
    if ((type == "mps" && convention_ == v1::CONVENTION_FROM_PRETRAINED) ||
        (type == "hpu" && convention_ == v1::CONVENTION_FROM_PRETRAINED)) {
      device = type;  // no index: the process's current device (set_module_tensor_to_device maps ints to "hpu")
      job_index = 0;
    } else if (type == "mps") {
      job_index = 0;  // pipeline: torch.device(f"mps:{device}"); MPS has one device
    }
    out_.add_explanation(absl::StrCat(rule, " int ", n, ": first available of ", OrderText(order), " is ",
                                      r->backend->name(), " -> ", device));
    Answer(*r, device);
    Place(*r, job_index)->set_device(device);
    return absl::OkStatus();
  }

  std::string Unavailable() const {
    std::vector<std::string> why;
    for (const RowState& r : rows_) if (!r.available) why.push_back(r.reason);
    return why.empty() ? "" : absl::StrCat(" (", absl::StrJoin(why, "; "), ")");
  }

  // I-STR: an explicit device string.
  absl::Status ExplicitString(const std::string& s) {
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
    const std::string want = d.type == "xla" ? "tpu" : d.type;
    const RowState* present = nullptr;
    for (const RowState& r : rows_) {
      if (r.backend->device_type() != want) continue;
      if (r.available || (d.type == "xla" && !r.vis.units.empty() && (runtime_.empty() || runtime_.count("xla")))) {
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
  absl::StatusOr<std::string> CudaForRank() {
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

  std::string AvailableText() const {
    std::vector<std::string> v;
    for (const RowState& r : rows_) if (r.available) v.push_back(Visible(r));
    v.push_back("cpu");
    return absl::StrJoin(v, ", ");
  }

  absl::Status Pipeline() {
    const std::string& m = req_.device_map();
    out_.add_explanation(absl::StrCat("convention CONVENTION_PIPELINE: emulating pipeline(device=",
                                      m.empty() ? "None" : m, ")"));
    if (m.empty() && !versions_.Has(Feature::kTfPipelineAccelDefault)) {
      AnswerCpu(absl::StrCat("I-PIPE device=None: ", versions_.Cite(Feature::kTfPipelineAccelDefault), " -> cpu"));
      if (const RowState* r = FirstAvailable(kPipelineOrder)) {
        out_.add_warnings(absl::StrCat("hint: pass device=0 to use ", r->backend->device_type(), ":0"));
      }
      return absl::OkStatus();
    }
    if (m.empty()) {
      const RowState* r = FirstAvailable(kPipelineOrder);
      AutomaticChoiceHazards();
      if (r == nullptr) {
        AnswerCpu(absl::StrCat("I-PIPE device=None and no row of ", OrderText(kPipelineOrder), " is available: cpu"));
        return absl::OkStatus();
      }
      const std::string type = r->backend->device_type();
      const std::string device = absl::StrCat(type, ":0");  // mps too: pipeline builds torch.device(f"mps:{device}")
      out_.add_explanation(absl::StrCat("I-PIPE device=None: accelerator index 0 of the first available of ",
                                        OrderText(kPipelineOrder), " (", versions_.Rule(Feature::kTfPipelineAccelDefault).id,
                                        ", Transformers >= ", versions_.Rule(Feature::kTfPipelineAccelDefault).since.ToString(),
                                        ") -> ", device));
      Answer(*r, device);
      Place(*r, 0)->set_device(device);
      return absl::OkStatus();
    }
    if (std::optional<int64_t> n = DeviceMapInt(m)) {
      if (*n == -1) {
        AnswerCpu("I-PIPE device=-1: the model's own device, cpu for a freshly loaded model");
        return absl::OkStatus();
      }
      if (*n < 0) {
        AnswerCpu(absl::StrCat("I-PIPE device=", *n, ": a negative int other than -1 means cpu"));
        return absl::OkStatus();
      }
      return IntDevice(*n, kPipelineOrder, "I-PIPE");
    }
    return ExplicitString(m);
  }

  const v1::Inventory& inv_;
  const v1::ResolveDeviceRequest& req_;
  v1::ResolveDeviceResponse& out_;
  int placed_total_ = 0;          // Place() calls: devices the answer uses
  std::map<const RowState*, std::set<int>> used_;  // job indices Place() used, per row (E-ORDER-SMI)
  v1::PlacedDevice beyond_;       // scratch entry for devices past kMaxPlacedDevices
  v1::Convention convention_ = v1::CONVENTION_UNSPECIFIED;
  LibraryVersions versions_;
  std::optional<int> local_rank_;
  std::optional<int64_t> world_size_;
  std::set<std::string> runtime_;
  std::vector<std::string> runtime_list_;  // the runtime backends applied: given, else detected
  v1::Provenance runtime_from_ = v1::PROVENANCE_DEFAULT;
  std::optional<JobPython> job_;           // the request's job_environment, read
  bool accelerate_use_cpu_ = false;
  bool use_torch_xla_ = true;
  std::optional<DeviceString> torch_device_env_;
  std::string torch_device_env_note_;  // G-PLUGIN: who registers its type, when the build is not told
  const v1::Backend* cpu_ = nullptr;
  std::vector<RowState> rows_;
  std::vector<std::string> hazards_;
};

}  // namespace

absl::StatusOr<v1::ResolveDeviceResponse> Resolve(const v1::Inventory& inventory,
                                                  const v1::ResolveDeviceRequest& request) {
  v1::ResolveDeviceResponse out;
  if (absl::Status s = Resolution(inventory, request, &out).Run(); !s.ok()) return s;
  return out;
}

absl::Status ResolveSerialized(const v1::Inventory& inventory, const v1::ResolveDeviceRequest& request,
                               std::string* bytes) {
  // Every string, list and map entry of the answer comes from one arena, freed at once: on a big
  // host the answer is hundreds of small allocations otherwise (issue 12's profile: over half of
  // the resolver's time in malloc/free).
  google::protobuf::ArenaOptions options;
  options.start_block_size = 8 << 10;
  options.max_block_size = 64 << 10;
  google::protobuf::Arena arena(options);
  auto* out = google::protobuf::Arena::CreateMessage<v1::ResolveDeviceResponse>(&arena);
  if (absl::Status s = Resolution(inventory, request, out).Run(); !s.ok()) return s;
  bytes->clear();
  out->SerializeToString(bytes);
  return absl::OkStatus();
}

}  // namespace devplace::placement
