// The request flags of `devplace resolve` (also `fleet --resolve`, `pick` and `run`): the job's
// workload, convention, device_map, rank, variables, device nodes and library versions, which
// commands take each (RequestFlagNames), and OptionsFromFlags() that turns them into ResolveOptions
// (request_flags.h).
#include "client/cli/request_flags.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "devplace/client.h"
#include "server/placement/versions.h"

ABSL_FLAG(std::string, workload, "",
          "training or inference (resolve: required; pick, run: the row of the job's answer for it, training when "
          "omitted)");
ABSL_FLAG(std::string, convention, "",
          "Library API to emulate: training_arguments, accelerate (training), from_pretrained, pipeline "
          "(inference); default: training_arguments for training, from_pretrained for inference");
ABSL_FLAG(std::string, device_map, "",
          "from_pretrained's device_map (auto, balanced, balanced_low_0, sequential, a device string such "
          "as cuda:1, or an int), or pipeline's device; empty = None. From Transformers 5.0 from_pretrained "
          "reads exactly cuda as cuda:<LOCAL_RANK, else 0> (rule I-CUDA-RANK)");
ABSL_FLAG(bool, use_cpu, false, "TrainingArguments(use_cpu=True) / Accelerator(cpu=True)");
ABSL_FLAG(std::optional<int>, local_rank, std::nullopt, "The process's local rank (>= 0); marks a distributed job");
ABSL_FLAG(std::optional<int>, world_size, std::nullopt, "Processes in the job (>= 1)");
ABSL_FLAG(std::vector<std::string>, runtime_backends, {},
          "Comma list of backends the job's PyTorch can use: cuda, rocm, xpu, mps, hpu, npu, mlu, musa, "
          "neuron, sdaa, tpu, xla, cpu; empty = assume every present row's package is installed. Given, a "
          "plug-in device type not listed (npu, mlu, musa, sdaa, neuron, tpu) in --device_map or "
          "ACCELERATE_TORCH_DEVICE is the job's start-up error, naming the package (rule G-PLUGIN)");
ABSL_FLAG(bool, strict, false, "Turn hazards into FAILED_PRECONDITION errors instead of warnings");
ABSL_FLAG(std::optional<uint64_t>, model_size_bytes, std::nullopt,
          "Model size in bytes (accepted; max_memory budgets are each device's free memory, which "
          "from_pretrained's get_balanced_memory shares out by the model's layers)");
ABSL_FLAG(std::string, transformers_version, "",
          "Transformers release whose rules to emulate, e.g. 4.46.3 or 5.0.0 (4.30.0 or newer; a release newer "
          "than the daemon's rules gets its newest rules and a warning); empty = the newest release devplace knows "
          "(5.15.0)");
ABSL_FLAG(std::string, accelerate_version, "",
          "Accelerate release whose rules to emulate, e.g. 0.25.0 or 1.14.0 (0.25.0 or newer; a release newer "
          "than the daemon's rules gets its newest rules and a warning); empty = the newest release devplace knows "
          "(1.14.0)");
ABSL_FLAG(std::string, env, "",
          "K=V placement variable for the job (e.g. CUDA_VISIBLE_DEVICES=1); repeatable, or a comma list "
          "(a piece without '=' continues the previous value: --env=CUDA_VISIBLE_DEVICES=0,1). Overrides "
          "the CLI's own environment");
ABSL_FLAG(bool, no_environment, false,
          "Do not read the CLI's own environment (placement variables, LOCAL_RANK, WORLD_SIZE), /dev "
          "nodes and DRA device metadata; send only what the flags say");
ABSL_FLAG(std::string, job_device_nodes, "",
          "Comma list of the job's accelerator /dev nodes (e.g. /dev/nvidia1), or `none` for a job that "
          "sees none; default: scan this process's /dev (not done with --inventory or --no_environment)");
ABSL_FLAG(std::string, fallback, "",
          "When the daemon gives no answer (not running, unreachable, no inventory yet, --timeout passed): "
          "none = fail (exit 1), cpu = print cpu and a `devplace: warning: devplace fallback: ...` line naming "
          "the error (exit 0). Default: env DEVPLACE_FALLBACK (unless --no_environment), else none");
