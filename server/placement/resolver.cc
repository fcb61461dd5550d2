// The resolver's core (resolver.h): Resolve() and ResolveSerialized(), Run() (validate the request,
// find the rows the job can use, let the convention's file choose, then the warnings every answer
// gets), availability (P4, P5) and the answer's building blocks. Each convention's rules are in the
// file resolver_internal.h names.
#include "server/placement/resolver.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/arena.h"
#include "server/common/status_macros.h"
#include "server/placement/allocation.h"
#include "server/placement/backends.h"
#include "server/placement/env_typos.h"
#include "server/placement/health.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/versions.h"
#include "server/placement/visibility.h"

namespace devplace::placement {
namespace resolver_internal {

// "a, b, c" for at most kMaxPlacedDevices items, else the first ones and "and K more": lists of
// devices in explanation and warning lines stay bounded on big hosts, like `placed` (P-BOUND).
std::string BoundedList(const std::vector<std::string>& items) {
  const size_t shown = std::min(items.size(), static_cast<size_t>(kMaxPlacedDevices));
  std::string text = absl::StrJoin(items.begin(), items.begin() + shown, ", ");
  if (shown < items.size()) absl::StrAppend(&text, " and ", items.size() - shown, " more");
  return text;
}

namespace {

std::string BuildOrderText(const std::vector<std::string>& order) {
  std::vector<std::string> up;
  for (const std::string& t : order) up.push_back(t == "neuron" ? "Neuron" : absl::AsciiStrToUpper(t));
  return absl::StrJoin(up, ", ");
}

}  // namespace

// The orders are constants (kIntOrder and the version table's OrderRules()): their
// texts are built once, not on every answer.
std::string OrderText(const std::vector<std::string>& order) {
  static const auto* const texts = [] {
    auto* m = new std::map<const std::vector<std::string>*, std::string>();
    (*m)[&kIntOrder] = BuildOrderText(kIntOrder);
    for (const OrderRule& r : OrderRules()) (*m)[&r.order] = BuildOrderText(r.order);
    return m;
  }();
  const auto it = texts->find(&order);
  return it != texts->end() ? it->second : BuildOrderText(order);
}

// Fills the answer; on an error `*out` holds a partial answer that callers drop.
absl::Status Resolution::Run() {
  if (inv_.backends_size() == 0) {
    return absl::UnavailableError("no inventory yet: the first probe of this host has not completed");
  }
  RETURN_IF_ERROR(ValidateRequest());
  out_.add_explanation(versions_.Describe());
  // V-SKEW: a release newer than the rules is answered with the newest rules, said, a hazard.
  for (std::string& w : versions_.SkewWarnings()) {
    hazards_.push_back(w);
    out_.add_warnings(std::move(w));
  }
  DescribeJobPython();
  TransformersImportWarnings();
  RETURN_IF_ERROR(ComputeRows());
  if (req_.workload() == v1::WORKLOAD_TRAINING) {
    RETURN_IF_ERROR(Training());
  } else if (convention_ == v1::CONVENTION_PIPELINE) {
    RETURN_IF_ERROR(Pipeline());
  } else {
    RETURN_IF_ERROR(FromPretrained());
  }
  RenumberingWarnings();
  // H-FOREIGN: visibility variables that cannot apply to the answer's row.
  for (std::string& w : ForeignMaskWarnings(inv_, out_.backend(), req_.env())) out_.add_warnings(std::move(w));
  // E-TYPO: near misses of placement variables (warnings only, never hazards: nothing reads them).
  for (std::string& w : EnvTypoWarnings(req_.env())) out_.add_warnings(std::move(w));
  if (req_.strict() && !hazards_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("strict: ", absl::StrJoin(hazards_, "; "), " (answer without strict: ", out_.device(), ")"));
  }
  BoundPlaced();
  out_.set_inventory_revision(inv_.revision());
  out_.set_inventory_epoch(inv_.epoch());
  out_.set_transformers_version(versions_.transformers().ToString());
  out_.set_accelerate_version(versions_.accelerate().ToString());
  auto from = [](bool given, bool detected) {
    return given ? v1::PROVENANCE_GIVEN : detected ? v1::PROVENANCE_DETECTED : v1::PROVENANCE_DEFAULT;
  };
  out_.set_transformers_version_from(from(!req_.transformers_version().empty(), versions_.transformers_detected()));
  out_.set_accelerate_version_from(from(!req_.accelerate_version().empty(), versions_.accelerate_detected()));
  out_.set_runtime_backends_from(runtime_from_);
  for (const std::string& r : runtime_list_) out_.add_runtime_backends(r);
  if (versions_.transformers_job()) out_.set_transformers_job_version(versions_.transformers_job()->ToString());
  if (versions_.accelerate_job()) out_.set_accelerate_job_version(versions_.accelerate_job()->ToString());
  out_.set_transformers_newer_than_rules(versions_.transformers_newer());
  out_.set_accelerate_newer_than_rules(versions_.accelerate_newer());
  return absl::OkStatus();
}

// ---- availability (P4, P5) ---------------------------------------------------------------

bool Resolution::RuntimeHas(const v1::Backend& b) const {
  if (runtime_.empty()) return true;
  const BackendSpec* spec = FindBackend(b.row());
  if (spec != nullptr && runtime_.count(std::string(spec->runtime_backend))) return true;
  // "cuda" (torch.cuda available) also drives AMD GPUs when there is no NVIDIA row to prefer.
  return b.row() == v1::ROW_CUDA_AMD && runtime_.count("cuda") && !HasRow(v1::ROW_CUDA_NVIDIA);
}

bool Resolution::HasRow(v1::Row row) const {
  return std::any_of(inv_.backends().begin(), inv_.backends().end(),
                     [&](const v1::Backend& b) { return b.row() == row; });
}

absl::Status Resolution::ComputeRows() {
  const v1::JobDevices* job = req_.has_job_devices() ? &req_.job_devices() : nullptr;
  // P-DRA: the devices Kubernetes allocated to the job.
  std::optional<JobAllocation> allocation;
  if (req_.has_device_allocation()) {
    ASSIGN_OR_RETURN(allocation, MatchAllocation(inv_, req_.device_allocation()));
    for (const std::string& e : allocation->explanation) out_.add_explanation(e);
    for (const std::string& w : allocation->unmatched) {
      out_.add_warnings(w);
      hazards_.push_back(w);
    }
  }
  for (const v1::Backend& b : inv_.backends()) {
    if (b.row() == v1::ROW_CPU) {
      cpu_ = &b;
      continue;
    }
    RowState r;
    r.backend = &b;
    // T-XLA-NEURON: under torchrun torch_xla rewrites NEURON_RT_VISIBLE_CORES at import, before the Neuron
    // runtime reads it, so the NeuronCores the process sees follow the value it leaves.
    if (b.row() == v1::ROW_NEURON && NeuronOnXlaTorchrun()) {
      placement::Env unmasked = req_.env();
      unmasked.erase("NEURON_RT_VISIBLE_CORES");
      unmasked.erase("NEURON_RT_NUM_CORES");
      ASSIGN_OR_RETURN(RowVisibility all, ComputeVisibility(b, unmasked, job, allocation ? &*allocation : nullptr));
      ASSIGN_OR_RETURN(std::optional<std::string> cores, TorchXlaNeuronCores(static_cast<int>(all.units.size())));
      if (cores) {
        placement::Env remapped = req_.env();
        remapped["NEURON_RT_VISIBLE_CORES"] = *cores;
        ASSIGN_OR_RETURN(r.vis, ComputeVisibility(b, remapped, job, allocation ? &*allocation : nullptr));
      } else {
        ASSIGN_OR_RETURN(r.vis, ComputeVisibility(b, req_.env(), job, allocation ? &*allocation : nullptr));
      }
    } else {
      ASSIGN_OR_RETURN(r.vis, ComputeVisibility(b, req_.env(), job, allocation ? &*allocation : nullptr));
    }
    for (const std::string& e : r.vis.explanation) out_.add_explanation(e);
    for (const std::string& w : r.vis.warnings) out_.add_warnings(w);
    const auto supported = std::find_if(r.vis.units.begin(), r.vis.units.end(),
                                        [](const VisibleUnit& u) { return u.device->supported(); });
    if (r.vis.units.empty()) {
      r.reason = r.vis.hidden_reason;
      r.hazard = r.vis.hidden != Hidden::kMaskEmpty && r.vis.hidden != Hidden::kAllocation;
    } else if (supported == r.vis.units.end()) {
      // Hardware the row's PyTorch backend does not support is not a job misconfiguration.
      r.reason = absl::StrCat(b.hardware(), " present but no device the job sees is a PyTorch ", b.device_type(),
                              " target: ", r.vis.units.front().device->unusable_reason());
    } else if (!RuntimeHas(b) && b.row() == v1::ROW_TPU && runtime_.count("xla")) {
      r.reason = "Google TPU is driven through torch_xla here (runtime_backends has xla, not tpu): the job uses it as "
                 "xla / xla:0; the native tpu device needs torch-tpu";
    } else if (!RuntimeHas(b)) {
      r.reason = absl::StrCat(b.hardware(), " present but the job's PyTorch has no ", b.device_type(),
                              " backend (runtime_backends", runtime_from_ == v1::PROVENANCE_DETECTED ? " detected" : "",
                              ": ", absl::StrJoin(runtime_list_, ", "), "): ",
                              FindBackend(b.row())->install_hint);
      r.hazard = true;
    } else {
      r.available = true;
    }
    rows_.push_back(std::move(r));
  }
  // Both GPU rows map to `cuda`; one PyTorch build drives only one of them.
  RowState* nv = FindRow(v1::ROW_CUDA_NVIDIA);
  RowState* amd = FindRow(v1::ROW_CUDA_AMD);
  if (nv && amd && nv->available && amd->available) {
    amd->available = false;
    amd->reason = "NVIDIA and AMD GPUs are both usable, but one PyTorch build drives only one of them as `cuda`: "
                  "assuming a CUDA build (pass runtime_backends [\"rocm\"] for a ROCm build)";
  }
  std::vector<std::string> avail;
  for (const RowState& r : rows_) {
    if (r.available) avail.push_back(absl::StrCat(r.backend->name(), " (", r.vis.units.size(), " visible)"));
  }
  out_.add_explanation(absl::StrCat("P4 available to the job: ", avail.empty() ? "no accelerator row" : absl::StrJoin(avail, ", "),
                                    "; cpu is always available"));
  // P5: present-but-unusable rows are explained, never hidden.
  for (const RowState& r : rows_) {
    if (!r.available) out_.add_warnings(r.reason);
  }
  return absl::OkStatus();
}

RowState* Resolution::FindRow(v1::Row row) {
  for (RowState& r : rows_) if (r.backend->row() == row) return &r;
  return nullptr;
}

const RowState* Resolution::FirstAvailable(const std::vector<std::string>& order) const {
  for (const std::string& type : order) {
    for (const RowState& r : rows_) {
      if (r.available && r.backend->device_type() == type) return &r;
    }
  }
  return nullptr;
}

const RowState* Resolution::FirstAvailable(const OrderRule& rule) {
  for (const std::string& type : rule.order) {
    if (type == "xpu" && !SeesXpu(rule.library)) continue;
    for (const RowState& r : rows_) {
      if (r.available && r.backend->device_type() == type) return &r;
    }
  }
  return nullptr;
}

// V-ACC-XPU-STOCK, V-TF-XPU-STOCK: before them the library sees an Intel GPU only through Intel
// Extension for PyTorch. The job's packages (job_environment with torch) decide; not told: the
// XPU counts, as on a newer release, with a warning.
bool Resolution::SeesXpu(Library lib) {
  const Feature f = lib == Library::kAccelerate ? Feature::kAccStockXpu : Feature::kTfStockXpu;
  if (versions_.Has(f)) return true;
  const RowState* xpu = FirstAvailable(std::vector<std::string>{"xpu"});
  if (xpu == nullptr) return true;  // nothing to decide
  const bool known = job_ && job_->torch;
  const bool ipex = known && job_->ipex && !absl::StrContains(absl::AsciiStrToLower(*job_->ipex), "+cpu");
  if (xpu_said_.insert(lib).second) {
    const std::string who = absl::StrCat(LibraryName(lib), " ", (lib == Library::kAccelerate ? versions_.accelerate()
                                                                                              : versions_.transformers()).ToString());
    if (!known) {
      out_.add_warnings(absl::StrCat(
          who, " sees an Intel GPU only through Intel Extension for PyTorch (", versions_.Rule(f).id,
          "); the job's packages are not known, so devplace counts ", xpu->backend->name(),
          " as if intel_extension_for_pytorch were installed; without it the job does not use the GPU (send the job's "
          "packages: the Python client does, devplace resolve --python_env / --python)"));
    } else {
      out_.add_explanation(absl::StrCat(
          "V-JOB ", versions_.Cite(f), "; the job has ",
          ipex ? absl::StrCat("intel_extension_for_pytorch ", *job_->ipex, ": ", who, " uses ", xpu->backend->name())
               : absl::StrCat(job_->ipex ? absl::StrCat("only the CPU variant of intel_extension_for_pytorch (",
                                                          *job_->ipex, ")")
                                         : std::string("no intel_extension_for_pytorch"),
                              ": ", who, " does not see ", xpu->backend->name())));
    }
  }
  return !known || ipex;
}

// ---- answer building ---------------------------------------------------------------------

// Keeps the answer bounded on big hosts: `devices` and `max_memory`, what the job
// needs, keep every device; `placed`, host identity for people and schedulers, keeps the first
// kMaxPlacedDevices, and one explanation line says how many more there are.
// Place() builds only the first kMaxPlacedDevices entries (the rest go to a scratch entry, for
// their warnings), so a 256-device answer costs 16 entries, not 256 built and 240 dropped.
void Resolution::BoundPlaced() {
  if (placed_total_ <= kMaxPlacedDevices) return;
  out_.add_explanation(absl::StrCat("P-BOUND placed lists the first ", kMaxPlacedDevices, " of the ", placed_total_,
                                    " devices used (devices and max_memory name all of them); the host device of "
                                    "each later one is not in this answer: apply the job's visibility variables to "
                                    "GetInventory's devices"));
}

// The memory the job sees on `u`, in bytes: the MIG instance's when one is named; none when MIG
// is on and none is named (CUDA gives the job one instance, whose memory is not the GPU's: no
// figure is better than a wrong one, and max_memory is then left empty); else the device's,
// split evenly over its sub-devices when `u` is one.
void Resolution::UnitMemory(const VisibleUnit& u, std::optional<uint64_t>& total, std::optional<uint64_t>& free) {
  total.reset();
  free.reset();
  if (u.partition != nullptr) {
    if (u.partition->has_memory_total_bytes()) total = u.partition->memory_total_bytes();
    if (u.partition->has_memory_free_bytes()) free = u.partition->memory_free_bytes();
    return;
  }
  if (u.device->partitions_size() > 0) return;
  const uint64_t parts = u.sub_device >= 0 && u.device->sub_device_count() > 1 ? u.device->sub_device_count() : 1;
  if (u.device->has_memory_total_bytes()) total = u.device->memory_total_bytes() / parts;
  if (u.device->has_memory_free_bytes()) free = u.device->memory_free_bytes() / parts;
}

v1::PlacedDevice* Resolution::Place(const RowState& r, int job_index) {
  const VisibleUnit& u = r.vis.units[job_index];
  used_[&r].insert(job_index);
  const bool indexed = r.backend->row() != v1::ROW_MPS;
  const bool listed = ++placed_total_ <= kMaxPlacedDevices;
  v1::PlacedDevice* p = listed ? out_.add_placed() : &beyond_;
  if (!listed) beyond_.Clear();  // past the bound only the device string is needed, for a warning
  p->set_device(indexed ? absl::StrCat(r.backend->device_type(), ":", job_index) : r.backend->device_type());
  if (listed) {
    p->set_job_index(indexed ? job_index : -1);
    p->set_host_index(static_cast<int>(u.device->host_index()));
    p->set_pci_bus_id(u.device->pci_bus_id());
    p->set_uuid(u.device->uuid());
    p->set_name(u.device->name());
    p->set_sub_device(u.sub_device);
    std::optional<uint64_t> total, free;
    UnitMemory(u, total, free);
    if (total) p->set_memory_total_bytes(*total);
    if (free) p->set_memory_free_bytes(*free);
    if (u.partition != nullptr) p->set_partition_uuid(u.partition->uuid());  // the job sees this MIG instance
  }
  if (!u.device->supported()) {
    const BackendSpec* spec = FindBackend(r.backend->row());
    const std::string w = absl::StrCat(
        p->device(), " is ", DescribeUnit(u), ", which the runtime enumerates but PyTorch does not support (",
        u.device->unusable_reason(), "): hide it from the job",
        spec->mask_variables.empty() ? "" : absl::StrCat(" with ", spec->mask_variables.front()));
    out_.add_warnings(w);
    hazards_.push_back(w);
  }
  if (u.device->health() == v1::HEALTH_FAULT) FaultWarning(r, *p, u);
  return p;
}

// H-HEALTH: the answer uses a device in HEALTH_FAULT, which the job's runtime still enumerates.
void Resolution::FaultWarning(const RowState& r, const v1::PlacedDevice& p, const VisibleUnit& u) {
  const BackendSpec* spec = FindBackend(r.backend->row());
  // The fix: the job's other devices, by UUID where cuda/nvidia has them all (CUDA takes them in
  // any order, whatever the numbering), else a pick.
  std::vector<std::string> others;
  bool by_uuid = r.backend->row() == v1::ROW_CUDA_NVIDIA;
  bool any_other = false;
  for (const VisibleUnit& o : r.vis.units) {
    if (o.device == u.device || !HealthUsable(o.device->health())) continue;
    any_other = true;
    by_uuid = by_uuid && !o.device->uuid().empty() && o.partition == nullptr;
    if (o.device->uuid().empty() || std::find(others.begin(), others.end(), o.device->uuid()) != others.end()) continue;
    others.push_back(o.device->uuid());
  }
  std::string fix = "run the job under devplace run (or eval \"$(devplace pick)\"), which never hands out a FAULT device";
  if (!any_other) {
    // Nothing the job sees is usable: a mask can only leave the device out by naming another one.
    fix = absl::StrCat("no other ", r.backend->name(), " device the job sees is usable",
                       spec->mask_variables.empty()
                           ? ""
                           : absl::StrCat(", so give it another one in ", spec->mask_variables.front()),
                       ": ", fix, " (it chooses among the devices the job may use)");
  } else if (by_uuid && !others.empty()) {
    fix = absl::StrCat("leave it out with CUDA_VISIBLE_DEVICES=", absl::StrJoin(others, ","), ", or ", fix);
  } else if (!spec->mask_variables.empty()) {
    fix = absl::StrCat("leave it out with ", spec->mask_variables.front(), " listing the job's other devices, or ", fix);
  }
  const std::string w = absl::StrCat("H-HEALTH ", p.device(), " is ", DescribeUnit(u), ", whose health is FAULT (",
                                     HealthWhy(*u.device), "), and the job's runtime still uses it: ", fix);
  out_.add_warnings(w);
  hazards_.push_back(w);
}

void Resolution::Answer(const RowState& r, const std::string& device) {
  out_.set_device(device);
  out_.set_backend(r.backend->row());
  out_.set_package(r.backend->package());
  out_.add_devices(device);
}

void Resolution::AnswerCpu(const std::string& why) {
  out_.set_device("cpu");
  out_.set_backend(v1::ROW_CPU);
  out_.set_package(cpu_ != nullptr ? cpu_->package() : "torch");
  out_.add_devices("cpu");
  out_.add_explanation(why);
}

std::string Resolution::Visible(const RowState& r) const {
  std::vector<std::string> v;
  for (size_t i = 0; i < r.vis.units.size(); ++i) {
    v.push_back(absl::StrCat(r.backend->device_type(), ":", i, " (", DescribeUnit(r.vis.units[i]), ")"));
  }
  return v.empty() ? "none" : absl::StrJoin(v, ", ");
}

}  // namespace resolver_internal

