// CUDA-style lists (docs/SEMANTICS.md section 3): PyTorch's `_parse_visible_devices`, which reads
// CUDA_VISIBLE_DEVICES and the variables modelled on it (ordinals or GPU-/MIG- UUIDs; an invalid entry
// ends the list, a repeat empties it), and the rows whose only mask is such a list: MLU
// (CN_VISIBLE_DEVICES, MLU_VISIBLE_DEVICES), MUSA and SDAA (E-MLU, E-MUSA, E-SDAA).

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/status_macros.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement {
namespace visibility_internal {

namespace {

// PyTorch's `_strtoul`: the integer the (stripped) entry starts with, or -1. Leading +/- is
// allowed, digits follow, anything after the digits is ignored ("1gpu2" -> 1).
int64_t PyStrToUl(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  size_t n = 0;
  while (n < s.size() && (absl::ascii_isdigit(static_cast<unsigned char>(s[n])) ||
                          (n == 0 && (s[n] == '+' || s[n] == '-')))) {
    ++n;
  }
  int64_t v = 0;
  if (n == 0 || !absl::SimpleAtoi(s.substr(0, n), &v)) return -1;  // "", "abc", "+", overflow
  return v;
}

// Maps UUID (prefix) entries to positions in `units`, as PyTorch's `_transform_uuid_to_ordinals`:
// an unknown or ambiguous entry ends the list, a repeat empties it.
std::vector<int> UuidsToOrdinals(const std::vector<std::string>& candidates,
                                 const std::vector<VisibleUnit>& units, std::string* truncated_at,
                                 bool* repeated) {
  std::vector<int> out;
  for (const std::string& c : candidates) {
    int best = -1;
    bool ambiguous = false;
    for (size_t i = 0; i < units.size(); ++i) {
      if (!absl::StartsWith(units[i].device->uuid(), c)) continue;
      if (best != -1) ambiguous = true;
      best = static_cast<int>(i);
    }
    if (best < 0 || ambiguous) {
      *truncated_at = ambiguous ? absl::StrCat(c, " (ambiguous prefix)") : absl::StrCat(c, " (no such UUID)");
      break;
    }
    if (std::find(out.begin(), out.end(), best) != out.end()) {
      *repeated = true;
      return {};
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace

// Applies a CUDA-style list in variable `var` to `units`. When `outer_var` is set (HIP indexing
// into what ROCR left), an ordinal past the end is an error naming both variables;
// otherwise it ends the list as PyTorch's NVML-based count does.
absl::Status ApplyCudaStyle(absl::string_view var, const std::string& value,
                            std::vector<VisibleUnit>& units, RowVisibility& out,
                            absl::string_view outer_var) {
  CudaStyleList list = ParseCudaStyleList(value);
  std::vector<int> ordinals;
  if (list.is_uuid && absl::StartsWith(value, "MIG-")) {
    // CUDA enumerates a single MIG instance: the first entry.
    std::vector<VisibleUnit> picked;
    if (!list.uuids.empty()) {
      for (const VisibleUnit& u : units) {
        for (const v1::Partition& p : u.device->partitions()) {
          if (!p.uuid().empty() && absl::StartsWith(p.uuid(), list.uuids[0]) && picked.empty()) {
            picked.push_back({u.device, -1, &p});
          }
        }
      }
    }
    if (picked.empty()) {
      out.warnings.push_back(absl::StrCat(
          var, "=", value, " names a MIG instance this host's inventory does not list (MIG UUIDs "
          "come from NVML); the job would see no GPU"));
    } else if (list.uuids.size() > 1) {
      out.warnings.push_back(absl::StrCat(var, " lists several MIG instances; CUDA enumerates only "
                                          "the first (", list.uuids[0], ")"));
    }
    out.explanation.push_back(absl::StrCat("E-CUDA ", var, "=", value, ": MIG instance -> ",
                                           UnitList(picked, "cuda")));
    units = std::move(picked);
    return absl::OkStatus();
  }
  if (list.is_uuid) {
    ordinals = UuidsToOrdinals(list.uuids, units, &list.truncated_at, &list.repeated);
  } else {
    ordinals = list.ordinals;
    for (size_t i = 0; i < ordinals.size(); ++i) {
      if (ordinals[i] < static_cast<int>(units.size())) continue;
      if (!outer_var.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "env.", var, "='", value, "': position ", ordinals[i], " is beyond the ", units.size(),
            " device(s) ", outer_var, " leaves visible; ", var, " indexes into the devices ",
            outer_var, " selects"));
      }
      list.truncated_at = absl::StrCat(ordinals[i], " (only ", units.size(), " device(s))");
      ordinals.resize(i);
      break;
    }
  }
  if (list.repeated) {
    out.warnings.push_back(absl::StrCat(var, "=", value, " repeats an entry: PyTorch then sees no "
                                        "device at all (each device may be listed once)"));
  } else if (!list.truncated_at.empty()) {
    out.warnings.push_back(absl::StrCat(var, "=", value, ": entry ", list.truncated_at,
                                        " ends the list, the job sees only the entries before it"));
  }
  std::vector<VisibleUnit> picked;
  for (int o : ordinals) picked.push_back(units[o]);
  units = std::move(picked);
  return absl::OkStatus();
}

absl::Status MaskCudaLike(const Env& env, absl::string_view rule, std::initializer_list<const char*> vars,
                          absl::string_view type, std::vector<VisibleUnit>& units, RowVisibility& out) {
  for (const char* var : vars) {  // the first variable set wins
    const std::string* v = Get(env, var);
    if (v == nullptr) continue;
    MarkMasked(out, var, *v);
    RETURN_IF_ERROR(ApplyCudaStyle(var, *v, units, out));
    out.explanation.push_back(absl::StrCat(rule, " ", var, "=", *v, ": ", UnitList(units, type)));
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace visibility_internal

using visibility_internal::PyStrToUl;

CudaStyleList ParseCudaStyleList(const std::string& value) {
  CudaStyleList out;
  for (const char* prefix : {"GPU-", "MIG-"}) {
    if (!absl::StartsWith(value, prefix)) continue;
    out.is_uuid = true;
    for (absl::string_view e : absl::StrSplit(value, ',')) {
      if (std::find(out.uuids.begin(), out.uuids.end(), e) != out.uuids.end()) {
        out.repeated = true;
        out.uuids.clear();
        return out;
      }
      if (!absl::StartsWith(e, prefix)) {
        out.truncated_at = std::string(e);
        break;
      }
      out.uuids.emplace_back(e);
    }
    return out;
  }
  for (absl::string_view e : absl::StrSplit(value, ',')) {
    const int64_t x = PyStrToUl(e);
    if (x >= 0 && std::find(out.ordinals.begin(), out.ordinals.end(), x) != out.ordinals.end()) {
      out.repeated = true;
      out.ordinals.clear();
      return out;
    }
    if (x < 0 || x > INT32_MAX) {
      if (!(value.empty() && out.ordinals.empty())) out.truncated_at = std::string(e);
      break;
    }
    out.ordinals.push_back(static_cast<int>(x));
  }
  return out;
}

}  // namespace devplace::placement
