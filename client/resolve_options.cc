// libdevplace's ResolveOptions: the request they make (ToRequest), the job's placement variables
// and accelerator /dev nodes captured from this process (FromEnvironment), or taken from another
// job's environment (ForJob).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>  // environ

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/common/bounded_read.h"
#include "devplace/client.h"

namespace devplace {
namespace {

// Whether `name` is `prefix` followed by at least one character, the first matching `first`
// (nullptr = any).
bool MatchesPrefix(absl::string_view name, absl::string_view prefix, int (*first)(int) = nullptr) {
  if (name.size() <= prefix.size() || !absl::StartsWith(name, prefix)) return false;
  return first == nullptr || first(static_cast<unsigned char>(name[prefix.size()])) != 0;
}

// The bounds of the /dev scan: the daemon takes at most 1024 job device nodes; the scan stops
// after 2 s (client/common/bounded_read.h's rule).
constexpr size_t kMaxDeviceNodes = 1024;

// Appends "/dev/<sub>/<name>" for each non-directory entry of dev_dir/sub that `match` accepts
// (the first kMaxDeviceNodes by name; names that are not UTF-8 are no device node devplace knows).
template <typename Match>
void ScanDev(const std::string& dev_dir, const std::string& sub, Match match, reading::ReadBudget& budget,
             std::vector<std::string>* out) {
  const std::string dir = sub.empty() ? dev_dir : absl::StrCat(dev_dir, "/", sub);
  bool more = false;
  absl::StatusOr<std::vector<std::string>> names = reading::ListNames(
      dir, kMaxDeviceNodes, budget, [&](absl::string_view n) { return reading::IsUtf8(n) && match(n); }, &more);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    if (reading::StatPath(absl::StrCat(dir, "/", name)).directory()) continue;
    out->push_back(sub.empty() ? absl::StrCat("/dev/", name) : absl::StrCat("/dev/", sub, "/", name));
  }
}

// An integer as Python's int() reads it (surrounding whitespace, optional sign, digits), or nullopt.
std::optional<int64_t> ParseInt(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::string_view digits = text;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) return std::nullopt;
  return value;
}

// The placement variables `lookup` finds (nullptr = unset) as options: LOCAL_RANK / WORLD_SIZE
// fill local_rank / world_size when valid, everything else goes into env verbatim.
template <typename Lookup>
ResolveOptions PlacementOptions(Lookup lookup) {
  ResolveOptions options;
  for (const std::string& name : PlacementEnvironmentVariables()) {
    const char* value = lookup(name);
    if (value == nullptr) continue;
    const std::optional<int64_t> number = ParseInt(value);
    if (name == "LOCAL_RANK" && number && *number >= 0 && *number <= INT32_MAX) {
      options.local_rank = static_cast<int32_t>(*number);
    } else if (name == "WORLD_SIZE" && number && *number >= 1 && *number <= INT32_MAX) {
      options.world_size = static_cast<int32_t>(*number);
    } else {
      options.env[name] = value;
    }
  }
  return options;
}

// The daemon's E-TYPO (server/placement/env_typos.cc) warns only about near misses of variables this long.
constexpr size_t kMinTypoTargetLength = 8;

// Adds the first kMaxCapturedNearMisses names (in byte order) that PossiblePlacementTypo()
// accepts to options->env with an empty value.
void AddNearMisses(std::vector<std::string> names, ResolveOptions* options) {
  std::sort(names.begin(), names.end());
  int added = 0;
  for (const std::string& name : names) {
    if (added == kMaxCapturedNearMisses) break;
    if (!PossiblePlacementTypo(name)) continue;
    options->env.emplace(name, "");
    ++added;
  }
}

}  // namespace

bool PossiblePlacementTypo(const std::string& name) {
  const std::vector<std::string>& known = PlacementEnvironmentVariables();
  if (std::find(known.begin(), known.end(), name) != known.end()) return false;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isprint(static_cast<unsigned char>(c)); })) {
    return false;
  }
  const std::string upper = absl::AsciiStrToUpper(name);
  std::map<std::string, int> bigrams;  // upper-cased two-character pieces of `name`, counted
  for (size_t i = 0; i + 1 < upper.size(); ++i) ++bigrams[upper.substr(i, 2)];
  for (const std::string& target : known) {
    if (target.size() < kMinTypoTargetLength) continue;  // E-TYPO's targets: 2 edits never reach a short name
    if (std::max(name.size(), target.size()) - std::min(name.size(), target.size()) > 2) continue;
    std::map<std::string, int> left = bigrams;
    int shared = 0;
    for (size_t i = 0; i + 1 < target.size(); ++i) {
      int& count = left[target.substr(i, 2)];
      if (count > 0) --count, ++shared;
    }
    // Each edit breaks at most 3 of the target's pieces (a transposition), so 2 edits leave
    // at least size - 1 - 6 of them shared.
    if (shared + 7 >= static_cast<int>(target.size())) return true;
  }
  return false;
}

