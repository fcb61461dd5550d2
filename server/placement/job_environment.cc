#include "server/placement/job_environment.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace devplace::placement {
namespace {

constexpr int kMaxPackages = 64;
constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxSourceBytes = 512;
constexpr int kMaxProblems = 64;
constexpr size_t kMaxProblemBytes = 1024;

// The local version label of a version string ("2.5.1+cu124" -> "cu124"), lower case.
std::string LocalTag(absl::string_view version) {
  const size_t plus = version.find('+');
  return plus == absl::string_view::npos ? "" : absl::AsciiStrToLower(version.substr(plus + 1));
}

// The backend torch's own build provides, from its local tag (PyTorch's wheel indexes tag their
// builds: +cu124, +rocm6.2, +xpu, +cpu); "" when the tag does not say.
absl::string_view BuildBackend(absl::string_view tag) {
  if (tag.size() > 2 && absl::StartsWith(tag, "cu") && absl::ascii_isdigit(static_cast<unsigned char>(tag[2]))) {
    return "cuda";
  }
  if (absl::StartsWith(tag, "rocm")) return "rocm";
  if (absl::StartsWith(tag, "xpu")) return "xpu";
  if (absl::StartsWith(tag, "cpu")) return "cpu";
  return "";
}

}  // namespace

std::string NormalizePackageName(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (out.empty() || out.back() != '-') out.push_back('-');
    } else {
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

const std::vector<PluginPackage>& PluginPackages() {
  // Each package makes its device type importable in torch (BackendSpec::package of the row).
  static const std::vector<PluginPackage> kPlugins = {
      {"torch-npu", "npu"},           {"torch-mlu", "mlu"},
      {"torch-musa", "musa"},         {"torch-sdaa", "sdaa"},
      {"intel-extension-for-pytorch", "xpu"},
      {"habana-torch-plugin", "hpu"},  // Intel Gaudi's PyTorch bridge (import habana_frameworks.torch)
      {"torch-xla", "xla"},           {"torch-neuronx", "neuron"},
      {"torch-tpu", "tpu"},
  };
  return kPlugins;
}

absl::StatusOr<JobPython> ReadJobPython(const v1::JobEnvironment& env) {
  if (env.source().size() > kMaxSourceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job_environment.source: ", env.source().size(),
                                                   " bytes; at most ", kMaxSourceBytes));
  }
  if (env.packages_size() > kMaxPackages) {
    return absl::InvalidArgumentError(absl::StrCat("job_environment.packages: ", env.packages_size(),
                                                   " entries; at most ", kMaxPackages,
                                                   " (torch, transformers, accelerate and torch's device plug-ins)"));
  }
  if (env.problems_size() > kMaxProblems) {
    return absl::InvalidArgumentError(absl::StrCat("job_environment.problems: ", env.problems_size(),
                                                   " entries; at most ", kMaxProblems));
  }
  for (int i = 0; i < env.problems_size(); ++i) {
    if (env.problems(i).size() > kMaxProblemBytes) {
      return absl::InvalidArgumentError(absl::StrCat("job_environment.problems[", i, "]: ", env.problems(i).size(),
                                                     " bytes; at most ", kMaxProblemBytes));
    }
  }
  JobPython job;
  job.source = env.source().empty() ? "the job's Python environment" : env.source();
  job.problems.assign(env.problems().begin(), env.problems().end());
  std::set<std::string> seen;
  std::vector<std::string> backends, how;
  for (const v1::PythonPackage& p : env.packages()) {
    if (p.name().empty() || p.name().size() > kMaxNameBytes || p.version().size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("job_environment.packages: name '", p.name().substr(0, 64),
                                                     "' version '", p.version().substr(0, 64),
                                                     "': want a non-empty name and a version of at most ",
                                                     kMaxNameBytes, " bytes each"));
    }
    const std::string name = NormalizePackageName(p.name());
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("job_environment.packages: ", name,
                                                     " is listed twice; list each distribution once (the one "
                                                     "the job imports, first on its sys.path)"));
    }
    if (name == "torch") job.torch = p.version();
    if (name == "transformers") job.transformers = p.version();
    if (name == "accelerate") job.accelerate = p.version();
    if (name == "intel-extension-for-pytorch") job.ipex = p.version();
    if (name == "torch-xla") job.torch_xla = p.version();
  }
  // V-JOB-BUILD: torch's build, then each plug-in that adds a device type.
  auto add = [&](absl::string_view backend) {
    if (std::find(backends.begin(), backends.end(), backend) == backends.end()) backends.emplace_back(backend);
  };
  if (job.torch) {
    const std::string tag = LocalTag(*job.torch);
    const absl::string_view built = BuildBackend(tag);
    if (!built.empty()) {
      add(built);
      how.push_back(absl::StrCat("torch ", *job.torch, " (+", tag, ": a ", built == "cpu" ? "CPU-only" : built,
                                 " build) -> ", built));
    } else {
      how.push_back(absl::StrCat("torch ", *job.torch, " (no +cuXXX/+rocmX/+xpu/+cpu tag: the build is not told)"));
    }
  }
  for (const PluginPackage& plugin : PluginPackages()) {
    for (const v1::PythonPackage& p : env.packages()) {
      if (NormalizePackageName(p.name()) != plugin.name) continue;
      job.plugins.push_back(absl::StrCat(p.name(), " ", p.version()));
      // IPEX's CPU variant (+cpu) adds no device type.
      if (plugin.backend == "xpu" && BuildBackend(LocalTag(p.version())) == "cpu") {
        how.push_back(absl::StrCat(p.name(), " ", p.version(), " (its CPU variant: no xpu)"));
        continue;
      }
      add(plugin.backend);
      how.push_back(absl::StrCat(p.name(), " ", p.version(), " -> ", plugin.backend));
    }
  }
  if (!job.torch) {
    how.insert(how.begin(), "torch is not installed");
  }
  // A plug-in's device rides on torch; with the base build untold, cpu is still there.
  if (!backends.empty() && std::find(backends.begin(), backends.end(), "cpu") == backends.end()) add("cpu");
  job.backends = std::move(backends);
  job.backends_reason = absl::StrJoin(how, "; ");
  return job;
}

}  // namespace devplace::placement
