// P-PICK (docs/SEMANTICS.md section 14): the devices a pick hands a job on a shared host. This
// file holds the request's bounds, the row (step 1) and Pick(), which runs the rule's steps in
// order; the steps themselves are pick_internal.h's, one file per group of steps.
#include "server/placement/pick.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"
#include "server/placement/pick_internal.h"
#include "server/placement/resolver.h"

namespace devplace::placement {
namespace pick_internal {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30)); }

std::optional<MaskForm> MaskFormOf(v1::Row row) {
  switch (row) {
    case v1::ROW_CUDA_NVIDIA:
      return MaskForm{"CUDA_VISIBLE_DEVICES", {}};
    case v1::ROW_CUDA_AMD:
      return MaskForm{"ROCR_VISIBLE_DEVICES", {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}};
    case v1::ROW_NEURON:
      return MaskForm{"NEURON_RT_VISIBLE_CORES", {"NEURON_RT_NUM_CORES"}};
    case v1::ROW_TPU:
      return MaskForm{"TPU_VISIBLE_CHIPS", {}};
    case v1::ROW_XPU:
      return MaskForm{"ZE_AFFINITY_MASK", {}};
    case v1::ROW_HPU:
      return MaskForm{"HABANA_VISIBLE_MODULES", {}};
    case v1::ROW_NPU:
      return MaskForm{"ASCEND_RT_VISIBLE_DEVICES", {}};
    case v1::ROW_MLU:
      return MaskForm{"MLU_VISIBLE_DEVICES", {"CN_VISIBLE_DEVICES"}};
    case v1::ROW_MUSA:
      return MaskForm{"MUSA_VISIBLE_DEVICES", {}};
    case v1::ROW_SDAA:
      return MaskForm{"SDAA_VISIBLE_DEVICES", {}};
    default:
      return std::nullopt;
  }
}

absl::StatusOr<const v1::Backend*> PickRow(const v1::Inventory& inventory, v1::Row named,
                                           const v1::ResolveDeviceRequest& job, v1::PickDevicesResponse& out) {
  v1::Row row = named;
  if (row == v1::ROW_UNSPECIFIED) {
    ASSIGN_OR_RETURN(const v1::ResolveDeviceResponse answer, Resolve(inventory, job));
    row = answer.backend();
    if (row == v1::ROW_CPU) {
      std::string why;
      if (answer.warnings_size() > 0) why = absl::StrCat(" (", answer.warnings(0), ")");
      return absl::FailedPreconditionError(
          absl::StrCat("P-PICK the job's device is cpu", why,
                       ": there is no accelerator to pick for it; name the row with `row` (--row) if the job "
                       "can use one"));
    }
    out.add_explanation(absl::StrCat("P-PICK the job's answer is ", answer.device(), ": picking from its row"));
  }
  if (row == v1::ROW_CPU || row == v1::ROW_MPS) {
    return absl::FailedPreconditionError(absl::StrCat("row: ", RowName(row),
                                                      " has no devices to pick (cpu is shared, mps is one "
                                                      "device); pick from an accelerator row"));
  }
  const auto backend = std::find_if(inventory.backends().begin(), inventory.backends().end(),
                                    [&](const v1::Backend& b) { return b.row() == row; });
  if (backend == inventory.backends().end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("row: this host has no ", RowName(row), " hardware (rows present: ",
                     absl::StrJoin(inventory.backends(), ", ",
                                   [](std::string* o, const v1::Backend& b) { absl::StrAppend(o, b.name()); }),
                     ")"));
  }
  out.set_backend(row);
  return &*backend;
}

