// Huawei Ascend NPUs (docs/SEMANTICS.md section 3, E-NPU): ASCEND_RT_VISIBLE_DEVICES, as CANN reads it.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement::visibility_internal {

absl::Status MaskNpu(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* v = Get(env, "ASCEND_RT_VISIBLE_DEVICES");
  if (v == nullptr) return absl::OkStatus();
  MarkMasked(out, "ASCEND_RT_VISIBLE_DEVICES", *v);
  constexpr absl::string_view kAccepted = "ascending comma list of NPU logical ids, e.g. 0,1,3";
  std::vector<int> ids;
  std::string stopped;
  for (absl::string_view e : absl::StrSplit(*v, ',')) {
    int id = 0;
    if (!ParseDecimal(e, &id)) {
      stopped = std::string(e);  // CANN stops parsing at the first invalid entry
      break;
    }
    if (!ids.empty() && id <= ids.back()) {
      return BadMask("ASCEND_RT_VISIBLE_DEVICES", *v,
                     absl::StrCat("ids must be in ascending order without repeats (", id, " after ", ids.back(), ")"),
                     kAccepted);
    }
    if (id >= static_cast<int>(units.size())) {
      return BadMask("ASCEND_RT_VISIBLE_DEVICES", *v,
                     absl::StrCat("id ", id, " does not exist: the job's NPUs are 0..",
                                  static_cast<int>(units.size()) - 1),
                     kAccepted);
    }
    ids.push_back(id);
  }
  if (!stopped.empty() || (ids.empty() && !v->empty())) {
    out.warnings.push_back(absl::StrCat("ASCEND_RT_VISIBLE_DEVICES=", *v, ": parsing stops at entry '",
                                        stopped, "' (not an id; spaces are invalid), the job sees only the ids before it"));
  }
  std::vector<VisibleUnit> picked;
  for (int id : ids) picked.push_back(units[id]);
  units = std::move(picked);
  out.explanation.push_back(absl::StrCat("E-NPU ASCEND_RT_VISIBLE_DEVICES=", *v, ": ", UnitList(units, "npu")));
  return absl::OkStatus();
}

}  // namespace devplace::placement::visibility_internal
