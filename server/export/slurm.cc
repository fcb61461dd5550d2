#include "server/export/slurm.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
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

// The value of `var` that makes exactly `wanted` visible: every id (0..255) whose devices all lie
// in `wanted`, ascending; checked by ComputeVisibility. Empty `wanted`: the value that hides all.
absl::StatusOr<std::string> MaskValue(const v1::Backend& backend, const placement::Env& env, const std::string& var,
                                      const std::set<const v1::Device*>& wanted, const v1::JobDevices* job_devices) {
  std::vector<int> ids;
  if (!wanted.empty()) {
    for (int id = 0; id < 256; ++id) {
      absl::StatusOr<std::set<const v1::Device*>> seen = DevicesUnder(backend, env, var, absl::StrCat(id), job_devices);
      if (!seen.ok() || seen->empty()) continue;
      if (std::includes(wanted.begin(), wanted.end(), seen->begin(), seen->end())) ids.push_back(id);
    }
  }
  const std::string value = absl::StrJoin(ids, ",");
  absl::StatusOr<std::set<const v1::Device*>> check = DevicesUnder(backend, env, var, value, job_devices);
  if (!check.ok() || *check != wanted) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no value of ", var, " selects exactly the ", wanted.size(), " ", backend.hardware(),
        " device(s) Slurm allocated to this step", wanted.empty() ? " (none)" : "",
        " as this job numbers them; refusing to widen the allocation"));
  }
  return value;
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
      int n = -1;
      if (!absl::SimpleAtoi(e, &n) || n < 0) {
        return absl::InvalidArgumentError(absl::StrCat(alloc_var, "='", *alloc, "': entry '", e,
                                                       "' is not a GPU number (accepted: comma list of numbers)"));
      }
      std::vector<const GresDevice*> hits;
      for (size_t i = 0; i < devices.size(); ++i) {
        if (numbering == StepNumbering::kIndex ? static_cast<int>(i) == n : devices[i].dev_num == n) hits.push_back(&devices[i]);
      }
      if (hits.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            alloc_var, "='", *alloc, "': ", n, hits.empty() ? " names no" : " names more than one",
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
      absl::StatusOr<std::string> value;
      std::string var;
      for (absl::string_view candidate : spec->mask_variables) {
        var = std::string(candidate);
        value = MaskValue(b, job_env, var, wanted, job_devices);
        if (value.ok()) break;
      }
      if (!value.ok()) return value.status();
      job_env[var] = *value;
      out.emplace_back(var, *value);
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
  for (const auto& [to, from] : {std::pair{"LOCAL_RANK", "SLURM_LOCALID"}, std::pair{"WORLD_SIZE", "SLURM_NTASKS"}}) {
    if (get(to) == nullptr && get(from) != nullptr) out.emplace_back(to, *get(from));
  }
  return out;
}

}  // namespace devplace::slurm