const std::vector<std::string>& PlacementEnvironmentVariables() {
  static const std::vector<std::string>* const kVariables = new std::vector<std::string>{
      "CUDA_VISIBLE_DEVICES",    "CUDA_DEVICE_ORDER",      "ROCR_VISIBLE_DEVICES",   "HIP_VISIBLE_DEVICES",
      "ZE_AFFINITY_MASK",        "ZE_FLAT_DEVICE_HIERARCHY", "ZE_ENABLE_PCI_ID_DEVICE_ORDER",
      "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES",
      "CN_VISIBLE_DEVICES",      "MUSA_VISIBLE_DEVICES",   "SDAA_VISIBLE_DEVICES",   "NEURON_RT_VISIBLE_CORES",
      "NEURON_RT_NUM_CORES",
      "HABANA_VISIBLE_MODULES",  "HABANA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS",      "LOCAL_RANK",
      "WORLD_SIZE",              "ACCELERATE_USE_CPU",     "ACCELERATE_TORCH_DEVICE", "USE_TORCH_XLA",
      "USE_TF",                  "USE_TORCH",
  };
  return *kVariables;
}

std::vector<std::string> JobDeviceNodes(const std::string& dev_dir) {
  auto digit = [](int c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)) ? 1 : 0; };
  std::vector<std::string> nodes;
  reading::ReadBudget budget(absl::Seconds(2), 0);
  ScanDev(dev_dir, "", [&](absl::string_view n) {
    return MatchesPrefix(n, "nvidia", +digit) || absl::StartsWith(n, "neuron") || absl::StartsWith(n, "accel") ||
           MatchesPrefix(n, "davinci", +digit) || absl::StartsWith(n, "cambricon_dev") || absl::StartsWith(n, "mtgpu.");
  }, budget, &nodes);
  ScanDev(dev_dir, "dri", [](absl::string_view n) {
    return absl::StartsWith(n, "renderD") || absl::StartsWith(n, "card");
  }, budget, &nodes);
  ScanDev(dev_dir, "vfio", [&](absl::string_view n) { return digit(static_cast<unsigned char>(n[0])) != 0; }, budget,
          &nodes);
  ScanDev(dev_dir, "accel", [](absl::string_view n) { return absl::StartsWith(n, "accel"); }, budget, &nodes);
  std::sort(nodes.begin(), nodes.end());
  if (nodes.size() > kMaxDeviceNodes) nodes.resize(kMaxDeviceNodes);
  return nodes;
}

v1::ResolveDeviceRequest ResolveOptions::ToRequest() const {
  v1::ResolveDeviceRequest request;
  request.set_workload(workload);
  request.set_convention(convention);
  request.set_device_map(device_map);
  request.set_use_cpu(use_cpu);
  if (local_rank) request.set_local_rank(*local_rank);
  if (world_size) request.set_world_size(*world_size);
  for (const auto& [key, value] : env) (*request.mutable_env())[key] = value;
  for (const std::string& backend : runtime_backends) request.add_runtime_backends(backend);
  if (job_device_nodes) {
    v1::JobDevices* devices = request.mutable_job_devices();  // present even when the list is empty
    for (const std::string& node : *job_device_nodes) devices->add_device_nodes(node);
  }
  request.set_strict(strict);
  if (model_size_bytes) request.set_model_size_bytes(*model_size_bytes);
  request.set_transformers_version(transformers_version);
  request.set_accelerate_version(accelerate_version);
  if (job_environment) *request.mutable_job_environment() = *job_environment;
  if (device_allocation) *request.mutable_device_allocation() = *device_allocation;
  return request;
}

ResolveOptions ResolveOptions::FromEnvironment() { return FromEnvironment("/dev"); }

ResolveOptions ResolveOptions::FromEnvironment(const std::string& dev_dir) {
  ResolveOptions options = PlacementOptions([](const std::string& name) { return std::getenv(name.c_str()); });
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    names.emplace_back(text.substr(0, text.find('=')));
  }
  AddNearMisses(std::move(names), &options);
  options.job_device_nodes = JobDeviceNodes(dev_dir);
  if (const char* fallback = std::getenv("DEVPLACE_FALLBACK"); fallback != nullptr) options.fallback = fallback;
  if (absl::StatusOr<v1::DeviceAllocation> allocation = ReadDeviceAllocation(kDraMetadataDir); allocation.ok()) {
    options.device_allocation = *std::move(allocation);
  }
  return options;
}

ResolveOptions ResolveOptions::ForJob(v1::Workload workload, const std::map<std::string, std::string>& job_env,
                                      std::optional<std::vector<std::string>> job_device_nodes) {
  ResolveOptions options = PlacementOptions([&job_env](const std::string& name) -> const char* {
    const auto it = job_env.find(name);
    return it == job_env.end() ? nullptr : it->second.c_str();
  });
  std::vector<std::string> names;
  for (const auto& [name, value] : job_env) names.push_back(name);
  AddNearMisses(std::move(names), &options);
  options.workload = workload;
  options.job_device_nodes = std::move(job_device_nodes);
  return options;
}

}  // namespace devplace