ABSL_FLAG(std::string, python_env, "",
          "The job's Python environment, read without running it: a venv (with its base interpreter's "
          "packages when its pyvenv.cfg includes the system site packages), a conda or other prefix, or a "
          "site-packages directory. Its torch build and plug-ins fill an empty --runtime_backends, its "
          "transformers / accelerate releases an empty --transformers_version / --accelerate_version "
          "(package metadata: *.dist-info, *.egg-info); the answer says which were used and where from, and "
          "warns of any file it could not use");
ABSL_FLAG(std::string, python, "",
          "The job's Python interpreter (e.g. /opt/venv/bin/python), asked once with -I for its sys.path, "
          "whose packages are then read as --python_env reads them (nothing of the job is imported); it "
          "must answer within 10 s");

ABSL_FLAG(std::string, dra_metadata_dir, "",
          "The job's Kubernetes DRA device metadata directory (<claim>/<request>/<driver>-metadata.json files "
          "under resourceclaims/ and resourceclaimtemplates/); default: "
          "/var/run/kubernetes.io/dra-device-attributes when it exists (not read with --inventory or "
          "--no_environment); `none` sends none. The devices it lists are the job's devices (rule P-DRA)");

namespace devplace::cli {

std::vector<std::string> g_env_values;

namespace {

// Every request flag that describes the job, in `devplace resolve --help`'s order, and whether
// `fleet --resolve` and `pick` / `run` take it (resolve takes them all).
struct RequestFlag {
  const char* name;
  bool fleet;
  bool pick;
};
constexpr RequestFlag kRequestFlags[] = {
    {"workload", true, true},          {"convention", true, false},
    {"device_map", true, false},       {"use_cpu", true, false},
    {"local_rank", true, false},       {"world_size", true, false},
    {"runtime_backends", true, true},  {"strict", true, false},
    {"model_size_bytes", true, false}, {"transformers_version", true, false},
    {"accelerate_version", true, false}, {"python_env", true, false},
    {"python", true, false},           {"env", true, true},
    {"no_environment", false, true},   {"job_device_nodes", true, true},
    {"dra_metadata_dir", false, true},
};

// --env values as K=V entries; a comma piece without '=' continues the previous value.
absl::StatusOr<std::map<std::string, std::string>> EnvFlag() {
  std::map<std::string, std::string> env;
  std::string* last = nullptr;
  for (const std::string& flag_value : g_env_values) {
    for (absl::string_view piece : absl::StrSplit(flag_value, ',')) {
      const size_t eq = piece.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        if (last == nullptr || eq == 0) {
          return absl::InvalidArgumentError(absl::StrCat("--env: \"", piece, "\" is not K=V"));
        }
        absl::StrAppend(last, ",", piece);
        continue;
      }
      last = &env[std::string(piece.substr(0, eq))];
      *last = std::string(piece.substr(eq + 1));
    }
    last = nullptr;
  }
  return env;
}

template <typename Enum>
bool ParseEnumFlag(const std::string& value, const std::string& prefix, bool (*parse)(const std::string&, Enum*),
                   Enum* out) {
  std::string upper = absl::AsciiStrToUpper(value);
  return !upper.empty() && upper != "UNSPECIFIED" && parse(prefix + upper, out);
}

}  // namespace

std::vector<const char*> RequestFlagNames(RequestFlagUser user) {
  std::vector<const char*> names;
  for (const RequestFlag& flag : kRequestFlags) {
    if (user == RequestFlagUser::kResolve || (user == RequestFlagUser::kFleet ? flag.fleet : flag.pick)) {
      names.push_back(flag.name);
    }
  }
  return names;
}

