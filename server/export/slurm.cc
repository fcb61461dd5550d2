#include "server/export/slurm.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/placement/backends.h"
#include "server/placement/visibility.h"

namespace devplace::slurm {
namespace {

// Slurm's env flag for a row whose mask variable its gpu plugin sets; "" for the others.
absl::string_view SlurmEnvFlag(v1::Row row) {
  switch (row) {
    case v1::ROW_CUDA_NVIDIA: return "nvidia_gpu_env";
    case v1::ROW_CUDA_AMD: return "amd_gpu_env";
    case v1::ROW_XPU: return "intel_gpu_env";
    default: return "";
  }
}

// The number Slurm parses from the end of a device file's name.
int TrailingNumber(absl::string_view path) {
  size_t i = path.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(path[i - 1]))) --i;
  int n = -1;
  if (i == path.size() || !absl::SimpleAtoi(path.substr(i, 9), &n)) return -1;
  return n;
}

// The devices of `backend` the runtime numbers, in its order with no mask set; devices the
// unmasked view leaves out although the runtime enumerates them (the GPUs after the first when MIG
// is on: CUDA then shows one instance, E-MIG) follow in host order.
std::vector<const v1::Device*> RuntimeOrder(const v1::Backend& backend) {
  std::vector<const v1::Device*> out;
  absl::StatusOr<placement::RowVisibility> vis = placement::ComputeVisibility(backend, placement::Env(), nullptr);
  if (vis.ok()) {
    for (const placement::VisibleUnit& u : vis->units) {
      if (std::find(out.begin(), out.end(), u.device) == out.end()) out.push_back(u.device);
    }
  }
  for (const v1::Device& d : backend.devices()) {
    if (placement::RuntimeEnumerates(d) && std::find(out.begin(), out.end(), &d) == out.end()) out.push_back(&d);
  }
  return out;
}

std::string TypeOf(const v1::Device& d, const placement::BackendSpec& spec) {
  std::string type = SanitizeGresType(d.name());
  if (type.empty()) type = SanitizeGresType(absl::StrCat(spec.runtime_backend, "_", d.device_id()));
  return type;
}

std::string CoresOf(const v1::Inventory& inv, const v1::Device& d) {
  const v1::Cpu& cpu = inv.host().cpu();
  if (d.numa_node() < 0 || cpu.threads() == 0 || cpu.threads() != cpu.cores()) return "";
  for (const v1::NumaNode& n : inv.host().numa_nodes()) {
    if (static_cast<int>(n.id()) == d.numa_node()) return n.cpulist();
  }
  return "";
}

// The row's devices the job sees under `env`, or the rules' error.
absl::StatusOr<std::set<const v1::Device*>> VisibleDevices(const v1::Backend& backend, const placement::Env& env,
                                                          const v1::JobDevices* job_devices) {
  absl::StatusOr<placement::RowVisibility> vis = placement::ComputeVisibility(backend, env, job_devices);
  if (!vis.ok()) return vis.status();
  std::set<const v1::Device*> out;
  for (const placement::VisibleUnit& u : vis->units) out.insert(u.device);
  return out;
}

// The same with `var` set to `value`.
absl::StatusOr<std::set<const v1::Device*>> DevicesUnder(const v1::Backend& backend, placement::Env env,
                                                        const std::string& var, const std::string& value,
                                                        const v1::JobDevices* job_devices) {
  env[var] = value;
  return VisibleDevices(backend, env, job_devices);
}

// The closest value of `var` to `wanted`: every id (0..255) whose devices all lie in `wanted`,
// ascending (empty `wanted`: the value that hides all), and what the job sees under it
// (ComputeVisibility); `exact` when that is `wanted`.
struct MaskTry {
  std::string value;
  absl::StatusOr<std::set<const v1::Device*>> shown;
  bool exact = false;
};
MaskTry TryMask(const v1::Backend& backend, const placement::Env& env, const std::string& var,
                const std::set<const v1::Device*>& wanted, const v1::JobDevices* job_devices) {
  std::vector<int> ids;
  if (!wanted.empty()) {
    for (int id = 0; id < 256; ++id) {
      absl::StatusOr<std::set<const v1::Device*>> seen = DevicesUnder(backend, env, var, absl::StrCat(id), job_devices);
      if (!seen.ok() || seen->empty()) continue;
      if (std::includes(wanted.begin(), wanted.end(), seen->begin(), seen->end())) ids.push_back(id);
    }
  }
  MaskTry out;
  out.value = absl::StrJoin(ids, ",");
  out.shown = DevicesUnder(backend, env, var, out.value, job_devices);
  out.exact = out.shown.ok() && *out.shown == wanted;
  return out;
}