using resolver_internal::Resolution;

absl::StatusOr<v1::ResolveDeviceResponse> Resolve(const v1::Inventory& inventory,
                                                  const v1::ResolveDeviceRequest& request) {
  v1::ResolveDeviceResponse out;
  if (absl::Status s = Resolution(inventory, request, &out).Run(); !s.ok()) return s;
  return out;
}

absl::Status ResolveSerialized(const v1::Inventory& inventory, const v1::ResolveDeviceRequest& request,
                               std::string* bytes, std::vector<NewerLibrary>* newer) {
  // Every string, list and map entry of the answer comes from one arena, freed at once: on a big
  // host the answer is hundreds of small allocations otherwise (a profile showed over half of
  // the resolver's time in malloc/free).
  google::protobuf::ArenaOptions options;
  options.start_block_size = 8 << 10;
  options.max_block_size = 64 << 10;
  google::protobuf::Arena arena(options);
  auto* out = google::protobuf::Arena::CreateMessage<v1::ResolveDeviceResponse>(&arena);
  Resolution resolution(inventory, request, out);
  if (absl::Status s = resolution.Run(); !s.ok()) return s;
  bytes->clear();
  out->SerializeToString(bytes);
  if (newer != nullptr) {
    newer->clear();
    const LibraryVersions& v = resolution.versions();
    if (v.transformers_newer()) newer->push_back({Library::kTransformers, *v.transformers_job()});
    if (v.accelerate_newer()) newer->push_back({Library::kAccelerate, *v.accelerate_job()});
  }
  return absl::OkStatus();
}

}  // namespace devplace::placement
