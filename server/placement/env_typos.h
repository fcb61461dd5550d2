// E-TYPO (docs/SEMANTICS.md section 9): a variable of the request's env whose name is a near miss
// of a placement variable it is not (CUDA_VISIBLE_DEVICE, LOCAL_RANKS, cuda_visible_devices) is
// read by nothing; the answer says which variable was probably meant. The one place the distance
// rule is decided.
#ifndef DEVPLACE_SERVER_PLACEMENT_ENV_TYPOS_H_
#define DEVPLACE_SERVER_PLACEMENT_ENV_TYPOS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"

namespace devplace::placement {

// The variables the resolver reads from ResolveDeviceRequest.env (libdevplace's
// PlacementEnvironmentVariables() holds the same set; tests/client checks they agree).
const std::vector<std::string>& ReadEnvironmentVariables();

// Optimal-string-alignment (restricted Damerau-Levenshtein) distance between `a` and `b` after
// ASCII upper-casing: insertions, deletions, substitutions and transpositions of adjacent
// characters each count 1.
int FoldedEditDistance(absl::string_view a, absl::string_view b);

// The entry of `candidates` closest to `name` by FoldedEditDistance when that distance is at most
// `max_distance` and `name` is not itself one of them (exact); the first of equally close ones;
// nullopt otherwise. For "did you mean" hints (device_map keywords here, the CLI's commands and
// flags).
std::optional<std::string> ClosestName(absl::string_view name, const std::vector<std::string>& candidates,
                                       int max_distance);

// The placement variable `name` is a near miss of, or nullopt: `name` is not itself one of
// ReadEnvironmentVariables() (exact, case-sensitive), and its FoldedEditDistance to one of them
// is at most 2 (every placement variable is at least 8 characters long, so a 2-edit slip never
// lands on an unrelated short name). The closest wins; ties go to the earlier in the list.
std::optional<std::string> NearMissOf(absl::string_view name);

// One warning per near-miss key of `env`, in key order:
// "env CUDA_VISIBLE_DEVICE is not read by anything; did you mean CUDA_VISIBLE_DEVICES? (E-TYPO)".
std::vector<std::string> EnvTypoWarnings(const google::protobuf::Map<std::string, std::string>& env);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_ENV_TYPOS_H_