// "host #1 (/dev/nvidia1)": a device as the messages name it.
std::string Named(const v1::Device& d) {
  return absl::StrCat("host #", d.host_index(), d.device_nodes().empty() ? "" : absl::StrCat(" (", d.device_nodes(0), ")"));
}
// The devices in host order (a set of pointers is in address order).
std::vector<const v1::Device*> InHostOrder(const std::set<const v1::Device*>& devices) {
  std::vector<const v1::Device*> out(devices.begin(), devices.end());
  std::sort(out.begin(), out.end(), [](const v1::Device* a, const v1::Device* b) { return a->host_index() < b->host_index(); });
  return out;
}
std::string Named(const std::set<const v1::Device*>& devices) {
  if (devices.empty()) return "none";
  return absl::StrJoin(InHostOrder(devices), ", ", [](std::string* o, const v1::Device* d) { absl::StrAppend(o, Named(*d)); });
}

// "shows <what the job sees under the tried value>", or "is not accepted: <why>".
std::string Shown(const MaskTry& t) {
  return t.shown.ok() ? absl::StrCat("shows ", Named(*t.shown)) : absl::StrCat("is not accepted: ", t.shown.status().message());
}

// Whether the task can open one of the device's nodes (P1: job_devices lists it; unknown, nullptr: yes).
bool TaskOpens(const v1::Device& d, const v1::JobDevices* job_devices) {
  if (job_devices == nullptr) return true;
  const auto& listed = job_devices->device_nodes();
  return std::any_of(d.device_nodes().begin(), d.device_nodes().end(), [&](const std::string& n) {
    return std::find(listed.begin(), listed.end(), n) != listed.end();
  });
}

// Why no value of the row's variables selects exactly `wanted` (FAILED_PRECONDITION): device nodes
// the task cannot open (no mask shows a device whose node is missing from its /dev), a mask that no
// value makes exact in the job's numbering (the ones it can open, selected, show other devices),
// or both. Only the row's first variable is named: it is the one the job's runtime reads first.
absl::Status NoExactMask(const v1::Backend& backend, const placement::BackendSpec& spec, const placement::Env& env,
                         const std::set<const v1::Device*>& wanted, const v1::JobDevices* job_devices) {
  std::set<const v1::Device*> unopened, opened;
  for (const v1::Device* d : wanted) (TaskOpens(*d, job_devices) ? opened : unopened).insert(d);
  bool opened_exact = false;
  MaskTry closest;
  for (absl::string_view candidate : spec.mask_variables) {
    MaskTry t = TryMask(backend, env, std::string(candidate), opened, job_devices);
    if (candidate == spec.mask_variables.front()) closest = t;
    if (t.exact) {
      opened_exact = true;
      break;
    }
  }
  const absl::string_view var = spec.mask_variables.front();
  if (wanted.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Slurm allocated no ", backend.hardware(), " device to this step, but no value of ", var, " hides the row's ",
        backend.devices_size(), " device(s) (", var, "=", closest.value, " ", Shown(closest),
        "); refusing to widen the allocation"));
  }
  std::string why = absl::StrCat("Slurm allocated ", wanted.size(), " ", backend.hardware(), " device(s) to this step (",
                                 Named(wanted), "), but ");
  if (!unopened.empty()) {
    std::vector<std::string> nodes;
    for (const v1::Device* d : InHostOrder(unopened)) nodes.insert(nodes.end(), d->device_nodes().begin(), d->device_nodes().end());
    absl::StrAppend(&why, "the task cannot open the device node of ", unopened.size(), " of them (",
                    absl::StrJoin(nodes, ", "), " not in its /dev: the step's cgroup or container does not give it",
                    " those nodes; with ConstrainDevices=yes, gres.conf's File= must name them), and no value of ",
                    var, " shows a device whose node the task cannot open");
  }
  if (!opened_exact) {
    absl::StrAppend(&why, unopened.empty() ? "" : "; and ", "no value of ", var, " selects exactly ",
                    unopened.empty() ? "them" : absl::StrCat("the ", opened.size(), " it can open"),
                    " as the job numbers them (the closest, ", var, "=", closest.value, ", ", Shown(closest), ")");
  }
  return absl::FailedPreconditionError(absl::StrCat(why, "; refusing to widen the allocation"));
}

