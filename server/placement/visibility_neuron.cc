// AWS Neuron (docs/SEMANTICS.md section 3, E-Neuron): NeuronCores are the devices;
// NEURON_RT_VISIBLE_CORES picks them, NEURON_RT_NUM_CORES keeps the first N.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement::visibility_internal {

absl::Status MaskNeuron(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* cores = Get(env, "NEURON_RT_VISIBLE_CORES");
  constexpr absl::string_view kAccepted = "core index N, inclusive range A-B, or a comma list of them, e.g. 0-1,4";
  if (cores != nullptr) {
    MarkMasked(out, "NEURON_RT_VISIBLE_CORES", *cores);
    std::vector<VisibleUnit> picked;
    std::set<int> seen;
    for (absl::string_view e : absl::StrSplit(*cores, ',')) {
      int a = 0, b = 0;
      const bool ok = ParseCoreEntry(e, &a, &b);
      if (!ok) return BadMask("NEURON_RT_VISIBLE_CORES", *cores, absl::StrCat("entry '", e, "' is malformed"), kAccepted);
      for (int c = a; c <= b; ++c) {
        if (c >= static_cast<int>(units.size())) {
          return BadMask("NEURON_RT_VISIBLE_CORES", *cores,
                         absl::StrCat("core ", c, " does not exist: this host has ", units.size(), " NeuronCore(s)"),
                         kAccepted);
        }
        if (!seen.insert(c).second) {
          return BadMask("NEURON_RT_VISIBLE_CORES", *cores, absl::StrCat("core ", c, " is listed twice"), kAccepted);
        }
        picked.push_back(units[c]);
      }
    }
    units = std::move(picked);
    out.explanation.push_back(absl::StrCat("E-Neuron NEURON_RT_VISIBLE_CORES=", *cores, ": ", UnitList(units, "neuron")));
  }
  const std::string* num = Get(env, "NEURON_RT_NUM_CORES");
  if (num != nullptr) {
    int k = 0;
    if (!absl::SimpleAtoi(*num, &k) || k < 0) {
      return BadMask("NEURON_RT_NUM_CORES", *num, "not a non-negative integer", "a core count, 0 = all");
    }
    if (k > static_cast<int>(units.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "env.NEURON_RT_NUM_CORES=", k, " asks for more NeuronCores than the ", units.size(), " visible"));
    }
    if (k > 0) {
      MarkMasked(out, "NEURON_RT_NUM_CORES", *num);
      units.resize(k);
      out.explanation.push_back(absl::StrCat("E-Neuron NEURON_RT_NUM_CORES=", k, ": the first ", k,
                                             " core(s): ", UnitList(units, "neuron")));
    }
  }
  return absl::OkStatus();
}

}  // namespace devplace::placement::visibility_internal
