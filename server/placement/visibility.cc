#include "server/placement/visibility.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "server/placement/device_string.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"

namespace devplace::placement {
namespace {

const std::string* Get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

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

std::string UnitList(const std::vector<VisibleUnit>& units, absl::string_view type) {
  if (units.empty()) return "none";
  std::vector<std::string> parts;
  for (size_t i = 0; i < units.size(); ++i) {
    parts.push_back(absl::StrCat(type, ":", i, " = ", DescribeUnit(units[i])));
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status BadMask(absl::string_view var, absl::string_view value, absl::string_view what,
                     absl::string_view accepted) {
  return absl::InvalidArgumentError(absl::StrCat("env.", var, "='", value, "': ", what,
                                                 "; accepted: ", accepted));
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

// Applies a CUDA-style list in variable `var` to `units`. When `outer_var` is set (HIP indexing
// into what ROCR left), an ordinal past the end is an error naming both variables;
// otherwise it ends the list as PyTorch's NVML-based count does.
absl::Status ApplyCudaStyle(absl::string_view var, const std::string& value,
                            std::vector<VisibleUnit>& units, RowVisibility& out,
                            absl::string_view outer_var = "") {
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

// Records that list variable `var` (value `value`) narrowed the row.
void MarkMasked(RowVisibility& out, absl::string_view var, const std::string& value) {
  out.masked = true;
  out.mask_variable = std::string(var);
  out.mask_empty = value.empty();
}

int SubDevices(const v1::Device& d) { return d.sub_device_count() > 1 ? static_cast<int>(d.sub_device_count()) : 1; }

// --- per-row masks -------------------------------------------------------------------------

// Whether `d` has MIG mode on: instances listed, or NVML's "mig_mode" attribute.
bool MigEnabled(const v1::Device& d) {
  auto it = d.attributes().find("mig_mode");
  return d.partitions_size() > 0 || (it != d.attributes().end() && it->second == "enabled");
}

std::string DescribePartition(const v1::Device& d, const v1::Partition& p) {
  return absl::StrCat(p.uuid().empty() ? absl::StrCat("MIG instance GI ", p.gpu_instance_id(), " CI ",
                                                      p.compute_instance_id())
                                       : p.uuid(),
                      " on host device ", d.host_index(), d.pci_bus_id().empty() ? "" : absl::StrCat(" (", d.pci_bus_id(), ")"));
}

// Sorts `units` by the runtime's probed whole-host ordinal (runtime_ordinal_pci when `pci`) when
// every unit has one; false (units unchanged) otherwise.
bool SortByRuntimeOrdinal(std::vector<VisibleUnit>& units, bool pci) {
  const bool known = std::all_of(units.begin(), units.end(), [&](const VisibleUnit& u) {
    return pci ? u.device->has_runtime_ordinal_pci() : u.device->has_runtime_ordinal();
  });
  if (!known) return false;
  std::stable_sort(units.begin(), units.end(), [&](const VisibleUnit& a, const VisibleUnit& b) {
    return pci ? a.device->runtime_ordinal_pci() < b.device->runtime_ordinal_pci()
               : a.device->runtime_ordinal() < b.device->runtime_ordinal();
  });
  return true;
}

// "ordinal 0 = host device 1 (0000:02:00.0) NVIDIA GeForce GTX 1080 Ti, ordinal 1 = ..."
std::string OrdinalList(const std::vector<VisibleUnit>& units) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < units.size(); ++i) {
    absl::StrAppend(&parts.emplace_back(), "ordinal ", i, " = ", DescribeUnit(units[i]),
                    units[i].device->name().empty() ? "" : absl::StrCat(" ", units[i].device->name()));
  }
  return absl::StrJoin(parts, ", ");
}

bool SameDevices(const std::vector<VisibleUnit>& a, const std::vector<VisibleUnit>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const VisibleUnit& x, const VisibleUnit& y) { return x.device == y.device; });
}

// E-ORDER: puts `units` in the order the CUDA runtime enumerates them for this job's
// CUDA_DEVICE_ORDER (CUDA programming guide, "CUDA Environment Variables": FASTEST_FIRST, the
// default, or PCI_BUS_ID). The order comes from libcuda's own enumeration when the inventory has
// it (Device.runtime_ordinal / runtime_ordinal_pci); PCI_BUS_ID is PCI bus order by definition.
// Only when neither is known and the models differ does the answer carry the "may differ" caveat.
// A probed FASTEST_FIRST order starts out.renumbering (E-ORDER-SMI), completed by MaskNvidia.
absl::Status OrderNvidia(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* order = Get(env, "CUDA_DEVICE_ORDER");
  if (order != nullptr && order->empty()) order = nullptr;  // set but empty: the default
  if (order != nullptr && *order != "FASTEST_FIRST" && *order != "PCI_BUS_ID") {
    return BadMask("CUDA_DEVICE_ORDER", *order, "not an order the CUDA runtime knows",
                   "FASTEST_FIRST (the default when unset or empty) or PCI_BUS_ID, exact and upper-case");
  }
  const bool pci = order != nullptr && *order == "PCI_BUS_ID";
  const std::string setting = order == nullptr ? "CUDA_DEVICE_ORDER unset (FASTEST_FIRST)"
                                               : absl::StrCat("CUDA_DEVICE_ORDER=", *order);
  if (units.size() < 2) return absl::OkStatus();
  if (SortByRuntimeOrdinal(units, pci)) {
    out.explanation.push_back(absl::StrCat("E-ORDER ", setting, ": the CUDA runtime's own enumeration (libcuda, probed): ",
                                           OrdinalList(units)));
    if (!pci) {
      Renumbering& rn = out.renumbering.emplace();
      rn.runtime = "CUDA";
      rn.order = setting;
      rn.nvidia = true;
    }
    return absl::OkStatus();
  }
  if (pci) {
    out.explanation.push_back(absl::StrCat("E-ORDER ", setting, ": devices by ascending PCI bus id, devplace's host order"));
    return absl::OkStatus();
  }
  std::set<std::string> models;
  for (const VisibleUnit& u : units) models.insert(u.device->device_id());
  if (models.size() > 1) {
    out.warnings.push_back(absl::StrCat(
        "visible NVIDIA GPUs differ in model and ", setting, " numbers the fastest first; devplace has no libcuda "
        "enumeration of this host (probe's cuda prober did not run or failed), so the job's numbering may differ from "
        "the PCI bus order used here; set CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  }
  out.explanation.push_back(absl::StrCat("E-ORDER ", setting, ": runtime order unknown, PCI bus order assumed"));
  return absl::OkStatus();
}

// E-MIG (NVIDIA MIG user guide, "CUDA Device Enumeration"): a CUDA process enumerates a single
// compute instance, the first available, and no non-MIG GPU once an instance is enumerated; a
// MIG-enabled GPU without instances gives no device. Applied after CUDA_VISIBLE_DEVICES named
// GPUs (by ordinal or GPU- UUID) or none.
void ApplyMig(std::vector<VisibleUnit>& units, RowVisibility& out) {
  std::vector<VisibleUnit> kept;
  std::vector<std::string> empty_mig;
  const VisibleUnit* first = nullptr;
  for (const VisibleUnit& u : units) {
    if (u.device->partitions_size() > 0) {
      if (first == nullptr) first = &u;
      for (const v1::Partition& p : u.device->partitions()) out.mig_instances.push_back(DescribePartition(*u.device, p));
    } else if (MigEnabled(*u.device)) {
      empty_mig.push_back(DescribeUnit(u));
    } else {
      kept.push_back(u);
    }
  }
  if (!empty_mig.empty()) {
    out.explanation.push_back(absl::StrCat("E-MIG ", absl::StrJoin(empty_mig, ", "),
                                           ": MIG enabled without instances, CUDA enumerates no device there"));
  }
  if (first == nullptr) {
    units = std::move(kept);
    return;
  }
  const v1::Partition& p = first->device->partitions(0);
  const std::string chosen = DescribePartition(*first->device, p);
  std::string dropped;
  if (!kept.empty()) {
    dropped = absl::StrCat("; the GPUs without MIG (", absl::StrJoin(kept, ", ", [](std::string* o, const VisibleUnit& u) {
                             absl::StrAppend(o, DescribeUnit(u));
                           }), ") are not enumerated while a MIG instance is");
  }
  out.mig_implicit = true;
  out.explanation.push_back(absl::StrCat(
      "E-MIG MIG is enabled and CUDA_VISIBLE_DEVICES names no MIG- UUID: a CUDA process enumerates a single MIG instance, "
      "the first available: cuda:0 = ", chosen, dropped));
  out.warnings.push_back(absl::StrCat(
      "MIG is enabled: the job sees exactly one device, one MIG instance (devplace assumes the first listed, ", chosen,
      ", not the whole GPU", kept.empty() ? "" : " and not the GPUs without MIG",
      "); name the instance each process should use with CUDA_VISIBLE_DEVICES=MIG-<uuid> (this host's: ",
      absl::StrJoin(out.mig_instances, ", "), ")"));
  units = {{first->device, -1, &p}};
}

// E-ORDER-SMI: keeps, in `out.renumbering` (set by the ordering step when the job's order is a
// probed one), what `apply_masks` picks from `bus_order` (the row's devices in PCI bus order),
// or drops the renumbering when that order is the job's own.
absl::Status KeepBusView(std::vector<VisibleUnit> bus_order, const std::vector<VisibleUnit>& job_order,
                         const std::function<absl::Status(std::vector<VisibleUnit>&, RowVisibility&)>& apply_masks,
                         RowVisibility& out) {
  if (!out.renumbering) return absl::OkStatus();
  if (SameDevices(bus_order, job_order)) {
    out.renumbering.reset();
    return absl::OkStatus();
  }
  for (const VisibleUnit& u : job_order) out.renumbering->runtime_all.push_back(u.device);
  for (const VisibleUnit& u : bus_order) out.renumbering->bus_all.push_back(u.device);
  RowVisibility scratch;  // the same masks, read in PCI order; their steps and warnings are not the job's
  RETURN_IF_ERROR(apply_masks(bus_order, scratch));
  out.renumbering->bus_units = std::move(bus_order);
  return absl::OkStatus();
}

absl::Status MaskNvidia(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::vector<VisibleUnit> bus_order = units;
  RETURN_IF_ERROR(OrderNvidia(env, units, out));
  const std::vector<VisibleUnit> job_order = units;
  const std::string* v = Get(env, "CUDA_VISIBLE_DEVICES");
  if (v != nullptr) {
    MarkMasked(out, "CUDA_VISIBLE_DEVICES", *v);
    const size_t before = units.size();
    RETURN_IF_ERROR(ApplyCudaStyle("CUDA_VISIBLE_DEVICES", *v, units, out));
    out.explanation.push_back(absl::StrCat("E-CUDA CUDA_VISIBLE_DEVICES=", *v, " (", before,
                                           " GPU(s) before): ", UnitList(units, "cuda")));
    if (absl::StartsWith(*v, "MIG-")) {
      out.renumbering.reset();  // one MIG instance, named by UUID: no ordinal to misread
      return absl::OkStatus();
    }
  }
  if (out.renumbering) out.renumbering->masks = v == nullptr ? "" : absl::StrCat("CUDA_VISIBLE_DEVICES=", *v);
  RETURN_IF_ERROR(KeepBusView(bus_order, job_order, [&](std::vector<VisibleUnit>& u, RowVisibility& o) {
    return v == nullptr ? absl::OkStatus() : ApplyCudaStyle("CUDA_VISIBLE_DEVICES", *v, u, o);
  }, out));
  ApplyMig(units, out);
  if (out.mig_implicit) out.renumbering.reset();  // CUDA picked one instance itself
  return absl::OkStatus();
}

// E-ROCm: ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES), on `units`
// in the job's order.
absl::Status ApplyAmdMasks(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* rocr = Get(env, "ROCR_VISIBLE_DEVICES");
  const std::string* hip = Get(env, "HIP_VISIBLE_DEVICES");
  const std::string* cvd = Get(env, "CUDA_VISIBLE_DEVICES");
  if (rocr != nullptr) {
    MarkMasked(out, "ROCR_VISIBLE_DEVICES", *rocr);
    RETURN_IF_ERROR(ApplyCudaStyle("ROCR_VISIBLE_DEVICES", *rocr, units, out));
    out.explanation.push_back(absl::StrCat("E-ROCm ROCR_VISIBLE_DEVICES=", *rocr,
                                           " filters host GPUs first: ", UnitList(units, "cuda")));
  }
  const char* inner_name = hip != nullptr ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
  const std::string* inner = hip != nullptr ? hip : cvd;
  if (inner == nullptr) return absl::OkStatus();
  MarkMasked(out, inner_name, *inner);
  if (rocr != nullptr && hip != nullptr) {
    const size_t n_hip = std::count(hip->begin(), hip->end(), ',') + 1;
    const size_t n_rocr = std::count(rocr->begin(), rocr->end(), ',') + 1;
    if (n_hip > n_rocr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env.HIP_VISIBLE_DEVICES='", *hip, "': HIP_VISIBLE_DEVICES contains more devices than "
          "ROCR_VISIBLE_DEVICES ('", *rocr, "'): ", n_hip, " > ", n_rocr,
          "; HIP_VISIBLE_DEVICES indexes into the GPUs ROCR_VISIBLE_DEVICES selects"));
    }
  }
  RETURN_IF_ERROR(ApplyCudaStyle(inner_name, *inner, units, out,
                                 rocr != nullptr ? "ROCR_VISIBLE_DEVICES" : ""));
  out.explanation.push_back(absl::StrCat("E-ROCm ", inner_name, "=", *inner,
                                         rocr != nullptr ? " indexes into what ROCR_VISIBLE_DEVICES left: "
                                                         : ": ",
                                         UnitList(units, "cuda")));
  return absl::OkStatus();
}

// E-ORDER (HIP): ROCr enumerates GPU agents in KFD topology node order and HIP numbers them so;
// the probe records that order as Device.runtime_ordinal (sysfs, no vendor library). Masks index
// the devices in that order. Unknown (a device without the ordinal): PCI bus order, silently, as
// the two agree on most hosts.
absl::Status MaskAmd(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::vector<VisibleUnit> bus_order = units;
  if (units.size() > 1 && SortByRuntimeOrdinal(units, false)) {
    out.explanation.push_back(absl::StrCat(
        "E-ORDER HIP numbers GPUs in the KFD topology's node order (ROCr's agent order, probed from sysfs): ",
        OrdinalList(units)));
    Renumbering& rn = out.renumbering.emplace();
    rn.runtime = "HIP";
    rn.order = "the KFD topology's node order";
  }
  const std::vector<VisibleUnit> job_order = units;
  RETURN_IF_ERROR(ApplyAmdMasks(env, units, out));
  if (out.renumbering) {
    std::vector<std::string> masks;
    const bool hip = Get(env, "HIP_VISIBLE_DEVICES") != nullptr;  // CUDA_VISIBLE_DEVICES is read only without it
    for (const char* var : {"ROCR_VISIBLE_DEVICES", hip ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES"}) {
      if (const std::string* v = Get(env, var)) masks.push_back(absl::StrCat(var, "=", *v));
    }
    out.renumbering->masks = absl::StrJoin(masks, " ");
  }
  return KeepBusView(bus_order, job_order, [&](std::vector<VisibleUnit>& u, RowVisibility& o) {
    return ApplyAmdMasks(env, u, o);
  }, out);
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

absl::Status MaskXpu(const Env& env, const std::vector<VisibleUnit>& cards, bool flat,
                     std::vector<VisibleUnit>& units, RowVisibility& out) {
  // E-ORDER (Level Zero): ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 makes the driver report devices by PCI
  // id; otherwise the order is the driver's, which devplace does not probe.
  const std::string* pci_order = Get(env, "ZE_ENABLE_PCI_ID_DEVICE_ORDER");
  const bool pci_set = pci_order != nullptr && *pci_order == "1";
  const std::string* v = Get(env, "ZE_AFFINITY_MASK");
  const bool masked = v != nullptr && !v->empty();
  std::set<std::string> models;
  for (const VisibleUnit& c : cards) models.insert(c.device->device_id());
  // E-XPU-PIN: an integrated GPU comes first in PCI bus order, so the PCI order alone points the
  // job at it; the advice is the mask of the discrete root devices, in PCI order (`units` is).
  const auto igpu = std::find_if(cards.begin(), cards.end(), [](const VisibleUnit& c) { return c.device->integrated(); });
  std::vector<std::string> pin, pinned;
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].device->integrated()) continue;
    pin.push_back(absl::StrCat(i));
    pinned.push_back(absl::StrCat("xpu:", pinned.size(), " = ", DescribeUnit(units[i])));
  }
  const bool mixed = igpu != cards.end() && !pin.empty();
  const std::string pin_advice = absl::StrCat(
      "pin the discrete card", pin.size() > 1 ? "s" : "", " with ", pci_set ? "" : "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ",
      "ZE_AFFINITY_MASK=", absl::StrJoin(pin, ","), " (Level Zero's root devices in PCI bus order; the job then sees ",
      absl::StrJoin(pinned, ", "), ")");
  const std::string igpu_words =
      mixed ? absl::StrCat("the integrated GPU ", DescribeUnit(*igpu),
                           igpu->device->name().empty() ? "" : absl::StrCat(" ", igpu->device->name()))
            : "";
  if (mixed && (!pci_set || !masked)) {
    out.explanation.push_back(absl::StrCat("E-XPU-PIN ", igpu_words, " is first in PCI bus order; the discrete root "
                                           "devices are ZE_AFFINITY_MASK=", absl::StrJoin(pin, ","), " in that order"));
  }
  if (mixed && !pci_set) {
    out.warnings.push_back(absl::StrCat(
        "E-XPU-PIN: visible Intel GPUs include ", igpu_words, " next to discrete ones and ZE_ENABLE_PCI_ID_DEVICE_ORDER is "
        "not 1: Level Zero's numbering then depends on the driver release (Intel compute-runtime lists discrete GPUs "
        "first in current releases, by PCI bus id in older ones)",
        masked ? absl::StrCat(", and so does what ZE_AFFINITY_MASK=", *v, " selects") : "",
        "; PCI bus order, which devplace assumes here and ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 selects, puts the integrated "
        "GPU first (xpu:0), so that variable alone points the job at the slow chip; ", pin_advice));
  } else if (mixed && pci_set && !masked) {
    out.warnings.push_back(absl::StrCat(
        "E-XPU-PIN: ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 numbers Intel GPUs by PCI bus id, which puts ", igpu_words,
        " first: it is xpu:0; ", pin_advice));
  } else if (models.size() > 1 && !pci_set) {
    out.warnings.push_back(
        "visible Intel GPUs differ in model and ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1: Level Zero then reports devices "
        "in its driver's own order, which may differ from the PCI bus order used here; set "
        "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1");
  }
  if (v == nullptr) return absl::OkStatus();
  if (v->empty()) {
    out.explanation.push_back("E-XPU ZE_AFFINITY_MASK is empty: Level Zero applies no filter");
    return absl::OkStatus();
  }
  MarkMasked(out, "ZE_AFFINITY_MASK", *v);
  const std::string accepted = flat
      ? "comma list of root-device ordinals (in FLAT mode each tile is a root device), e.g. 0,2"
      : "comma list of card ordinals N or tiles N.M (COMPOSITE mode), e.g. 0,1.1";
  std::vector<VisibleUnit> picked;
  for (absl::string_view e : absl::StrSplit(*v, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(e, '.');
    int n = 0, m = -1;
    bool ok = (parts.size() == 1 || (parts.size() == 2 && !flat)) && ParseDecimal(parts[0], &n);
    if (ok && parts.size() == 2) ok = ParseDecimal(parts[1], &m);
    if (!ok) return BadMask("ZE_AFFINITY_MASK", *v, absl::StrCat("entry '", e, "' is malformed"), accepted);
    const std::vector<VisibleUnit>& pool = flat ? units : cards;
    if (n >= static_cast<int>(pool.size())) {
      return BadMask("ZE_AFFINITY_MASK", *v,
                     absl::StrCat("device ", n, " does not exist: ", pool.size(), " root device(s) visible"), accepted);
    }
    VisibleUnit u = pool[n];
    if (m >= 0) {
      if (m >= SubDevices(*u.device)) {
        return BadMask("ZE_AFFINITY_MASK", *v,
                       absl::StrCat("card ", n, " has ", SubDevices(*u.device), " tile(s), no tile ", m), accepted);
      }
      u.sub_device = m;
    }
    for (const VisibleUnit& p : picked) {
      if (p.device == u.device && p.sub_device == u.sub_device) {
        return BadMask("ZE_AFFINITY_MASK", *v, absl::StrCat("entry '", e, "' is listed twice"), accepted);
      }
    }
    picked.push_back(u);
  }
  units = std::move(picked);
  out.explanation.push_back(absl::StrCat("E-XPU ZE_AFFINITY_MASK=", *v, ": ", UnitList(units, "xpu")));
  return absl::OkStatus();
}

absl::Status MaskNeuron(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string* cores = Get(env, "NEURON_RT_VISIBLE_CORES");
  constexpr absl::string_view kAccepted = "core index N, inclusive range A-B, or a comma list of them, e.g. 0-1,4";
  if (cores != nullptr) {
    MarkMasked(out, "NEURON_RT_VISIBLE_CORES", *cores);
    std::vector<VisibleUnit> picked;
    std::set<int> seen;
    for (absl::string_view e : absl::StrSplit(*cores, ',')) {
      std::vector<absl::string_view> ab = absl::StrSplit(e, '-');
      int a = 0, b = 0;
      bool ok = (ab.size() == 1 || ab.size() == 2) && ParseDecimal(ab[0], &a);
      if (ok) ok = ab.size() == 1 ? (b = a, true) : (ParseDecimal(ab[1], &b) && a <= b);
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

}  // namespace

bool RuntimeEnumerates(const v1::Device& d) {
  return d.usable() ||
         (!d.supported() && d.driver_loaded() && d.device_nodes_present() && d.health() == v1::HEALTH_OK);
}

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

std::string RenumberingWarning(const RowVisibility& vis, const std::vector<int>& used, bool max_memory) {
  if (!vis.renumbering || vis.backend == nullptr) return "";
  const Renumbering& rn = *vis.renumbering;
  const std::string& type = vis.backend->device_type();
  const auto position = [](const std::vector<const v1::Device*>& all, const v1::Device& d) {
    return std::find(all.begin(), all.end(), &d) - all.begin();
  };
  // A device in PCI bus numbering: nvidia-smi's index is NVML's, PCI bus order.
  const auto bus_name = [&](const v1::Device& d) {
    return absl::StrCat(rn.nvidia ? "nvidia-smi GPU " : "GPU ", position(rn.bus_all, d),
                        rn.nvidia ? "" : " in PCI bus order", " (", d.pci_bus_id(),
                        d.name().empty() ? "" : absl::StrCat(" ", d.name()), ")");
  };
  std::vector<std::string> listed, meant_uuids;
  int differing = 0;
  for (int i : used) {
    if (i < 0 || i >= static_cast<int>(vis.units.size())) continue;
    const v1::Device& job = *vis.units[i].device;
    const v1::Device* meant = i < static_cast<int>(rn.bus_units.size()) ? rn.bus_units[i].device : nullptr;
    if (meant == &job) continue;
    if (++differing > kMaxRenumberedListed) continue;
    listed.push_back(absl::StrCat(type, ":", i, " = ", rn.runtime, " device ", position(rn.runtime_all, job), " = ",
                                  bus_name(job), ", where counting in PCI bus order gives ",
                                  meant == nullptr ? "no device" : bus_name(*meant)));
    if (meant != nullptr && !meant->uuid().empty()) meant_uuids.push_back(meant->uuid());
  }
  if (differing == 0) return "";
  if (differing > kMaxRenumberedListed) listed.push_back(absl::StrCat("and ", differing - kMaxRenumberedListed, " more"));
  std::string out = absl::StrCat(
      "E-ORDER-SMI: the job numbers its ", vis.backend->hardware(), "s in ", rn.runtime, "'s order, ", rn.order,
      ", not in PCI bus order", rn.nvidia ? " (nvidia-smi's)" : "", ", and the two differ on the devices this answer uses: ",
      absl::StrJoin(listed, "; "));
  if (!rn.masks.empty()) absl::StrAppend(&out, "; ", rn.masks, " counts in ", rn.runtime, "'s order too");
  if (max_memory) {
    absl::StrAppend(&out, "; max_memory keys are the job's ordinals (\"0\" is ", type, ":0 = ",
                    bus_name(*vis.units[0].device), ")");
  }
  if (rn.nvidia) {
    absl::StrAppend(&out, "; to number GPUs as nvidia-smi does, set CUDA_DEVICE_ORDER=PCI_BUS_ID");
  } else {
    absl::StrAppend(&out, "; HIP has no variable that selects PCI order: count in HIP's order as listed",
                    meant_uuids.empty() ? ""
                                        : absl::StrCat(", or name the cards meant by UUID, ROCR_VISIBLE_DEVICES=",
                                                       absl::StrJoin(meant_uuids, ",")));
  }
  return out;
}

std::string DescribeUnit(const VisibleUnit& unit) {
  const v1::Device& d = *unit.device;
  std::string s = absl::StrCat("host device ", d.host_index());
  if (!d.pci_bus_id().empty()) absl::StrAppend(&s, " (", d.pci_bus_id(), ")");
  if (unit.sub_device >= 0) s = absl::StrCat("sub-device ", unit.sub_device, " of ", s);
  if (unit.partition != nullptr) {
    const v1::Partition& p = *unit.partition;
    absl::StrAppend(&s, " MIG ", p.uuid().empty() ? absl::StrCat("GI ", p.gpu_instance_id(), " CI ", p.compute_instance_id())
                                                   : p.uuid());
  }
  return s;
}

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

absl::StatusOr<RowVisibility> ComputeVisibility(const v1::Backend& backend, const Env& env,
                                                const v1::JobDevices* job_devices,
                                                const JobAllocation* allocation) {
  RowVisibility out;
  out.backend = &backend;
  const std::string& type = backend.device_type();

  // P4 (host side): only usable devices are enumerated by the runtime.
  std::vector<VisibleUnit> cards;
  cards.reserve(backend.devices_size());
  std::vector<std::string> unusable;
  for (const v1::Device& d : backend.devices()) {
    if (RuntimeEnumerates(d)) {
      cards.push_back({&d, -1, nullptr});
    } else {
      unusable.push_back(absl::StrCat(DescribeUnit({&d, -1, nullptr}), ": ", d.unusable_reason()));
    }
  }
  if (!unusable.empty()) {
    out.explanation.push_back(absl::StrCat("P4 ", backend.name(), ": ", cards.size(), " of ",
                                           backend.devices_size(), " device(s) usable on the host; not usable: ",
                                           absl::StrJoin(unusable, "; ")));
  }
  if (cards.empty()) {
    out.hidden = Hidden::kHost;
    out.hidden_reason = absl::StrCat(backend.hardware(), " present but not usable: ",
                                     !backend.state_reason().empty() ? backend.state_reason()
                                     : unusable.empty() ? "no devices" : unusable.front());
    return out;
  }

  // P1: the job's mount namespace.
  if (job_devices != nullptr) {
    const auto& nodes = job_devices->device_nodes();
    std::vector<VisibleUnit> kept;
    for (const VisibleUnit& u : cards) {
      const bool listed = std::any_of(u.device->device_nodes().begin(), u.device->device_nodes().end(),
                                      [&](const std::string& n) {
                                        return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
                                      });
      if (listed) kept.push_back(u);
    }
    out.explanation.push_back(absl::StrCat("P1 job_devices lists [", absl::StrJoin(nodes, ", "), "]: ",
                                           kept.size(), " of ", cards.size(), " usable ", backend.name(),
                                           " device(s) visible to the job"));
    if (kept.empty()) {
      std::vector<std::string> wanted;
      for (const VisibleUnit& u : cards) {
        for (const std::string& n : u.device->device_nodes()) wanted.push_back(n);
      }
      out.hidden = Hidden::kJobDevices;
      out.hidden_reason = absl::StrCat(backend.hardware(), " present but not visible to the job: job_devices lists none of ",
                                       absl::StrJoin(wanted, ", "),
                                       " (start the job's container with access to those device nodes)");
      return out;
    }
    cards = std::move(kept);
  }

  // P-DRA: the devices Kubernetes allocated to the job's container, whatever order their claims list them in.
  if (allocation != nullptr && !allocation->devices.empty()) {
    std::vector<VisibleUnit> kept;
    std::vector<std::string> named;
    for (const VisibleUnit& u : cards) {
      const auto it = allocation->devices.find(u.device);
      if (it == allocation->devices.end()) continue;
      kept.push_back(u);
      named.push_back(absl::StrCat(DescribeUnit(u), " [", it->second, "]"));
    }
    out.explanation.push_back(absl::StrCat("P-DRA ", backend.name(), ": ", kept.size(), " of ", cards.size(),
                                           " usable device(s) allocated to the job",
                                           named.empty() ? "" : absl::StrCat(": ", absl::StrJoin(named, ", "))));
    if (kept.empty()) {
      const bool allocated_here = std::any_of(backend.devices().begin(), backend.devices().end(), [&](const v1::Device& d) {
        return allocation->devices.count(&d) > 0;
      });
      // An allocated device the host cannot use is P4's case (a hazard), not a deliberate choice.
      out.hidden = allocated_here ? Hidden::kHost : Hidden::kAllocation;
      out.hidden_reason = allocated_here
                              ? absl::StrCat(backend.hardware(), " allocated to the job by DRA but not usable on the host")
                              : absl::StrCat(backend.hardware(), " present but not allocated to the job: its DRA "
                                             "resource claims hold none of these devices");
      return out;
    }
    cards = std::move(kept);
  }

  // Runtime numbering: NeuronCores and Intel tiles (FLAT hierarchy) are devices of their own.
  const std::string* hierarchy = Get(env, "ZE_FLAT_DEVICE_HIERARCHY");
  const bool xpu_flat = hierarchy == nullptr || *hierarchy != "COMPOSITE";
  std::vector<VisibleUnit> units;
  units.reserve(cards.size());
  const bool expand = backend.row() == v1::ROW_NEURON || (backend.row() == v1::ROW_XPU && xpu_flat);
  for (const VisibleUnit& c : cards) {
    if (expand && SubDevices(*c.device) > 1) {
      for (int k = 0; k < SubDevices(*c.device); ++k) units.push_back({c.device, k, nullptr});
    } else {
      units.push_back(c);
    }
  }

  absl::Status s;
  switch (backend.row()) {
    case v1::ROW_CUDA_NVIDIA: s = MaskNvidia(env, units, out); break;
    case v1::ROW_CUDA_AMD: s = MaskAmd(env, units, out); break;
    case v1::ROW_XPU: s = MaskXpu(env, cards, xpu_flat, units, out); break;
    case v1::ROW_NPU: s = MaskNpu(env, units, out); break;
    case v1::ROW_MLU: s = MaskCudaLike(env, "E-MLU", {"CN_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES"}, type, units, out); break;
    case v1::ROW_MUSA: s = MaskCudaLike(env, "E-MUSA", {"MUSA_VISIBLE_DEVICES"}, type, units, out); break;
    case v1::ROW_SDAA: s = MaskCudaLike(env, "E-SDAA", {"SDAA_VISIBLE_DEVICES"}, type, units, out); break;
    case v1::ROW_NEURON: s = MaskNeuron(env, units, out); break;
    case v1::ROW_HPU: s = MaskById(env, "E-HPU", "HABANA_VISIBLE_MODULES", "module id", ModuleId, backend, units, out); break;
    case v1::ROW_TPU:
      s = MaskById(env, "E-TPU", "TPU_VISIBLE_CHIPS", "chip id",
                   [](const v1::Device& d) { return static_cast<int>(d.host_index()); }, backend, units, out);
      break;
    default: break;
  }
  if (!s.ok()) return s;
  out.units = std::move(units);
  if (out.units.empty()) {
    out.hidden = out.mask_empty ? Hidden::kMaskEmpty : Hidden::kMask;
    out.hidden_reason = absl::StrCat(backend.hardware(), " present but ", out.mask_variable,
                                     out.mask_empty ? " is set to the empty string, which hides every device"
                                                    : absl::StrCat(" leaves the job no device",
                                                                   out.warnings.empty() ? "" : ": ",
                                                                   absl::StrJoin(out.warnings, "; ")));
  }
  return out;
}

}  // namespace devplace::placement