// Slurm's numbers (task ids, counts, GPU numbers): decimal digits only (no sign, no spaces, no
// newline), at most 10 of them, within [min, max].
std::optional<int64_t> SlurmNumber(absl::string_view text, int64_t min, int64_t max) {
  if (text.empty() || text.size() > 10 || !std::all_of(text.begin(), text.end(), absl::ascii_isdigit)) return std::nullopt;
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < min || n > max) return std::nullopt;
  return n;
}

// A variable's value in a message: C-escaped (a newline shows as \n), cut to 64 bytes.
std::string Quoted(absl::string_view value) {
  constexpr size_t kMax = 64;
  return absl::StrCat("'", absl::CHexEscape(value.substr(0, kMax)), value.size() > kMax ? "'..." : "'");
}

}  // namespace

absl::StatusOr<GresNaming> ParseGresNaming(absl::string_view text) {
  if (text == "gpu") return GresNaming::kGpu;
  if (text == "per-row") return GresNaming::kPerRow;
  return absl::InvalidArgumentError(absl::StrCat("--name='", text, "': accepted forms: gpu, per-row"));
}

absl::StatusOr<StepNumbering> ParseStepNumbering(absl::string_view text) {
  if (text == "dev_num") return StepNumbering::kDevNum;
  if (text == "index") return StepNumbering::kIndex;
  return absl::InvalidArgumentError(absl::StrCat("--step_numbering='", text, "': accepted forms: dev_num, index"));
}

