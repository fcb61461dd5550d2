// P-PICK (docs/SEMANTICS.md section 14): the devices a pick hands a job on a shared host.
#include "server/placement/pick.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/allocation.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"
#include "server/placement/visibility.h"

namespace devplace::placement {
namespace {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30)); }

// How a row's pick is written: the list variable set, and the row's other variables that would
// narrow it again (removed from the job's environment).
struct MaskForm {
  const char* variable;
  std::vector<const char*> unset;
};

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

bool SameUnit(const VisibleUnit& a, const VisibleUnit& b) {
  return a.device == b.device && a.sub_device == b.sub_device && a.partition == b.partition;
}

LeasedUnit AsLeased(v1::Row row, const VisibleUnit& u) {
  LeasedUnit l;
  l.row = row;
  l.pci_bus_id = u.device->pci_bus_id();
  l.sub_device = u.sub_device;
  if (u.partition != nullptr) l.partition_uuid = u.partition->uuid();
  return l;
}

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

// One unit the job may use, judged.
struct Candidate {
  VisibleUnit unit;
  int job_index = 0;      // position in the pool (the job's order)
  bool eligible = false;
  bool taken = false;     // leased, busy or in use: a wait may free it
  std::string why;        // why not eligible, or what makes it a good choice
  uint32_t processes = 0;
  uint64_t used = 0;
  bool usage_unknown = false;  // no vendor library read its usage: it may be in use outside leases
  bool free_unknown = false;   // its free memory is unknown
  bool unusable = false;       // the job sees it but cannot use it (P4: e.g. an iGPU PyTorch's xpu lacks)
};

// The units the pick chooses from: the job's visible units; where CUDA itself would pick one MIG
// instance (E-MIG, no MIG- UUID named), every instance of the GPUs the job may name and every GPU
// without MIG, since the pick names one by UUID.
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

}  // namespace

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
  return absl::OkStatus();
}

