// The rows whose mask picks devices by an id (docs/SEMANTICS.md section 3): Intel Gaudi's
// HABANA_VISIBLE_MODULES, by module id (E-HPU), and Google TPU's TPU_VISIBLE_CHIPS, by chip id (E-TPU).
// What an explicit hpu:N means is H-HPU, in visibility_hazards.cc.

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement::visibility_internal {

namespace {

// Comma list of non-negative integers where every entry must parse (the strict masks).
absl::StatusOr<std::vector<int>> StrictIntList(absl::string_view var, const std::string& value,
                                               absl::string_view accepted) {
  std::vector<int> out;
  for (absl::string_view e : absl::StrSplit(value, ',')) {
    int v = 0;
    if (!ParseDecimal(e, &v)) {
      return BadMask(var, value, absl::StrCat("entry '", e, "' is not a non-negative integer"), accepted);
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      return BadMask(var, value, absl::StrCat("entry ", v, " is listed twice"), accepted);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

// HABANA_VISIBLE_MODULES / TPU_VISIBLE_CHIPS: pick devices by an id, in list order.
absl::Status MaskById(const Env& env, absl::string_view rule, const char* var, absl::string_view what,
                      const std::function<int(const v1::Device&)>& id_of, const v1::Backend& backend,
                      std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* v = Get(env, var);
  if (v == nullptr) return absl::OkStatus();
  MarkMasked(out, var, *v);
  const std::string accepted = absl::StrCat("comma list of ", what, "s, e.g. 0,1");
  absl::StatusOr<std::vector<int>> ids = StrictIntList(var, *v, accepted);
  if (!ids.ok()) return ids.status();
  std::vector<VisibleUnit> picked;
  for (int id : *ids) {
    auto it = std::find_if(units.begin(), units.end(), [&](const VisibleUnit& u) { return id_of(*u.device) == id; });
    if (it != units.end()) {
      picked.push_back(*it);
      continue;
    }
    const bool on_host = std::any_of(backend.devices().begin(), backend.devices().end(),
                                     [&](const v1::Device& d) { return id_of(d) == id; });
    if (!on_host) return BadMask(var, *v, absl::StrCat("no ", backend.hardware(), " has ", what, " ", id), accepted);
    return absl::FailedPreconditionError(absl::StrCat(
        "env.", var, "='", *v, "': ", what, " ", id, " is on this host but not usable by or visible to this job; it sees ",
        what, "s ", absl::StrJoin(units, ", ", [&](std::string* o, const VisibleUnit& u) { absl::StrAppend(o, id_of(*u.device)); })));
  }
  units = std::move(picked);
  out.explanation.push_back(absl::StrCat(rule, " ", var, "=", *v, ": ", UnitList(units, backend.device_type())));
  return absl::OkStatus();
}

int ModuleId(const v1::Device& d) {
  auto it = d.attributes().find("module_id");
  int id = 0;
  if (it != d.attributes().end() && absl::SimpleAtoi(it->second, &id)) return id;
  return static_cast<int>(d.host_index());
}

}  // namespace devplace::placement::visibility_internal