std::string SanitizeGresType(absl::string_view text) {
  std::string out;
  for (char c : text) {
    const char l = absl::ascii_tolower(static_cast<unsigned char>(c));
    if (absl::ascii_isalnum(static_cast<unsigned char>(l)) && static_cast<unsigned char>(c) < 0x80) {
      out.push_back(l);
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  if (out.size() > 64) out.resize(64);
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::vector<GresDevice> GresDevices(const v1::Inventory& inventory, GresNaming naming) {
  std::vector<GresDevice> out;
  for (const v1::Backend& b : inventory.backends()) {
    const placement::BackendSpec* spec = placement::FindBackend(b.row());
    if (spec == nullptr || b.row() == v1::ROW_CPU) continue;
    for (const v1::Device* d : RuntimeOrder(b)) {
      if (d->device_nodes().empty()) continue;
      GresDevice g;
      g.backend = &b;
      g.device = d;
      g.name = naming == GresNaming::kGpu ? "gpu" : std::string(spec->runtime_backend);
      g.type = TypeOf(*d, *spec);
      g.files.assign(d->device_nodes().begin(), d->device_nodes().end());
      g.cores = CoresOf(inventory, *d);
      g.dev_num = TrailingNumber(g.files.back());
      out.push_back(std::move(g));
    }
  }
  // Env flags: Slurm ORs a node's gpu records' flags, so only a node whose gpu records are all one
  // row with a Slurm variable keeps that row's flag.
  std::set<v1::Row> gpu_rows;
  for (const GresDevice& g : out) {
    if (g.name == "gpu") gpu_rows.insert(g.backend->row());
  }
  for (GresDevice& g : out) {
    if (g.name != "gpu") continue;
    const absl::string_view flag = SlurmEnvFlag(g.backend->row());
    g.flags = gpu_rows.size() == 1 && !flag.empty() ? std::string(flag) : "no_gpu_env";
  }
  return out;
}

std::string GresTypes(const std::vector<GresDevice>& devices) {
  std::vector<std::string> names;
  for (const GresDevice& g : devices) {
    if (std::find(names.begin(), names.end(), g.name) == names.end()) names.push_back(g.name);
  }
  return absl::StrJoin(names, ",");
}

std::string NodeGres(const std::vector<GresDevice>& devices) {
  std::vector<std::pair<std::string, int>> counts;
  for (const GresDevice& g : devices) {
    const std::string key = absl::StrCat(g.name, ":", g.type);
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == key; });
    if (it == counts.end()) {
      counts.emplace_back(key, 1);
    } else {
      ++it->second;
    }
  }
  return absl::StrJoin(counts, ",", [](std::string* o, const auto& c) { absl::StrAppend(o, c.first, ":", c.second); });
}

std::string GresConfText(const v1::Inventory& inventory, GresNaming naming) {
  const std::vector<GresDevice> devices = GresDevices(inventory, naming);
  std::string out = absl::StrCat("# gres.conf for ", inventory.host().hostname(),
                                 ", written by `devplace slurm gres` from inventory revision ", inventory.revision(), "\n");
  if (devices.empty()) {
    absl::StrAppend(&out, "# no accelerator with device nodes: nothing for Slurm to schedule\n");
    return out;
  }
  absl::StrAppend(&out, "# slurm.conf: GresTypes=", GresTypes(devices), "\n");
  absl::StrAppend(&out, "# slurm.conf: NodeName=", inventory.host().hostname(), " Gres=", NodeGres(devices), "\n");
  std::set<int> dev_nums;
  for (const GresDevice& g : devices) {
    if (g.name == "gpu" && !dev_nums.insert(g.dev_num).second) {
      absl::StrAppend(&out, "# warning: two gpu files end in the number ", g.dev_num,
                      ": Slurm 22.05's SLURM_STEP_GPUS cannot tell them apart (the task prolog then needs",
                      " --step_numbering=index, current releases)\n");
      break;
    }
  }
  for (const v1::Backend& b : inventory.backends()) {
    const placement::BackendSpec* spec = placement::FindBackend(b.row());
    if (spec == nullptr || b.row() == v1::ROW_CPU || b.devices().empty()) continue;
    std::vector<const GresDevice*> rows;
    for (const GresDevice& g : devices) {
      if (g.backend == &b) rows.push_back(&g);
    }
    absl::StrAppend(&out, "\n# ", spec->name, " (", spec->hardware, "): ", rows.size(), " of ", b.devices_size(),
                    " device(s); the job's mask variable is ", spec->mask_variables.front(), "\n");
    if (rows.size() < static_cast<size_t>(b.devices_size())) {
      absl::StrAppend(&out, "#   left out: devices the runtime would not number or without device nodes",
                      " (see `devplace inventory`)\n");
    }
    std::vector<std::string> control;
    for (absl::string_view p : spec->device_node_patterns) {
      if (absl::ConsumeSuffix(&p, " (control)")) control.emplace_back(p);
    }
    if (!control.empty()) {
      absl::StrAppend(&out, "#   every job of this row also opens ", absl::StrJoin(control, ", "),
                      " (not a GRES: allow it to all jobs when ConstrainDevices=yes)\n");
    }
    if (!rows.empty() && rows.front()->name == "gpu" && rows.front()->flags == "no_gpu_env") {
      absl::StrAppend(&out, "#   Slurm sets no ", spec->mask_variables.front(),
                      " for these records: install `devplace slurm task-prolog` as TaskProlog\n");
    } else if (!rows.empty() && rows.front()->name != "gpu") {
      absl::StrAppend(&out, "#   Name=", rows.front()->name,
                      " has no Slurm plugin: the step is told nothing (the prolog needs --name=gpu)\n");
    }
    if (!rows.empty() && rows.front()->cores.empty() && rows.front()->device->numa_node() >= 0) {
      absl::StrAppend(&out, "#   no Cores=: the host has SMT, and Slurm's logical core indices are not its CPU numbers\n");
    }
    for (const GresDevice* g : rows) {
      absl::StrAppend(&out, "Name=", g->name, " Type=", g->type, g->files.size() == 1 ? " File=" : " MultipleFiles=",
                      absl::StrJoin(g->files, ","));
      if (!g->cores.empty()) absl::StrAppend(&out, " Cores=", g->cores);
      if (!g->flags.empty()) absl::StrAppend(&out, " Flags=", g->flags);
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

absl::StatusOr<Exports> TaskPrologExports(const v1::Inventory& inventory, const std::map<std::string, std::string>& env,
                                          const v1::JobDevices* job_devices, StepNumbering numbering) {
  Exports out;
  const auto get = [&](const char* k) -> const std::string* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : &it->second;
  };
  const char* alloc_var = get("SLURM_STEP_GPUS") != nullptr ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS";
  if (const std::string* alloc = get(alloc_var)) {
    const std::vector<GresDevice> devices = GresDevices(inventory, GresNaming::kGpu);
    std::set<const v1::Device*> allocated;
    for (absl::string_view e : absl::StrSplit(*alloc, ',', absl::SkipEmpty())) {
      const std::optional<int64_t> number = SlurmNumber(e, 0, INT32_MAX);
      if (!number) {
        return absl::InvalidArgumentError(absl::StrCat(alloc_var, "=", Quoted(*alloc), ": entry ", Quoted(e),
                                                       " is not a GPU number (accepted: comma list of numbers)"));
      }
      const int n = static_cast<int>(*number);
      std::vector<const GresDevice*> hits;
      for (size_t i = 0; i < devices.size(); ++i) {
        if (numbering == StepNumbering::kIndex ? static_cast<int>(i) == n : devices[i].dev_num == n) hits.push_back(&devices[i]);
      }
      if (hits.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            alloc_var, "=", Quoted(*alloc), ": ", n, hits.empty() ? " names no" : " names more than one",
            " gpu record of `devplace slurm gres` on this host (numbering ",
            numbering == StepNumbering::kIndex ? "index" : "dev_num", ")"));
      }
      allocated.insert(hits.front()->device);
    }
    // Rows in table order, each seeing the exports of the rows before it (CUDA_VISIBLE_DEVICES
    // hides an NVIDIA row and is also HIP's fallback): the row's first variable that selects
    // exactly its allocation, then every row checked again under the final environment.
    placement::Env job_env;
    for (const auto& [k, v] : env) job_env[k] = v;
    std::vector<std::pair<const v1::Backend*, std::set<const v1::Device*>>> rows;
    for (const v1::Backend& b : inventory.backends()) {
      const placement::BackendSpec* spec = placement::FindBackend(b.row());
      if (spec == nullptr || spec->mask_variables.empty()) continue;
      if (std::none_of(devices.begin(), devices.end(), [&](const GresDevice& g) { return g.backend == &b; })) continue;
      std::set<const v1::Device*> wanted;
      for (const v1::Device& d : b.devices()) {
        if (allocated.count(&d) > 0) wanted.insert(&d);
      }
      MaskTry mask;
      std::string var;
      for (absl::string_view candidate : spec->mask_variables) {
        var = std::string(candidate);
        mask = TryMask(b, job_env, var, wanted, job_devices);
        if (mask.exact) break;
      }
      if (!mask.exact) return NoExactMask(b, *spec, job_env, wanted, job_devices);
      job_env[var] = mask.value;
      out.emplace_back(var, mask.value);
      rows.emplace_back(&b, std::move(wanted));
    }
    for (const auto& [b, wanted] : rows) {
      absl::StatusOr<std::set<const v1::Device*>> seen = VisibleDevices(*b, job_env, job_devices);
      if (!seen.ok() || *seen != wanted) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the variables exported for the other rows change what the ", b->hardware(),
            " row sees; refusing to widen or narrow the allocation"));
      }
    }
  }
  // Ranks: only values checked here are exported (a value printed verbatim could carry a newline
  // and a later `export` line of its own). The daemon's bounds: local_rank 0..2^31-2, below
  // world_size 1..2^31-1 (server/placement/request.cc).
  std::optional<int64_t> rank, size;
  if (get("LOCAL_RANK") == nullptr && get("SLURM_LOCALID") != nullptr) {
    rank = SlurmNumber(*get("SLURM_LOCALID"), 0, INT32_MAX - 1);
    if (!rank) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_LOCALID=", Quoted(*get("SLURM_LOCALID")),
                                                     ": not a task id; accepted: a decimal integer 0..", INT32_MAX - 1));
    }
  }
  if (get("WORLD_SIZE") == nullptr && get("SLURM_NTASKS") != nullptr) {
    size = SlurmNumber(*get("SLURM_NTASKS"), 1, INT32_MAX);
    if (!size) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_NTASKS=", Quoted(*get("SLURM_NTASKS")),
                                                     ": not a task count; accepted: a decimal integer 1..", INT32_MAX));
    }
  }
  if (rank && size && *rank >= *size) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_LOCALID=", *rank, " is not below SLURM_NTASKS=", *size,
                                                   "; accepted: 0..", *size - 1));
  }
  if (rank) out.emplace_back("LOCAL_RANK", absl::StrCat(*rank));
  if (size) out.emplace_back("WORLD_SIZE", absl::StrCat(*size));
  // What is printed cannot override anything: each name once, names [A-Z0-9_], values [0-9,].
  std::set<std::string> names;
  for (const auto& [name, value] : out) {
    const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return absl::ascii_isupper(static_cast<unsigned char>(c)) || absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '_';
    });
    const bool value_ok = std::all_of(value.begin(), value.end(), [](char c) { return absl::ascii_isdigit(c) || c == ','; });
    if (!name_ok || !value_ok || !names.insert(name).second) {
      return absl::InternalError(absl::StrCat("task prolog: refusing to print ", name, "=", Quoted(value),
                                              " (each name once, values digits and commas only)"));
    }
  }
  return out;
}

