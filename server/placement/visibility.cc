// Visibility (visibility.h; docs/SEMANTICS.md section 3): the steps every row takes (P4 host usability,
// P1 job_devices, P-DRA allocations, NeuronCores and Intel tiles as devices of their own), the helpers
// the mask files share, and ComputeVisibility, which hands each row to its mask rules:
//   visibility_cuda_style.cc  PyTorch's CUDA-style lists; MLU_/CN_, MUSA_, SDAA_VISIBLE_DEVICES
//   visibility_cuda_rocm.cc   NVIDIA (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES, MIG) and AMD (ROCR_, HIP_VISIBLE_DEVICES)
//   visibility_level_zero.cc  Intel: ZE_AFFINITY_MASK, ZE_ENABLE_PCI_ID_DEVICE_ORDER
//   visibility_ascend.cc      Ascend: ASCEND_RT_VISIBLE_DEVICES
//   visibility_neuron.cc      Neuron: NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES
//   visibility_gaudi_tpu.cc   Gaudi's HABANA_VISIBLE_MODULES and TPU_VISIBLE_CHIPS
//   visibility_hazards.cc     masks that cannot apply (H-FOREIGN) and hpu:N (H-HPU)
#include "server/placement/visibility.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/allocation.h"
#include "server/placement/health.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement {
namespace visibility_internal {

const std::string* Get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
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

// Records that list variable `var` (value `value`) narrowed the row.
void MarkMasked(RowVisibility& out, absl::string_view var, const std::string& value) {
  out.masked = true;
  out.mask_variable = std::string(var);
  out.mask_empty = value.empty();
}

int SubDevices(const v1::Device& d) { return d.sub_device_count() > 1 ? static_cast<int>(d.sub_device_count()) : 1; }

}  // namespace visibility_internal

using visibility_internal::Get;
using visibility_internal::MaskAmd;
using visibility_internal::MaskById;
using visibility_internal::MaskCudaLike;
using visibility_internal::MaskNeuron;
using visibility_internal::MaskNpu;
using visibility_internal::MaskNvidia;
using visibility_internal::MaskXpu;
using visibility_internal::ModuleId;
using visibility_internal::SubDevices;

bool RuntimeEnumerates(const v1::Device& d) {
  if (d.usable()) return true;
  if (!d.driver_loaded() || !d.device_nodes_present() || d.health() == v1::HEALTH_LOST) return false;
  // Unsupported but healthy (an iGPU Level Zero lists), or FAULT: the driver still presents the
  // device and the runtime does not read health (H-HEALTH).
  return !d.supported() || d.health() == v1::HEALTH_FAULT;
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

// P4 (host side): the row's devices the runtime enumerates (RuntimeEnumerates), in host order; the
// others are explained. Empty: no device of the row is usable (`out.hidden` says why).
std::vector<VisibleUnit> UsableCards(const v1::Backend& backend, RowVisibility& out) {
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
  }
  return cards;
}

// P1: keeps the cards whose device nodes the job's mount namespace lists (all of them when
// `job_devices` is null). False when none is left (`out.hidden` says why).
bool KeepJobDevices(const v1::Backend& backend, const v1::JobDevices* job_devices, std::vector<VisibleUnit>& cards,
                    RowVisibility& out) {
  if (job_devices == nullptr) return true;
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
    return false;
  }
  cards = std::move(kept);
  return true;
}

// P-DRA: keeps the cards Kubernetes allocated to the job's container, whatever order their claims
// list them in (all of them when `allocation` is null or matched nothing). False when none is left
// (`out.hidden` says why).
bool KeepAllocated(const v1::Backend& backend, const JobAllocation* allocation, std::vector<VisibleUnit>& cards,
                   RowVisibility& out) {
  if (allocation == nullptr || allocation->devices.empty()) return true;
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
    return false;
  }
  cards = std::move(kept);
  return true;
}

// Runtime numbering: NeuronCores and Intel tiles (FLAT hierarchy, `xpu_flat`) are devices of their own.
std::vector<VisibleUnit> RuntimeUnits(const v1::Backend& backend, const std::vector<VisibleUnit>& cards,
                                      bool xpu_flat) {
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
  return units;
}

// The row's mask rules, each in its family's file (visibility_internal.h).
absl::Status ApplyMasks(const v1::Backend& backend, const Env& env, const std::vector<VisibleUnit>& cards,
                        bool xpu_flat, std::vector<VisibleUnit>& units, RowVisibility& out) {
  const std::string& type = backend.device_type();
  switch (backend.row()) {
    case v1::ROW_CUDA_NVIDIA: return MaskNvidia(env, units, out);
    case v1::ROW_CUDA_AMD: return MaskAmd(env, units, out);
    case v1::ROW_XPU: return MaskXpu(env, cards, xpu_flat, units, out);
    case v1::ROW_NPU: return MaskNpu(env, units, out);
    case v1::ROW_MLU:
      return MaskCudaLike(env, "E-MLU", {"CN_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES"}, type, units, out);
    case v1::ROW_MUSA: return MaskCudaLike(env, "E-MUSA", {"MUSA_VISIBLE_DEVICES"}, type, units, out);
    case v1::ROW_SDAA: return MaskCudaLike(env, "E-SDAA", {"SDAA_VISIBLE_DEVICES"}, type, units, out);
    case v1::ROW_NEURON: return MaskNeuron(env, units, out);
    case v1::ROW_HPU:
      return MaskById(env, "E-HPU", "HABANA_VISIBLE_MODULES", "module id", ModuleId, backend, units, out);
    case v1::ROW_TPU:
      return MaskById(env, "E-TPU", "TPU_VISIBLE_CHIPS", "chip id",
                      [](const v1::Device& d) { return static_cast<int>(d.host_index()); }, backend, units, out);
    default: return absl::OkStatus();
  }
}

// Why the masks left the job no unit.
void HiddenByMask(const v1::Backend& backend, RowVisibility& out) {
  out.hidden = out.mask_empty ? Hidden::kMaskEmpty : Hidden::kMask;
  out.hidden_reason = absl::StrCat(backend.hardware(), " present but ", out.mask_variable,
                                   out.mask_empty ? " is set to the empty string, which hides every device"
                                                  : absl::StrCat(" leaves the job no device",
                                                                 out.warnings.empty() ? "" : ": ",
                                                                 absl::StrJoin(out.warnings, "; ")));
}

}  // namespace

absl::StatusOr<RowVisibility> ComputeVisibility(const v1::Backend& backend, const Env& env,
                                                const v1::JobDevices* job_devices,
                                                const JobAllocation* allocation) {
  RowVisibility out;
  out.backend = &backend;
  std::vector<VisibleUnit> cards = UsableCards(backend, out);
  if (cards.empty()) return out;
  if (!KeepJobDevices(backend, job_devices, cards, out)) return out;
  if (!KeepAllocated(backend, allocation, cards, out)) return out;
  const std::string* hierarchy = Get(env, "ZE_FLAT_DEVICE_HIERARCHY");
  const bool xpu_flat = hierarchy == nullptr || *hierarchy != "COMPOSITE";
  std::vector<VisibleUnit> units = RuntimeUnits(backend, cards, xpu_flat);
  RETURN_IF_ERROR(ApplyMasks(backend, env, cards, xpu_flat, units, out));
  out.units = std::move(units);
  if (out.units.empty()) HiddenByMask(backend, out);
  return out;
}

}  // namespace devplace::placement