PickOutcome Pick(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                 const std::vector<LeasedUnit>& leased) {
  PickOutcome outcome;
  v1::PickDevicesResponse& out = outcome.response;
  auto fail = [&outcome](absl::Status status) {
    outcome.status = std::move(status);
    return outcome;
  };
  if (absl::Status s = ValidatePickRequest(request); !s.ok()) return fail(s);
  const uint32_t count = std::max<uint32_t>(1, request.count());
  v1::ResolveDeviceRequest job = request.job();
  if (job.workload() == v1::WORKLOAD_UNSPECIFIED) job.set_workload(v1::WORKLOAD_TRAINING);
  out.set_inventory_revision(inventory.revision());
  out.set_inventory_epoch(inventory.epoch());

  // The row: named, or the one the job's own answer uses.
  v1::Row row = request.row();
  if (row == v1::ROW_UNSPECIFIED) {
    absl::StatusOr<v1::ResolveDeviceResponse> answer = Resolve(inventory, job);
    if (!answer.ok()) return fail(answer.status());
    row = answer->backend();
    if (row == v1::ROW_CPU) {
      std::string why;
      if (answer->warnings_size() > 0) why = absl::StrCat(" (", answer->warnings(0), ")");
      return fail(absl::FailedPreconditionError(
          absl::StrCat("P-PICK the job's device is cpu", why,
                       ": there is no accelerator to pick for it; name the row with `row` (--row) if the job "
                       "can use one")));
    }
    out.add_explanation(absl::StrCat("P-PICK the job's answer is ", answer->device(), ": picking from its row"));
  }
  if (row == v1::ROW_CPU || row == v1::ROW_MPS) {
    return fail(absl::FailedPreconditionError(absl::StrCat("row: ", RowName(row),
                                                           " has no devices to pick (cpu is shared, mps is one "
                                                           "device); pick from an accelerator row")));
  }
  const auto backend_it = std::find_if(inventory.backends().begin(), inventory.backends().end(),
                                       [&](const v1::Backend& b) { return b.row() == row; });
  if (backend_it == inventory.backends().end()) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("row: this host has no ", RowName(row), " hardware (rows present: ",
                     absl::StrJoin(inventory.backends(), ", ",
                                   [](std::string* o, const v1::Backend& b) { absl::StrAppend(o, b.name()); }),
                     ")")));
  }
  const v1::Backend& backend = *backend_it;
  out.set_backend(row);
  const std::optional<MaskForm> form = MaskFormOf(row);
  if (!form) return fail(absl::FailedPreconditionError(absl::StrCat("row: ", backend.name(), " cannot be masked")));

  // The job's devices of the row: its masks, device nodes (P1) and DRA allocation (P-DRA).
  const v1::JobDevices* job_devices = job.has_job_devices() ? &job.job_devices() : nullptr;
  std::optional<JobAllocation> allocation;
  if (job.has_device_allocation()) {
    absl::StatusOr<JobAllocation> matched = MatchAllocation(inventory, job.device_allocation());
    if (!matched.ok()) return fail(matched.status());
    allocation = *std::move(matched);
  }
  const JobAllocation* alloc = allocation ? &*allocation : nullptr;
  absl::StatusOr<RowVisibility> vis = ComputeVisibility(backend, job.env(), job_devices, alloc);
  if (!vis.ok()) return fail(vis.status());
  for (const std::string& e : vis->explanation) out.add_explanation(e);
  std::vector<std::string> pool_steps;
  absl::StatusOr<std::vector<VisibleUnit>> pool = Pool(backend, *vis, job.env(), job_devices, alloc, pool_steps);
  if (!pool.ok()) return fail(pool.status());
  for (const std::string& e : pool_steps) out.add_explanation(e);
  if (pool->empty()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "P-PICK the job sees no ", backend.name(), " device: ",
        vis->hidden_reason.empty() ? "its masks, device nodes or allocation leave none" : vis->hidden_reason)));
  }

  // Judge each unit.
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < pool->size(); ++i) {
    Candidate c;
    c.unit = (*pool)[i];
    c.job_index = static_cast<int>(i);
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
      c.why = absl::StrCat("not picked: leased (", lease->holder, ")");
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
      c.why = state;
    }
    candidates.push_back(std::move(c));
  }

  // The least used first: fewest processes, least memory in use, the job's order.
  std::vector<const Candidate*> eligible;
  for (const Candidate& c : candidates) {
    if (c.eligible) eligible.push_back(&c);
  }
  std::stable_sort(eligible.begin(), eligible.end(), [](const Candidate* a, const Candidate* b) {
    if (a->processes != b->processes) return a->processes < b->processes;
    return a->used < b->used;
  });
  std::set<const Candidate*> picked;
  for (size_t i = 0; i < eligible.size() && picked.size() < count; ++i) picked.insert(eligible[i]);

  // One line per unit, picked or not, and one per device of the row the job does not see.
  int lines = 0;
  std::vector<std::string> refusal;
  for (const Candidate& c : candidates) {
    const std::string line = absl::StrCat(DescribeUnit(c.unit), ": ",
                                          picked.count(&c) ? absl::StrCat(picked.size() < count ? "free (" : "picked (",
                                                                          c.why, ")")
                                          : c.eligible     ? absl::StrCat("not picked: ", count,
                                                                          " less used device(s) came first (", c.why, ")")
                                                           : c.why);
    if (lines++ < kMaxPickDeviceLines) out.add_explanation(absl::StrCat("P-PICK ", line));
    if (static_cast<int>(refusal.size()) < kMaxRefusalDeviceLines) refusal.push_back(line);
  }
  if (lines > kMaxPickDeviceLines) {
    out.add_explanation(absl::StrCat("P-PICK ... and ", lines - kMaxPickDeviceLines, " more unit(s)"));
  }
  for (const v1::Device& d : backend.devices()) {
    const bool in_pool = std::any_of(pool->begin(), pool->end(), [&](const VisibleUnit& u) { return u.device == &d; });
    if (!in_pool && lines++ < kMaxPickDeviceLines) {
      out.add_explanation(absl::StrCat("P-PICK ", DescribeUnit({&d, -1, nullptr}),
                                       ": not the job's (its masks, device nodes or allocation leave it out, or it "
                                       "is not usable: see the steps above)"));
    }
  }

  const size_t usable = static_cast<size_t>(
      std::count_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return !c.unusable; }));
  if (picked.size() < count) {
    const int more = static_cast<int>(candidates.size()) - static_cast<int>(refusal.size());
    const std::string listed =
        absl::StrCat(absl::StrJoin(refusal, "; "), more > 0 ? absl::StrCat("; ... and ", more, " more") : "");
    // More than the job may ever use: no release or wait can help (not queued, not retried).
    if (count > usable) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "P-PICK ", count, " ", backend.name(), " device(s) wanted, but the job may use only ", usable,
          " (its masks, device nodes or allocation, and the host's usable devices): ", listed,
          usable > 0 ? absl::StrCat("; ask for at most ", usable) : std::string())));
    }
    // --min_free where no device's free memory is known: no wait can change that (not queued).
    if (request.min_free_bytes() > 0 &&
        std::all_of(candidates.begin(), candidates.end(),
                    [](const Candidate& c) { return c.unusable || c.free_unknown; })) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "P-PICK --min_free (min_free_bytes ", Gib(request.min_free_bytes()), ") needs each device's free memory, "
          "and it is unknown for all ", usable, " ", backend.name(),
          " device(s) the job may use (no vendor library reads it here; `devplace inventory` shows the usage "
          "source), so no wait can satisfy it: pick without --min_free, or install the vendor library "
          "(docs/CLIENT.md \"Shared hosts\")")));
    }
    outcome.no_free_device = true;
    // Advice that fits: waiting helps when some are leased or in use, sharing when some are in use.
    const bool some_taken =
        std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.taken; });
    const bool some_in_use = !request.allow_shared() && std::any_of(candidates.begin(), candidates.end(),
                                                                    [](const Candidate& c) { return c.processes > 0; });
    std::vector<std::string> advice;
    if (some_taken) advice.push_back("retry later or wait for one (--wait, wait_ms)");
    if (some_in_use) advice.push_back("allow sharing (--shared, allow_shared)");
    if (request.min_free_bytes() > 0) advice.push_back("ask for less free memory (--min_free, min_free_bytes)");
    advice.push_back("ask for fewer");
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "P-PICK ", count, " free ", backend.name(), " device(s) wanted, ", picked.size(), " free for this job now (",
        candidates.size(), " it may use): ", listed, "; ", absl::StrJoin(advice, ", "))));
  }

  // Express the pick in the row's variable, in the job's order of the units.
  std::vector<VisibleUnit> chosen;
  for (const Candidate& c : candidates) {
    if (picked.count(&c)) chosen.push_back(c.unit);
  }
  Env base = job.env();
  base.erase(form->variable);
  for (const char* v : form->unset) base.erase(v);
  std::string value;
  bool uuids = row == v1::ROW_CUDA_NVIDIA;
  for (const VisibleUnit& u : chosen) {
    const std::string& id = u.partition != nullptr ? u.partition->uuid() : u.device->uuid();
    if (id.empty() || u.sub_device >= 0) uuids = false;
  }
  Env set;
  if (uuids) {
    std::vector<std::string> ids;
    for (const VisibleUnit& u : chosen) ids.push_back(u.partition != nullptr ? u.partition->uuid() : u.device->uuid());
    value = absl::StrJoin(ids, ",");
  } else {
    if (row == v1::ROW_CUDA_NVIDIA) {
      base["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";  // indices as nvidia-smi counts them, not FASTEST_FIRST
      set["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
    }
    absl::StatusOr<std::string> indices = IndexList(backend, base, job_devices, alloc, chosen, row);
    if (!indices.ok()) return fail(indices.status());
    value = *indices;
  }
  set[form->variable] = value;
  Env applied = base;
  applied[form->variable] = value;
  for (const char* v : form->unset) {
    if (job.env().contains(v)) out.add_unset(v);
  }

  // Check: the job with these variables sees exactly the picked units, in this order.
  absl::StatusOr<RowVisibility> check = ComputeVisibility(backend, applied, job_devices, alloc);
  const bool same = check.ok() && check->units.size() == chosen.size() &&
                    std::equal(chosen.begin(), chosen.end(), check->units.begin(), SameUnit);
  if (!same) {
    std::string saw = check.ok() ? absl::StrJoin(check->units, ", ", [](std::string* o, const VisibleUnit& u) {
                                     absl::StrAppend(o, DescribeUnit(u));
                                   })
                                 : std::string(check.status().message());
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "P-PICK cannot hand the job ", absl::StrJoin(chosen, ", ", [](std::string* o, const VisibleUnit& u) {
          absl::StrAppend(o, DescribeUnit(u));
        }),
        " through ", form->variable, "=", value, ": the job would see ", saw.empty() ? "nothing" : saw)));
  }
  for (const auto& [k, v] : set) (*out.mutable_env())[k] = v;
  const std::string& type = backend.device_type();
  for (size_t i = 0; i < chosen.size(); ++i) {
    out.add_devices(absl::StrCat(type, ":", i));
    PlaceUnit(type, static_cast<int>(i), chosen[i], *out.add_placed());
    v1::LeaseDevice& ld = *out.mutable_lease()->add_devices();
    ld.set_row(row);
    ld.set_host_index(chosen[i].device->host_index());
    ld.set_pci_bus_id(chosen[i].device->pci_bus_id());
    ld.set_uuid(chosen[i].device->uuid());
    if (chosen[i].partition != nullptr) ld.set_partition_uuid(chosen[i].partition->uuid());
    ld.set_sub_device(chosen[i].sub_device);
  }
  out.add_explanation(absl::StrCat("P-PICK the job gets ", form->variable, "=", value,
                                   out.unset_size() > 0 ? absl::StrCat(" (and unsets ", absl::StrJoin(out.unset(), ", "), ")")
                                                        : "",
                                   ": it sees ", absl::StrJoin(out.devices(), ", ")));

  // The device string the job then uses: its own answer in the new environment.
  v1::ResolveDeviceRequest then = job;
  *then.mutable_env() = applied;
  absl::StatusOr<v1::ResolveDeviceResponse> answer = Resolve(inventory, then);
  if (!answer.ok()) return fail(answer.status());
  out.set_device(answer->device());
  std::vector<std::string> unknown;
  for (const Candidate& c : candidates) {
    if (picked.count(&c) && c.usage_unknown) unknown.push_back(DescribeUnit(c.unit));
  }
  if (!unknown.empty()) {
    out.add_warnings(absl::StrCat(
        "P-PICK usage unknown for ", absl::StrJoin(unknown, ", "),
        ": no vendor library reports its processes or memory here, so a process that runs on it outside "
        "devplace's leases is not seen (it was picked as if idle); install the vendor library (NVML, amd_smi, "
        "...) for the usage"));
  }
  for (const std::string& w : answer->warnings()) out.add_warnings(w);
  out.add_explanation(absl::StrCat("P-PICK with it the job's answer is ", answer->device()));
  return outcome;
}

}  // namespace devplace::placement
