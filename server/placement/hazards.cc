// Warnings and hazards the conventions share (docs/SEMANTICS.md sections 8 and 9): present rows the
// job cannot use, under `strict` (P5); available rows an automatic choice never considers (P6); the
// devices used numbered otherwise than in PCI bus order (E-ORDER-SMI). Run() adds the two that need
// no resolution state: masks set for another row (H-FOREIGN, visibility.h) and misspelt variables
// (E-TYPO, env_typos.cc).

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/visibility.h"

namespace devplace::placement::resolver_internal {

// E-ORDER-SMI: the devices the answer uses, in the job's numbering, against PCI bus order.
void Resolution::RenumberingWarnings() {
  for (const auto& [row, indices] : used_) {
    const bool keyed = !out_.max_memory().empty() && out_.backend() == row->backend->row();
    std::string w = RenumberingWarning(row->vis, std::vector<int>(indices.begin(), indices.end()), keyed);
    if (w.empty()) continue;
    out_.add_explanation(absl::StrCat("E-ORDER-SMI ", row->backend->name(), ": the job's ordinals of the devices used "
                                      "differ from PCI bus order (warning given)"));
    out_.add_warnings(std::move(w));
  }
}

// Hazards from present rows the job cannot use, for an automatic choice under `strict`.
void Resolution::AutomaticChoiceHazards() {
  for (const RowState& r : rows_) {
    if (!r.available && r.hazard) hazards_.push_back(r.reason);
  }
}

// Rows the job can use that an automatic choice's order never considers: a warning each, naming
// the rule; a hazard when the choice fell back to cpu (P6).
void Resolution::NeverPicked(const std::vector<std::string>& order, const std::string& who, const std::string& rule,
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

}  // namespace devplace::placement::resolver_internal