std::vector<HealthFailure> HealthFailures(const v1::Inventory& inventory) {
  std::vector<HealthFailure> out;
  for (const v1::Backend& backend : inventory.backends()) {
    for (const v1::Device& d : backend.devices()) {
      if (d.health() != v1::HEALTH_FAULT && d.health() != v1::HEALTH_LOST) continue;
      std::vector<std::string> causes;
      for (const v1::HealthCounter& c : d.health_counters()) {
        if (c.effect() == v1::HEALTH_FAULT || c.effect() == v1::HEALTH_LOST) {
          causes.push_back(absl::StrCat(c.name(), " ", c.value(), " (", c.source(), ")"));
        }
      }
      if (causes.empty()) causes.push_back(d.health_reason().empty() ? "no reason given" : d.health_reason());
      const std::string bus = d.pci_bus_id().empty() ? "" : absl::StrCat(" (", d.pci_bus_id(), ")");
      out.push_back({&d, absl::StrCat(placement::RowName(backend.row()), " device ", d.host_index(), bus, " ",
                                      absl::StripPrefix(v1::Health_Name(d.health()), "HEALTH_"), ": ",
                                      absl::StrJoin(causes, "; "))});
    }
  }
  return out;
}

std::string NhcFailureLine(const HealthFailure& failure) {
  return absl::StrCat("ERROR:  devplace:  Health check failed:  ", failure.message);
}

std::string DrainReason(const std::vector<HealthFailure>& failures) {
  std::vector<std::string> messages;
  for (const HealthFailure& f : failures) messages.push_back(f.message);
  std::string reason = absl::StrCat(kDrainReasonPrefix, absl::StrJoin(messages, "; "));
  for (char& c : reason) {
    if (c == '"' || c == '\'' || c == '\\' || absl::ascii_iscntrl(static_cast<unsigned char>(c))) c = '_';
  }
  if (reason.size() > kMaxDrainReasonBytes) {
    // Cut at a character boundary: never inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
    size_t cut = kMaxDrainReasonBytes - 3;
    while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xC0) == 0x80) --cut;
    reason = absl::StrCat(reason.substr(0, cut), "...");
  }
  return reason;
}

}  // namespace devplace::slurm
