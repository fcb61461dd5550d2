// `devplace slurm gres` (the node's gres.conf) and `devplace slurm task-prolog` (Slurm's
// TaskProlog: `export NAME=value` lines for the step), from the daemon's inventory or, with
// --inventory=FILE, from a saved one. The rules are server/export/slurm.h's; docs/SLURM.md says how
// to install them.
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "devplace/client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/export/slurm.h"

extern char** environ;

ABSL_FLAG(std::string, name, "gpu",
          "slurm gres: Name= of the records: gpu (every row as Slurm's gpu GRES, told to the step in "
          "SLURM_STEP_GPUS; what the task prolog needs) or per-row (cuda, rocm, npu, hpu, ...: counted, "
          "not told to the step)");
ABSL_FLAG(std::string, step_numbering, "dev_num",
          "slurm task-prolog: what the numbers in SLURM_STEP_GPUS / SLURM_JOB_GPUS are: dev_num (the "
          "number ending the device file's name, Slurm 22.05) or index (the position among the node's gpu "
          "records, later releases)");

namespace devplace::cli {
namespace {

// Runs `body` on the daemon's inventory, or on --inventory=FILE's (offline = true).
int WithInventory(const std::function<int(const v1::Inventory&, bool offline)>& body) {
  const std::string path = absl::GetFlag(FLAGS_inventory);
  if (path.empty()) {
    return WithClient([&](Client& client) {
      absl::StatusOr<v1::Inventory> inv = client.Inventory();
      return inv.ok() ? body(*inv, false) : Fail(inv.status());
    });
  }
  return WithInventoryFile(path, [&](const v1::Inventory& inv) { return body(inv, true); });
}

int PrintJson(const google::protobuf::Struct& s) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(s, &json, options);
  std::fputs(json.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

int RunGres() {
  absl::StatusOr<slurm::GresNaming> naming = slurm::ParseGresNaming(absl::GetFlag(FLAGS_name));
  if (!naming.ok()) return UsageError(g_command, naming.status().message());
  return WithInventory([&](const v1::Inventory& inv, bool) {
    const std::string text = slurm::GresConfText(inv, *naming);
    if (!absl::GetFlag(FLAGS_json)) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
      return 0;
    }
    const std::vector<slurm::GresDevice> devices = slurm::GresDevices(inv, *naming);
    google::protobuf::Struct s;
    auto& f = *s.mutable_fields();
    f["gres_conf"].set_string_value(text);
    f["gres_types"].set_string_value(slurm::GresTypes(devices));
    f["node_gres"].set_string_value(slurm::NodeGres(devices));
    google::protobuf::ListValue* records = f["records"].mutable_list_value();
    for (const slurm::GresDevice& g : devices) {
      auto& r = *records->add_values()->mutable_struct_value()->mutable_fields();
      r["name"].set_string_value(g.name);
      r["type"].set_string_value(g.type);
      for (const std::string& file : g.files) r["files"].mutable_list_value()->add_values()->set_string_value(file);
      r["cores"].set_string_value(g.cores);
      r["flags"].set_string_value(g.flags);
      r["host_index"].set_number_value(g.device->host_index());
      r["slurm_dev_num"].set_number_value(g.dev_num);
    }
    return PrintJson(s);
  });
}

int RunTaskProlog() {
  absl::StatusOr<slurm::StepNumbering> numbering = slurm::ParseStepNumbering(absl::GetFlag(FLAGS_step_numbering));
  if (!numbering.ok()) return UsageError(g_command, numbering.status().message());
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return WithInventory([&](const v1::Inventory& inv, bool offline) {
    // The step's /dev (its cgroup's view is what the runtime numbers); unknown offline.
    std::optional<v1::JobDevices> job_devices;
    if (!offline) {
      const std::optional<std::vector<std::string>> nodes = ResolveOptions::FromEnvironment().job_device_nodes;
      if (nodes) {
        job_devices.emplace();
        for (const std::string& n : *nodes) job_devices->add_device_nodes(n);
      }
    }
    absl::StatusOr<slurm::Exports> exports =
        slurm::TaskPrologExports(inv, env, job_devices ? &*job_devices : nullptr, *numbering);
    if (!exports.ok()) return Fail(exports.status());
    std::string out;
    if (absl::GetFlag(FLAGS_json)) {
      google::protobuf::Struct s;
      for (const auto& [k, v] : *exports) (*s.mutable_fields())[k].set_string_value(v);
      return PrintJson(s);
    }
    // TaskPrologExports checked every name and value (names once, values digits and commas only):
    // nothing to quote, and no line can override another.
    for (const auto& [k, v] : *exports) absl::StrAppend(&out, "export ", k, "=", v, "\n");
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    return 0;
  });
}

}  // namespace

Command SlurmGresCommand() {
  return {"slurm gres", "Print the host's Slurm gres.conf (and its slurm.conf Gres= line, as comments).",
          "devplace slurm gres [--inventory=FILE] [--name=gpu|per-row]",
          "Prints gres.conf records for every accelerator row with device nodes: Name, Type (the model,\n"
          "sanitised), File (or MultipleFiles), Cores (the device's NUMA node, hosts without SMT) and the\n"
          "env flag Slurm has for the row; a comment per row says what Slurm cannot express. The\n"
          "slurm.conf GresTypes= and NodeName=... Gres= lines come first, as comments. --json prints\n"
          "{gres_conf, gres_types, node_gres, records: [{name, type, files, cores, flags, host_index,\n"
          "slurm_dev_num}]} (slurm_dev_num: the number Slurm 22.05 lists in SLURM_STEP_GPUS). From the daemon's inventory, or offline from\n"
          "--inventory=FILE. docs/SLURM.md describes the set-up.",
          {"inventory", "name"}, &RunGres};
}

Command SlurmTaskPrologCommand() {
  return {"slurm task-prolog", "Slurm TaskProlog: print `export NAME=value` lines for the step's devices.",
          "devplace slurm task-prolog [--inventory=FILE] [--step_numbering=dev_num|index]",
          "For slurm.conf's TaskProlog. Reads the step's allocated GPUs from SLURM_STEP_GPUS (else\n"
          "SLURM_JOB_GPUS), maps them to the records of `devplace slurm gres --name=gpu`, and prints each\n"
          "row's mask variable (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, HABANA_VISIBLE_MODULES,\n"
          "...) with exactly the allocated devices in the job's own numbering, checked by devplace's\n"
          "visibility rules; rows with nothing allocated are hidden. LOCAL_RANK and WORLD_SIZE come from\n"
          "SLURM_LOCALID and SLURM_NTASKS where unset (decimal integers, checked; anything else is an\n"
          "error). An allocation no value can express exactly is an error naming the cause (device nodes\n"
          "the task cannot open, a mask no value makes exact, or both): exit 1, nothing printed; the\n"
          "allocation is never widened.",
          {"inventory", "step_numbering"}, &RunTaskProlog};
}

}  // namespace devplace::cli
