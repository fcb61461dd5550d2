// P-PICK steps 5 and 6 (docs/SEMANTICS.md section 14): the picked units written in the row's list
// variable, checked with ComputeVisibility to show the job exactly them, and the job's own answer
// in that environment.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/pick_internal.h"
#include "server/placement/resolver.h"
#include "server/placement/visibility.h"

namespace devplace::placement::pick_internal {
namespace {

bool SameUnit(const VisibleUnit& a, const VisibleUnit& b) {
  return a.device == b.device && a.sub_device == b.sub_device && a.partition == b.partition;
}

std::string UnitsText(const std::vector<VisibleUnit>& units) {
  return absl::StrJoin(units, ", ", [](std::string* o, const VisibleUnit& u) { absl::StrAppend(o, DescribeUnit(u)); });
}

// The value of `form.variable` naming `chosen` in the job's numbering before any mask: the
// position of each unit among the units the job sees with the row's list variables removed
// (module ids for Gaudi's HABANA_VISIBLE_MODULES).
absl::StatusOr<std::string> IndexList(const v1::Backend& backend, const Env& base,
                                      const v1::JobDevices* job_devices, const JobAllocation* allocation,
                                      const std::vector<VisibleUnit>& chosen, v1::Row row) {
  ASSIGN_OR_RETURN(RowVisibility all, ComputeVisibility(backend, base, job_devices, allocation));
  std::vector<std::string> parts;
  for (const VisibleUnit& c : chosen) {
    if (row == v1::ROW_HPU) {
      auto it = c.device->attributes().find("module_id");
      parts.push_back(it != c.device->attributes().end() ? it->second : absl::StrCat(c.device->minor()));
      continue;
    }
    const auto at = std::find_if(all.units.begin(), all.units.end(), [&](const VisibleUnit& u) { return SameUnit(u, c); });
    if (at == all.units.end()) {
      return absl::FailedPreconditionError(absl::StrCat("P-PICK ", DescribeUnit(c),
                                                        " has no index in the job's unmasked numbering"));
    }
    parts.push_back(absl::StrCat(at - all.units.begin()));
  }
  return absl::StrJoin(parts, ",");
}

void PlaceUnit(const std::string& type, int index, const VisibleUnit& u, v1::PlacedDevice& p) {
  p.set_device(absl::StrCat(type, ":", index));
  p.set_job_index(index);
  p.set_host_index(static_cast<int32_t>(u.device->host_index()));
  p.set_pci_bus_id(u.device->pci_bus_id());
  p.set_uuid(u.device->uuid());
  p.set_name(u.device->name());
  p.set_sub_device(u.sub_device);
  if (u.partition != nullptr) {
    p.set_partition_uuid(u.partition->uuid());
    if (u.partition->has_memory_total_bytes()) p.set_memory_total_bytes(u.partition->memory_total_bytes());
    if (u.partition->has_memory_free_bytes()) p.set_memory_free_bytes(u.partition->memory_free_bytes());
  } else if (u.sub_device < 0) {
    if (u.device->has_memory_total_bytes()) p.set_memory_total_bytes(u.device->memory_total_bytes());
    if (u.device->has_memory_free_bytes()) p.set_memory_free_bytes(u.device->memory_free_bytes());
  }
}

void LeaseUnit(v1::Row row, const VisibleUnit& u, v1::LeaseDevice& ld) {
  ld.set_row(row);
  ld.set_host_index(u.device->host_index());
  ld.set_pci_bus_id(u.device->pci_bus_id());
  ld.set_uuid(u.device->uuid());
  if (u.partition != nullptr) ld.set_partition_uuid(u.partition->uuid());
  ld.set_sub_device(u.sub_device);
}

}  // namespace

std::vector<VisibleUnit> Chosen(const std::vector<Candidate>& candidates) {
  std::vector<VisibleUnit> chosen;
  for (const Candidate& c : candidates) {
    if (c.picked) chosen.push_back(c.unit);
  }
  return chosen;
}

absl::StatusOr<PickMask> MaskFor(const std::vector<VisibleUnit>& chosen, const MaskForm& form,
                                 const v1::Backend& backend, const v1::ResolveDeviceRequest& job, const JobView& view,
                                 v1::PickDevicesResponse& out) {
  const v1::Row row = backend.row();
  Env base = job.env();
  base.erase(form.variable);
  for (const char* v : form.unset) base.erase(v);
  PickMask mask;
  bool uuids = row == v1::ROW_CUDA_NVIDIA;
  for (const VisibleUnit& u : chosen) {
    const std::string& id = u.partition != nullptr ? u.partition->uuid() : u.device->uuid();
    if (id.empty() || u.sub_device >= 0) uuids = false;
  }
  if (uuids) {
    std::vector<std::string> ids;
    for (const VisibleUnit& u : chosen) ids.push_back(u.partition != nullptr ? u.partition->uuid() : u.device->uuid());
    mask.value = absl::StrJoin(ids, ",");
  } else {
    if (row == v1::ROW_CUDA_NVIDIA) {
      base["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";  // indices as nvidia-smi counts them, not FASTEST_FIRST
      mask.set["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
    }
    ASSIGN_OR_RETURN(mask.value, IndexList(backend, base, view.job_devices, view.alloc(), chosen, row));
  }
  mask.set[form.variable] = mask.value;
  mask.applied = base;
  mask.applied[form.variable] = mask.value;
  for (const char* v : form.unset) {
    if (job.env().contains(v)) out.add_unset(v);
  }
  return mask;
}

absl::Status CheckMask(const std::vector<VisibleUnit>& chosen, const MaskForm& form, const PickMask& mask,
                       const v1::Backend& backend, const JobView& view) {
  absl::StatusOr<RowVisibility> check = ComputeVisibility(backend, mask.applied, view.job_devices, view.alloc());
  const bool same = check.ok() && check->units.size() == chosen.size() &&
                    std::equal(chosen.begin(), chosen.end(), check->units.begin(), SameUnit);
  if (same) return absl::OkStatus();
  const std::string saw = check.ok() ? UnitsText(check->units) : std::string(check.status().message());
  return absl::FailedPreconditionError(absl::StrCat("P-PICK cannot hand the job ", UnitsText(chosen), " through ",
                                                    form.variable, "=", mask.value, ": the job would see ",
                                                    saw.empty() ? "nothing" : saw));
}

void HandOut(const std::vector<VisibleUnit>& chosen, const MaskForm& form, const PickMask& mask,
             const v1::Backend& backend, v1::PickDevicesResponse& out) {
  for (const auto& [k, v] : mask.set) (*out.mutable_env())[k] = v;
  const std::string& type = backend.device_type();
  for (size_t i = 0; i < chosen.size(); ++i) {
    out.add_devices(absl::StrCat(type, ":", i));
    PlaceUnit(type, static_cast<int>(i), chosen[i], *out.add_placed());
    LeaseUnit(backend.row(), chosen[i], *out.mutable_lease()->add_devices());
  }
  out.add_explanation(absl::StrCat("P-PICK the job gets ", form.variable, "=", mask.value,
                                   out.unset_size() > 0 ? absl::StrCat(" (and unsets ", absl::StrJoin(out.unset(), ", "), ")")
                                                        : "",
                                   ": it sees ", absl::StrJoin(out.devices(), ", ")));
}

absl::Status AnswerWith(const v1::Inventory& inventory, const v1::ResolveDeviceRequest& job, const PickMask& mask,
                        const std::vector<Candidate>& candidates, v1::PickDevicesResponse& out) {
  v1::ResolveDeviceRequest then = job;
  *then.mutable_env() = mask.applied;
  ASSIGN_OR_RETURN(const v1::ResolveDeviceResponse answer, Resolve(inventory, then));
  out.set_device(answer.device());
  std::vector<std::string> unknown;
  for (const Candidate& c : candidates) {
    if (c.picked && c.usage_unknown) unknown.push_back(DescribeUnit(c.unit));
  }
  if (!unknown.empty()) {
    out.add_warnings(absl::StrCat(
        "P-PICK usage unknown for ", absl::StrJoin(unknown, ", "),
        ": no vendor library reports its processes or memory here, so a process that runs on it outside "
        "devplace's leases is not seen (it was picked as if idle); install the vendor library (NVML, amd_smi, "
        "...) for the usage"));
  }
  for (const std::string& w : answer.warnings()) out.add_warnings(w);
  out.add_explanation(absl::StrCat("P-PICK with it the job's answer is ", answer.device()));
  return absl::OkStatus();
}

}  // namespace devplace::placement::pick_internal
