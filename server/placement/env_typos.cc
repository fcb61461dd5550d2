#include "server/placement/env_typos.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace devplace::placement {
namespace {

// Placement variables shorter than this are never matched: at most 2 edits on a short name reach
// unrelated variables. All of today's are longer; the check keeps the rule true if one is added.
constexpr size_t kMinTargetLength = 8;
constexpr int kMaxDistance = 2;

}  // namespace

const std::vector<std::string>& ReadEnvironmentVariables() {
  static const std::vector<std::string>* const kVariables = new std::vector<std::string>{
      "CUDA_VISIBLE_DEVICES",      "CUDA_DEVICE_ORDER",       "ROCR_VISIBLE_DEVICES",   "HIP_VISIBLE_DEVICES",
      "ZE_AFFINITY_MASK",          "ZE_FLAT_DEVICE_HIERARCHY", "ZE_ENABLE_PCI_ID_DEVICE_ORDER",
      "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES",     "CN_VISIBLE_DEVICES",     "MUSA_VISIBLE_DEVICES",
      "SDAA_VISIBLE_DEVICES",      "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES",    "HABANA_VISIBLE_MODULES",
      "HABANA_VISIBLE_DEVICES",    "TPU_VISIBLE_CHIPS",       "LOCAL_RANK",             "WORLD_SIZE",
      "ACCELERATE_USE_CPU",        "ACCELERATE_TORCH_DEVICE", "USE_TORCH_XLA",          "USE_TF",
      "USE_TORCH",
  };
  return *kVariables;
}

int FoldedEditDistance(absl::string_view a_in, absl::string_view b_in) {
  const std::string a = absl::AsciiStrToUpper(a_in), b = absl::AsciiStrToUpper(b_in);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> ClosestName(absl::string_view name, const std::vector<std::string>& candidates,
                                       int max_distance) {
  if (std::find(candidates.begin(), candidates.end(), name) != candidates.end()) return std::nullopt;
  std::optional<std::string> best;
  int best_distance = max_distance + 1;
  for (const std::string& candidate : candidates) {
    const int distance = FoldedEditDistance(name, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::optional<std::string> NearMissOf(absl::string_view name) {
  const std::vector<std::string>& known = ReadEnvironmentVariables();
  if (std::find(known.begin(), known.end(), name) != known.end()) return std::nullopt;
  std::optional<std::string> best;
  int best_distance = kMaxDistance + 1;
  for (const std::string& target : known) {
    if (target.size() < kMinTargetLength) continue;
    const size_t longer = std::max(target.size(), name.size()), shorter = std::min(target.size(), name.size());
    if (longer - shorter > static_cast<size_t>(kMaxDistance)) continue;  // cannot be within reach
    const int distance = FoldedEditDistance(name, target);
    if (distance < best_distance) {
      best_distance = distance;
      best = target;
    }
  }
  return best;
}

std::vector<std::string> EnvTypoWarnings(const google::protobuf::Map<std::string, std::string>& env) {
  const std::map<std::string, std::string> sorted(env.begin(), env.end());  // deterministic order
  std::vector<std::string> warnings;
  for (const auto& [key, value] : sorted) {
    if (std::optional<std::string> meant = NearMissOf(key)) {
      warnings.push_back(absl::StrCat("env ", key, " is not read by anything; did you mean ", *meant, "? (E-TYPO)"));
    }
  }
  return warnings;
}

}  // namespace devplace::placement