namespace {

// P-PICK's steps, in the rule's order; what they add to `outcome.response` stays there when one
// fails (the service answers only an OK pick).
absl::Status PickSteps(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                       const std::vector<LeasedUnit>& leased, PickOutcome& outcome) {
  v1::PickDevicesResponse& out = outcome.response;
  RETURN_IF_ERROR(ValidatePickRequest(request));
  const uint32_t count = std::max<uint32_t>(1, request.count());
  v1::ResolveDeviceRequest job = request.job();
  if (job.workload() == v1::WORKLOAD_UNSPECIFIED) job.set_workload(v1::WORKLOAD_TRAINING);
  out.set_inventory_revision(inventory.revision());
  out.set_inventory_epoch(inventory.epoch());

  // 1. The row: named, or the one the job's own answer uses; and the variable that masks it.
  ASSIGN_OR_RETURN(const v1::Backend* const backend, PickRow(inventory, request.row(), job, out));
  const std::optional<MaskForm> form = MaskFormOf(backend->row());
  if (!form) return absl::FailedPreconditionError(absl::StrCat("row: ", backend->name(), " cannot be masked"));

  // 2. The job's units of the row: its masks, device nodes (P1) and DRA allocation (P-DRA).
  ASSIGN_OR_RETURN(const JobView view, ViewOf(inventory, *backend, job, out));

  // 3. Each unit judged.
  std::vector<Candidate> candidates;
  candidates.reserve(view.pool.size());
  for (size_t i = 0; i < view.pool.size(); ++i) {
    candidates.push_back(Judge(view.pool[i], static_cast<int>(i), backend->row(), request, count, leased));
  }

  // 4. The least used first; one line per unit, picked or not; too few is a refusal.
  const size_t picked = PickLeastUsed(candidates, count);
  const std::vector<std::string> refusal = ExplainCandidates(candidates, picked, count, *backend, view.pool, out);
  if (picked < count) {
    absl::Status refused = TooFewFree(candidates, refusal, picked, count, request, *backend, outcome.no_free_device);
    for (const Candidate& c : candidates) {
      if (outcome.no_free_device && c.eligible) outcome.free_units.push_back(AsLeased(backend->row(), c.unit));
    }
    return refused;
  }

  // 5. The pick in the row's variable, in the job's order of the units, checked.
  const std::vector<VisibleUnit> chosen = Chosen(candidates);
  ASSIGN_OR_RETURN(const PickMask mask, MaskFor(chosen, *form, *backend, job, view, out));
  RETURN_IF_ERROR(CheckMask(chosen, *form, mask, *backend, view));
  HandOut(chosen, *form, mask, *backend, out);

  // 6. The device string the job then uses: its own answer in the new environment.
  return AnswerWith(inventory, job, mask, candidates, out);
}

}  // namespace
}  // namespace pick_internal

using pick_internal::Gib;

bool Overlaps(const LeasedUnit& a, const LeasedUnit& b) {
  if (a.row != b.row || a.pci_bus_id != b.pci_bus_id) return false;
  const bool a_whole = a.sub_device < 0 && a.partition_uuid.empty();
  const bool b_whole = b.sub_device < 0 && b.partition_uuid.empty();
  if (a_whole || b_whole) return true;
  return a.sub_device == b.sub_device && a.partition_uuid == b.partition_uuid;
}

