// P-PICK steps 2 and 3 (docs/SEMANTICS.md section 14): the units of the row the job may use, and
// each of them judged: set aside with its reason, or eligible.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/common/status_macros.h"
#include "server/placement/allocation.h"
#include "server/placement/health.h"
#include "server/placement/pick_internal.h"
#include "server/placement/visibility.h"

namespace devplace::placement::pick_internal {

LeasedUnit AsLeased(v1::Row row, const VisibleUnit& u) {
  LeasedUnit l;
  l.row = row;
  l.pci_bus_id = u.device->pci_bus_id();
  l.sub_device = u.sub_device;
  if (u.partition != nullptr) l.partition_uuid = u.partition->uuid();
  return l;
}

namespace {

const v1::DeviceUsage* UsageOf(const VisibleUnit& u) {
  if (u.partition != nullptr) return u.partition->has_usage() ? &u.partition->usage() : nullptr;
  return u.device->has_usage() ? &u.device->usage() : nullptr;
}

std::optional<uint64_t> FreeOf(const VisibleUnit& u) {
  if (u.partition != nullptr) {
    if (u.partition->has_memory_free_bytes()) return u.partition->memory_free_bytes();
    return std::nullopt;
  }
  if (u.sub_device >= 0) return std::nullopt;  // a core or tile's share is not reported
  if (u.device->has_memory_free_bytes()) return u.device->memory_free_bytes();
  return std::nullopt;
}

// The units the pick chooses from (JobView::pool), given the job's visibility `vis` of `backend`.
absl::StatusOr<std::vector<VisibleUnit>> Pool(const v1::Backend& backend, const RowVisibility& vis, const Env& env,
                                              const v1::JobDevices* job_devices, const JobAllocation* allocation,
                                              std::vector<std::string>& explanation) {
  if (!vis.mig_implicit) return vis.units;
  // The same visibility with MIG set aside names the GPUs; their instances are the units.
  v1::Backend plain = backend;
  for (v1::Device& d : *plain.mutable_devices()) {
    d.clear_partitions();
    d.mutable_attributes()->erase("mig_mode");
  }
  absl::StatusOr<RowVisibility> gpus = ComputeVisibility(plain, env, job_devices, nullptr);
  if (!gpus.ok()) return gpus.status();
  std::vector<VisibleUnit> pool;
  for (const VisibleUnit& g : gpus->units) {
    const v1::Device& d = backend.devices(static_cast<int>(g.device->host_index()));
    if (allocation != nullptr && !allocation->devices.empty() && allocation->devices.count(&d) == 0) continue;
    if (d.partitions_size() == 0) {
      pool.push_back({&d, -1, nullptr});
      continue;
    }
    for (const v1::Partition& p : d.partitions()) {
      if (!p.uuid().empty()) pool.push_back({&d, -1, &p});
    }
  }
  explanation.push_back(absl::StrCat("P-PICK E-MIG: CUDA would choose the MIG instance itself; the pick chooses among ",
                                     pool.size(), " unit(s): each MIG instance with a UUID and each GPU without MIG"));
  return pool;
}

}  // namespace

absl::StatusOr<JobView> ViewOf(const v1::Inventory& inventory, const v1::Backend& backend,
                               const v1::ResolveDeviceRequest& job, v1::PickDevicesResponse& out) {
  JobView view;
  view.job_devices = job.has_job_devices() ? &job.job_devices() : nullptr;
  if (job.has_device_allocation()) {
    ASSIGN_OR_RETURN(view.allocation, MatchAllocation(inventory, job.device_allocation()));
  }
  ASSIGN_OR_RETURN(const RowVisibility vis, ComputeVisibility(backend, job.env(), view.job_devices, view.alloc()));
  for (const std::string& e : vis.explanation) out.add_explanation(e);
  std::vector<std::string> pool_steps;
  ASSIGN_OR_RETURN(view.pool, Pool(backend, vis, job.env(), view.job_devices, view.alloc(), pool_steps));
  for (const std::string& e : pool_steps) out.add_explanation(e);
  if (view.pool.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "P-PICK the job sees no ", backend.name(), " device: ",
        vis.hidden_reason.empty() ? "its masks, device nodes or allocation leave none" : vis.hidden_reason));
  }
  return view;
}

Candidate Judge(const VisibleUnit& unit, int job_index, v1::Row row, const v1::PickDevicesRequest& request,
                uint32_t count, const std::vector<LeasedUnit>& leased) {
  Candidate c;
  c.unit = unit;
  c.job_index = job_index;
  const v1::DeviceUsage* usage = UsageOf(c.unit);
  const std::string state = DescribeUsage(usage, *c.unit.device, c.unit.partition);
  const LeasedUnit me = AsLeased(row, c.unit);
  const auto lease = std::find_if(leased.begin(), leased.end(), [&](const LeasedUnit& l) { return Overlaps(l, me); });
  const std::optional<uint64_t> free = FreeOf(c.unit);
  c.usage_unknown = usage == nullptr;
  c.free_unknown = !free.has_value();
  if (usage != nullptr) {
    c.processes = usage->processes_known() ? usage->process_count() : 0;
    c.used = usage->has_memory_used_bytes() ? usage->memory_used_bytes() : 0;
  }
  c.unusable = !c.unit.device->usable();
  c.taken = !c.unusable && (lease != leased.end() || (usage != nullptr && usage->busy()) ||
                            (c.processes > 0 && !request.allow_shared()));
  if (c.unusable) {
    // Step 2 takes P4's usable devices only: the job sees this one (it counts in the mask's
    // numbering) but cannot run on it, so leasing it would hand the job cpu.
    c.why = absl::StrCat("not picked: not usable (", c.unit.device->unusable_reason(), ")");
  } else if (lease != leased.end()) {
    c.why = absl::StrCat(lease->held_back ? "not picked: kept free for an older waiting pick (" : "not picked: leased (",
                         lease->holder, ")");
  } else if (usage != nullptr && usage->busy()) {
    c.why = absl::StrCat("not picked: busy (", state, ")");
  } else if (c.unit.partition != nullptr && count > 1) {
    c.why = "not picked: a MIG instance, and a CUDA process sees only one (count > 1)";
  } else if (c.processes > 0 && !request.allow_shared()) {
    c.why = absl::StrCat("not picked: in use (", state, "); allow_shared (--shared) would let it be shared");
  } else if (request.min_free_bytes() > 0 && !free) {
    c.why = absl::StrCat("not picked: free memory unknown and --min_free (min_free_bytes) is ",
                         Gib(request.min_free_bytes()));
  } else if (request.min_free_bytes() > 0 && *free < request.min_free_bytes()) {
    c.why = absl::StrCat("not picked: ", Gib(*free), " free, less than --min_free (min_free_bytes) ",
                         Gib(request.min_free_bytes()), " (", state, ")");
  } else {
    c.eligible = true;
    c.degraded = c.unit.device->health() == v1::HEALTH_DEGRADED;
    c.why = c.degraded ? absl::StrCat(state, "; degraded: ", HealthWhy(*c.unit.device)) : state;
  }
  return c;
}

}  // namespace devplace::placement::pick_internal
