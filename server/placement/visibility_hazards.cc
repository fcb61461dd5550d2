// Hazards from masks and indices a job's runtime cannot honour (docs/SEMANTICS.md section 9): visibility
// variables set for a row other than the answer's (H-FOREIGN), Gaudi's HABANA_VISIBLE_DEVICES, and an
// explicit hpu:N with N > 0 (H-HPU).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/placement/backends.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement {

using visibility_internal::Get;

namespace {

// The list variables of a row (those that pick devices), not the modifiers (CUDA_DEVICE_ORDER,
// ZE_FLAT_DEVICE_HIERARCHY, NEURON_RT_NUM_CORES).
std::vector<absl::string_view> ListVariables(const BackendSpec& spec) {
  std::vector<absl::string_view> out;
  for (absl::string_view v : spec.mask_variables) {
    if (absl::StrContains(v, "VISIBLE") || absl::StrContains(v, "AFFINITY")) out.push_back(v);
  }
  return out;
}

constexpr absl::string_view kHabanaDevices =
    "HABANA_VISIBLE_DEVICES is the Habana container runtime's variable: it decides which Gaudi cards are mounted "
    "into a container (the job's /dev/accel nodes), it is not a per-process mask and selects no device inside the "
    "job; a process picks its module with HABANA_VISIBLE_MODULES (module ids)";

}  // namespace

std::vector<std::string> ForeignMaskWarnings(const v1::Inventory& inventory, v1::Row chosen, const Env& env) {
  std::vector<std::string> out;
  if (env.empty()) return out;
  // Each list variable once, in table order, with the rows it narrows (built once).
  struct Variable {
    absl::string_view name;
    std::vector<const BackendSpec*> rows;
  };
  static const std::vector<Variable>* kVariables = [] {
    auto* vars = new std::vector<Variable>;
    for (const BackendSpec& row : Backends()) {
      for (absl::string_view var : ListVariables(row)) {
        auto it = std::find_if(vars->begin(), vars->end(), [&](const Variable& v) { return v.name == var; });
        if (it == vars->end()) it = vars->insert(vars->end(), Variable{var, {}});
        it->rows.push_back(&row);
      }
    }
    return vars;
  }();
  const BackendSpec* spec = FindBackend(chosen);
  const bool accelerator = chosen != v1::ROW_CPU && chosen != v1::ROW_UNSPECIFIED && spec != nullptr;
  const std::vector<absl::string_view> governing = accelerator ? ListVariables(*spec) : std::vector<absl::string_view>{};
  for (const Variable& var : *kVariables) {
    const std::string* value = Get(env, std::string(var.name));
    if (value == nullptr) continue;
    if (std::find(governing.begin(), governing.end(), var.name) != governing.end()) continue;
    std::vector<std::string> rows;
    size_t absent = 0;
    for (const BackendSpec* r : var.rows) {
      rows.push_back(std::string(r->name));
      const bool present = std::any_of(inventory.backends().begin(), inventory.backends().end(),
                                       [&](const v1::Backend& b) { return b.row() == r->row; });
      if (!present) ++absent;
    }
    const std::string whose = absl::StrCat(var.name, " narrows ", absl::StrJoin(rows, " and "),
                                           absent == rows.size() ? ", which this host does not have" : "");
    if (accelerator) {
      out.push_back(absl::StrCat("env ", var.name, "=", *value, " has no effect on the answer's ", spec->name, " (",
                                 spec->hardware, "): ", whose, "; the variable that selects ", spec->device_type,
                                 " devices is ",
                                 governing.empty() ? "none (the row has no mask)" : absl::StrJoin(governing, " / ")));
    } else if (absent == rows.size()) {
      out.push_back(absl::StrCat("env ", var.name, "=", *value, " has no effect: ", whose));
    }
  }
  if (const std::string* v = Get(env, "HABANA_VISIBLE_DEVICES")) {
    out.push_back(absl::StrCat("env HABANA_VISIBLE_DEVICES=", *v, ": ", kHabanaDevices));
  }
  return out;
}

absl::Status CheckHpuIndex(absl::string_view device, int index, absl::string_view field, const Env& env) {
  if (index <= 0) return absl::OkStatus();
  const std::string* hvd = Get(env, "HABANA_VISIBLE_DEVICES");
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": '", device, "' names Gaudi device ", index, ", but a Gaudi process owns exactly one module and sees it as "
      "its only device: pass hpu (or hpu:0); choose which module the process gets with HABANA_VISIBLE_MODULES=<module id> "
      "(a distributed job's launcher gives each rank its own)",
      hvd != nullptr ? absl::StrCat("; env HABANA_VISIBLE_DEVICES=", *hvd, " does not do that: ", kHabanaDevices) : ""));
}

}  // namespace devplace::placement