std::string DescribeUsage(const v1::DeviceUsage* usage, const v1::Device& device, const v1::Partition* partition) {
  std::vector<std::string> parts;
  if (usage == nullptr) {
    parts.push_back("usage unknown (no vendor library read it)");
  } else {
    if (usage->processes_known()) {
      parts.push_back(usage->process_count() == 0 ? "no process"
                                                  : absl::StrCat(usage->process_count(), " process",
                                                                 usage->process_count() == 1 ? "" : "es"));
    } else {
      parts.push_back(absl::StrCat("processes not reported by ", usage->source()));
    }
    if (usage->busy()) {
      parts.push_back(usage->compute_mode() == v1::DEVICE_USAGE_COMPUTE_MODE_PROHIBITED
                          ? "compute prohibited"
                          : "exclusive-process compute mode, taken");
    }
    if (usage->has_memory_used_bytes()) parts.push_back(absl::StrCat(Gib(usage->memory_used_bytes()), " used"));
  }
  const bool has_free = partition != nullptr ? partition->has_memory_free_bytes() : device.has_memory_free_bytes();
  const bool has_total = partition != nullptr ? partition->has_memory_total_bytes() : device.has_memory_total_bytes();
  if (has_free) {
    const uint64_t free = partition != nullptr ? partition->memory_free_bytes() : device.memory_free_bytes();
    const uint64_t total = partition != nullptr ? partition->memory_total_bytes() : device.memory_total_bytes();
    parts.push_back(has_total ? absl::StrCat(Gib(free), " free of ", Gib(total)) : absl::StrCat(Gib(free), " free"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status ValidatePickRequest(const v1::PickDevicesRequest& request) {
  if (request.count() > kMaxPickCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: ", request.count(), " is out of range; accepted: 0 (= 1) to ", kMaxPickCount));
  }
  if (!v1::LeaseHolder_IsValid(request.holder())) {
    return absl::InvalidArgumentError(absl::StrCat("holder: ", static_cast<int>(request.holder()),
                                                   " is not a LeaseHolder value; accepted: 0 to 4"));
  }
  if (!v1::Row_IsValid(request.row())) {
    return absl::InvalidArgumentError(absl::StrCat("row: ", static_cast<int>(request.row()),
                                                   " is not a Row value; accepted: 0 to 12"));
  }
  if (request.ttl_ms() != 0) {
    if (request.holder() == v1::LEASE_HOLDER_PROCESS || request.holder() == v1::LEASE_HOLDER_PARENT ||
        request.holder() == v1::LEASE_HOLDER_PROCESS_GROUP) {
      return absl::InvalidArgumentError(
          "ttl_ms: a lease held for a process lasts as long as the process; set ttl_ms only with LEASE_HOLDER_TTL "
          "(or with holder unspecified)");
    }
    if (request.ttl_ms() < kMinLeaseTtlMs || request.ttl_ms() > kMaxLeaseTtlMs) {
      return absl::InvalidArgumentError(absl::StrCat("ttl_ms: ", request.ttl_ms(), " is out of range; accepted: 0 (= ",
                                                     kDefaultLeaseTtlMs, ") or ", kMinLeaseTtlMs, " to ",
                                                     kMaxLeaseTtlMs, " (a day)"));
    }
  }
  if (request.wait_ms() > kMaxPickWaitMs) {
    return absl::InvalidArgumentError(absl::StrCat("wait_ms: ", request.wait_ms(), " is out of range; accepted: 0 to ",
                                                   kMaxPickWaitMs, " (an hour; --wait=1h)"));
  }
  if (request.holder_pid() != 0 && request.holder() != v1::LEASE_HOLDER_PARENT) {
    return absl::InvalidArgumentError(absl::StrCat("holder_pid: ", request.holder_pid(),
                                                   " names the holding ancestor of LEASE_HOLDER_PARENT only; leave it 0"));
  }
  if (request.waiter_id().size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat("waiter_id: ", request.waiter_id().size(),
                                                   " bytes; accepted: 0 to 64 (the devplace-waiter-id a waiting pick "
                                                   "was sent, or empty)"));
  }
  return absl::OkStatus();
}

PickOutcome Pick(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                 const std::vector<LeasedUnit>& leased) {
  PickOutcome outcome;
  outcome.status = pick_internal::PickSteps(inventory, request, leased, outcome);
  return outcome;
}

std::vector<std::pair<std::string, std::string>> NoDeviceEnvironment(v1::Row row) {
  // An index past any host's devices where empty is not "none": Level Zero skips a
  // ZE_AFFINITY_MASK entry at or past its device count and exposes only the devices some entry
  // enabled, so none (intel/compute-runtime shared/source/execution_environment/
  // execution_environment.cpp parseAffinityMask, where an empty value or "default" applies no
  // filter, as E-XPU says); torch_xla turns an empty NEURON_RT_VISIBLE_CORES into LOCAL_RANK's core
  // and keeps a one-entry list for a local world of 1, refusing it for more (T-XLA-NEURON); Gaudi's
  // module ids are 0-7 and TPU chip ids count a host's chips, and neither vendor documents an empty
  // value. How the Neuron, Gaudi and TPU runtimes treat an id the host lacks is not verified (the
  // rule book's section 12): devplace's own resolver refuses it (E-Neuron, E-HPU, E-TPU), so the job
  // gets no device either way.
  constexpr char kNoIndex[] = "65535";
  std::vector<std::pair<std::string, std::string>> out;
  const auto add = [&](v1::Row r) {
    std::vector<std::pair<std::string, std::string>> vars;
    switch (r) {
      case v1::ROW_CUDA_NVIDIA:  // E-CUDA: empty = none (PyTorch's _parse_visible_devices, CUDA)
        vars = {{"CUDA_VISIBLE_DEVICES", ""}};
        break;
      case v1::ROW_CUDA_AMD:  // E-ROCm: CUDA-style lists, ROCR first; empty = none
        vars = {{"ROCR_VISIBLE_DEVICES", ""}, {"HIP_VISIBLE_DEVICES", ""}, {"CUDA_VISIBLE_DEVICES", ""}};
        break;
      case v1::ROW_NEURON:
        vars = {{"NEURON_RT_VISIBLE_CORES", kNoIndex}};
        break;
      case v1::ROW_TPU:
        vars = {{"TPU_VISIBLE_CHIPS", kNoIndex}};
        break;
      case v1::ROW_XPU:
        vars = {{"ZE_AFFINITY_MASK", kNoIndex}};
        break;
      case v1::ROW_HPU:
        vars = {{"HABANA_VISIBLE_MODULES", kNoIndex}};
        break;
      case v1::ROW_NPU:  // E-NPU: CANN reads the ids before the first invalid entry; empty = none
        vars = {{"ASCEND_RT_VISIBLE_DEVICES", ""}};
        break;
      case v1::ROW_MLU:  // E-MLU: CN_VISIBLE_DEVICES wins over MLU_VISIBLE_DEVICES; CUDA-like lists
        vars = {{"MLU_VISIBLE_DEVICES", ""}, {"CN_VISIBLE_DEVICES", ""}};
        break;
      case v1::ROW_MUSA:  // E-MUSA: a CUDA-like list
        vars = {{"MUSA_VISIBLE_DEVICES", ""}};
        break;
      case v1::ROW_SDAA:  // E-SDAA: taken as a CUDA-like list
        vars = {{"SDAA_VISIBLE_DEVICES", ""}};
        break;
      default:
        break;
    }
    for (auto& v : vars) {
      if (std::none_of(out.begin(), out.end(), [&](const auto& o) { return o.first == v.first; })) out.push_back(v);
    }
  };
  if (row != v1::ROW_UNSPECIFIED) {
    add(row);
    return out;
  }
  for (const BackendSpec& spec : Backends()) add(spec.row);
  return out;
}

}  // namespace devplace::placement