absl::StatusOr<ResolveOptions> OptionsFromFlags(bool offline, bool use_environment, bool workload_required) {
  const bool no_env = !use_environment || absl::GetFlag(FLAGS_no_environment);
  ResolveOptions options = no_env ? ResolveOptions() : ResolveOptions::FromEnvironment();
  // A saved inventory describes some host, not necessarily this one: this /dev says nothing.
  if (offline) options.job_device_nodes.reset(), options.device_allocation.reset();

  const std::string workload = absl::GetFlag(FLAGS_workload);
  if (workload.empty() && workload_required) {
    return absl::InvalidArgumentError("--workload is required: training or inference");
  }
  if (!workload.empty() && !ParseEnumFlag(workload, "WORKLOAD_", &v1::Workload_Parse, &options.workload)) {
    return absl::InvalidArgumentError(absl::StrCat("--workload=", workload, ": want training or inference"));
  }
  const std::string convention = absl::GetFlag(FLAGS_convention);
  if (!convention.empty() && !ParseEnumFlag(convention, "CONVENTION_", &v1::Convention_Parse, &options.convention)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--convention=", convention, ": want training_arguments, accelerate, from_pretrained or pipeline"));
  }
  options.device_map = absl::GetFlag(FLAGS_device_map);
  options.use_cpu = absl::GetFlag(FLAGS_use_cpu);
  if (std::optional<int> rank = absl::GetFlag(FLAGS_local_rank)) {
    options.local_rank = *rank;
    options.env.erase("LOCAL_RANK");  // the flag replaces the environment's value
  }
  if (std::optional<int> world = absl::GetFlag(FLAGS_world_size)) {
    options.world_size = *world;
    options.env.erase("WORLD_SIZE");
  }
  options.runtime_backends = absl::GetFlag(FLAGS_runtime_backends);
  options.strict = absl::GetFlag(FLAGS_strict);
  options.model_size_bytes = absl::GetFlag(FLAGS_model_size_bytes);
  // Checked here too, so a typo is a usage error (exit 2) naming the flag and the supported range. A
  // release newer than the rules passes (V-SKEW: the daemon answers with its newest rules and a warning).
  options.transformers_version = absl::GetFlag(FLAGS_transformers_version);
  options.accelerate_version = absl::GetFlag(FLAGS_accelerate_version);
  if (absl::Status v = placement::LibraryVersions::FromRequest(options.transformers_version, options.accelerate_version)
                           .status();
      !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", v.message()));
  }
  absl::StatusOr<std::map<std::string, std::string>> env = EnvFlag();
  if (!env.ok()) return env.status();
  for (const auto& [key, value] : *env) {
    options.env[key] = value;
    if (key == "LOCAL_RANK" && !absl::GetFlag(FLAGS_local_rank)) options.local_rank.reset();
    if (key == "WORLD_SIZE" && !absl::GetFlag(FLAGS_world_size)) options.world_size.reset();
  }
  const std::string python_env = absl::GetFlag(FLAGS_python_env), python = absl::GetFlag(FLAGS_python);
  if (!python_env.empty() && !python.empty()) {
    return absl::InvalidArgumentError("--python_env and --python both given: name the job's environment once "
                                      "(a directory with --python_env, or its interpreter with --python)");
  }
  if (!python_env.empty() || !python.empty()) {
    absl::StatusOr<v1::JobEnvironment> job =
        python_env.empty() ? AskPythonInterpreter(python) : ReadPythonEnvironment(python_env);
    if (!job.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(python_env.empty() ? "--python=" : "--python_env=",
                                                     job.status().message()));
    }
    options.job_environment = *std::move(job);
  }
  if (const std::string fallback = absl::GetFlag(FLAGS_fallback); !fallback.empty()) options.fallback = fallback;
  if (options.fallback != "" && options.fallback != "none" && options.fallback != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(absl::GetFlag(FLAGS_fallback).empty() ? "env DEVPLACE_FALLBACK=" : "--fallback=",
                                                   options.fallback, ": accepted: cpu or none"));
  }
  const std::string dra = absl::GetFlag(FLAGS_dra_metadata_dir);
  if (dra == "none") {
    options.device_allocation.reset();
  } else if (!dra.empty()) {
    absl::StatusOr<v1::DeviceAllocation> allocation = ReadDeviceAllocation(dra);
    if (!allocation.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--dra_metadata_dir=", allocation.status().message()));
    }
    options.device_allocation = *std::move(allocation);
  }
  const std::string nodes = absl::GetFlag(FLAGS_job_device_nodes);
  if (nodes == "none") {
    options.job_device_nodes = std::vector<std::string>();
  } else if (!nodes.empty()) {
    options.job_device_nodes = absl::StrSplit(nodes, ',', absl::SkipEmpty());
    for (const std::string& node : *options.job_device_nodes) {
      if (!absl::StartsWith(node, "/")) {
        return absl::InvalidArgumentError(absl::StrCat("--job_device_nodes: '", node, "' is not an absolute path; "
                                                       "accepted: a comma list of /dev paths (e.g. /dev/nvidia1,"
                                                       "/dev/dri/renderD129) or `none`"));
      }
    }
  }
  return options;
}

}  // namespace devplace::cli
