// The two `cuda` rows (docs/SEMANTICS.md section 3): NVIDIA, numbered in the job's CUDA_DEVICE_ORDER
// (E-ORDER), masked by CUDA_VISIBLE_DEVICES (E-CUDA), reduced to the MIG instance CUDA enumerates
// (E-MIG); AMD, numbered in HIP's order, masked by ROCR_VISIBLE_DEVICES then HIP_VISIBLE_DEVICES or
// CUDA_VISIBLE_DEVICES (E-ROCm); and the warning when that numbering differs from PCI bus order
// (E-ORDER-SMI).

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement {
namespace visibility_internal {

namespace {

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

}  // namespace

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

}  // namespace visibility_internal

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

}  // namespace devplace::placement
