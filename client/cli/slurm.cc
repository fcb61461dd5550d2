// `devplace slurm gres` (the node's gres.conf), `devplace slurm task-prolog` (Slurm's
// TaskProlog: `export NAME=value` lines for the step) and `devplace slurm health-check` (Slurm's
// HealthCheckProgram: NHC-style failures, draining the node on a FAULT device), from the daemon's inventory or, with
// --inventory=FILE, from a saved one. The rules are server/export/slurm.h's; docs/SLURM.md says how
// to install them.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"
#include "google/protobuf/struct.pb.h"
#include "server/common/status_macros.h"
#include "server/export/slurm.h"

extern char** environ;

ABSL_FLAG(std::string, name, "gpu",
          "slurm gres: Name= of the records: gpu (every row as Slurm's gpu GRES, told to the step in "
          "SLURM_STEP_GPUS; what the task prolog needs) or per-row (cuda, rocm, npu, hpu, ...: counted, "
          "not told to the step)");
ABSL_FLAG(bool, drain, false,
          "slurm health-check: drain the node (scontrol update State=DRAIN Reason=\"devplace: ...\") when a device "
          "is FAULT or LOST, and resume it when none is and devplace drained it");
ABSL_FLAG(std::string, node, "",
          "slurm health-check: the Slurm node name to drain or resume (default: $SLURMD_NODENAME, else the "
          "host's short name)");
ABSL_FLAG(std::string, scontrol, "scontrol", "slurm health-check: the scontrol program --drain runs (searched in PATH)");
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

constexpr absl::Duration kScontrolLimit = absl::Seconds(30);
constexpr size_t kMaxScontrolOutput = 64 << 10;

// Runs `argv` (no shell), its stdout captured (at most 64 KiB), stderr passed through, for at most
// kScontrolLimit; an error naming the program unless it exits 0.
absl::StatusOr<std::string> RunProgram(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(err),
                                                      " (--scontrol=PATH names the program)"));
  }
  std::string out;
  const absl::Time deadline = absl::Now() + kScontrolLimit;
  bool timed_out = false;
  for (;;) {
    pollfd p = {fds[0], POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) == 0) {
      timed_out = true;
      break;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < kMaxScontrolOutput) out.append(buf, std::min<size_t>(n, kMaxScontrolOutput - out.size()));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string what = absl::StrJoin(argv.begin(), argv.begin() + std::min<size_t>(argv.size(), 3), " ");
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat(what, " did not finish in 30 s (killed)"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, " failed (", WIFEXITED(status) ? "exit " : "signal ",
                                                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), ")"));
  }
  return out;
}

std::string NodeName() {
  if (std::string node = absl::GetFlag(FLAGS_node); !node.empty()) return node;
  if (const char* env = std::getenv("SLURMD_NODENAME"); env != nullptr && *env != '\0') return env;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(absl::string_view(host).substr(0, absl::string_view(host).find('.')));
}

// A node's drain as `scontrol show node --oneliner` prints it ("... State=IDLE+DRAIN ... Reason=<text>
// [user@time]"): whether Slurm holds it out of service (DRAIN in its state: drained or draining; or
// DOWN), and its reason ("" when none; the reason is the line's last field).
struct NodeDrain {
  bool out_of_service = false;
  std::string reason;
};

NodeDrain ParseNodeDrain(absl::string_view shown) {
  NodeDrain d;
  if (const size_t s = shown.find(" State="); s != absl::string_view::npos) {
    absl::string_view state = shown.substr(s + 7);
    state = state.substr(0, state.find_first_of(" \n"));
    d.out_of_service = absl::StrContains(state, "DRAIN") || absl::StrContains(state, "DOWN");
  }
  if (const size_t r = shown.find(" Reason="); r != absl::string_view::npos) {
    d.reason = std::string(absl::StripTrailingAsciiWhitespace(shown.substr(r + 8)));
  }
  return d;
}

// --drain: drains the node with the failures as its reason; with none, resumes it when its reason
// is devplace's. A node an operator or another check took out of service (drained or down with a
// reason that is not devplace's) is left as it is either way, its reason kept, as LBNL NHC leaves a
// node another party marked offline. Whether it acted.
absl::StatusOr<bool> DrainOrResume(const std::string& node, const std::vector<slurm::HealthFailure>& failures) {
  const std::string scontrol = absl::GetFlag(FLAGS_scontrol);
  ASSIGN_OR_RETURN(const std::string shown, RunProgram({scontrol, "show", "node", "--oneliner", node}));
  const NodeDrain now = ParseNodeDrain(shown);
  const bool ours = absl::StartsWith(now.reason, slurm::kDrainReasonPrefix);
  if (now.out_of_service && !ours) {
    if (!failures.empty()) {
      std::fprintf(stderr, "devplace: node %s is already out of service (Reason=%s): left as it is\n", node.c_str(),
                   now.reason.c_str());
    }
    return false;
  }
  if (!failures.empty()) {
    RETURN_IF_ERROR(RunProgram({scontrol, "update", "NodeName=" + node, "State=DRAIN",
                                "Reason=" + slurm::DrainReason(failures)})
                        .status());
    return true;
  }
  if (!now.out_of_service || !ours) return false;
  RETURN_IF_ERROR(RunProgram({scontrol, "update", "NodeName=" + node, "State=RESUME"}).status());
  return true;
}

int RunHealthCheck() {
  return WithInventory([&](const v1::Inventory& inv, bool) {
    const std::vector<slurm::HealthFailure> failures = slurm::HealthFailures(inv);
    const std::string node = NodeName();
    absl::StatusOr<bool> acted = false;
    if (absl::GetFlag(FLAGS_drain)) acted = DrainOrResume(node, failures);
    const int code = failures.empty() && acted.ok() ? 0 : 1;
    if (absl::GetFlag(FLAGS_json)) {
      google::protobuf::Struct s;
      auto& f = *s.mutable_fields();
      f["healthy"].set_bool_value(failures.empty());
      f["node"].set_string_value(node);
      google::protobuf::ListValue* list = f["failures"].mutable_list_value();
      for (const slurm::HealthFailure& h : failures) {
        auto& r = *list->add_values()->mutable_struct_value()->mutable_fields();
        r["pci_bus_id"].set_string_value(h.device->pci_bus_id());
        r["host_index"].set_number_value(h.device->host_index());
        r["health"].set_string_value(v1::Health_Name(h.device->health()));
        r["message"].set_string_value(h.message);
      }
      if (absl::GetFlag(FLAGS_drain)) {
        f[failures.empty() ? "resumed" : "drained"].set_bool_value(acted.ok() && *acted);
        if (!failures.empty() && acted.ok() && *acted) f["reason"].set_string_value(slurm::DrainReason(failures));
      }
      PrintJson(s);
    } else {
      std::string out;
      for (const slurm::HealthFailure& h : failures) absl::StrAppend(&out, slurm::NhcFailureLine(h), "\n");
      std::fputs(out.c_str(), stdout);
      std::fflush(stdout);
    }
    if (!acted.ok()) Fail(acted.status());
    return code;
  });
}

}  // namespace

Command SlurmHealthCheckCommand() {
  return {"slurm health-check", "Slurm node health check: fail (and with --drain, drain) on a FAULT or LOST device.",
          "devplace slurm health-check [--inventory=FILE] [--drain [--node=NAME] [--scontrol=PATH]]",
          "For slurm.conf's HealthCheckProgram (through a two-line script: Slurm runs it without arguments).\n"
          "Prints one line per device whose health is FAULT or LOST (docs/PROBE.md \"Device health\") in LBNL\n"
          "NHC's shape, `ERROR:  devplace:  Health check failed:  <row> device <N> (<bus id>) FAULT: <counter>\n"
          "<value> (<source>)`, and exits 1; nothing and exit 0 when every device is usable (DEGRADED ones\n"
          "are). Slurm does not act on the exit status: --drain runs `scontrol update NodeName=<node>\n"
          "State=DRAIN Reason=\"devplace: ...\"` itself, and when no device fails resumes a node whose reason\n"
          "starts with \"devplace: \"; a node drained or down for another reason is left as it is, its reason\n"
          "kept. A daemon that cannot\n"
          "be reached is exit 1 and never drains. --json prints {healthy, node, failures: [{pci_bus_id,\n"
          "host_index, health, message}], drained|resumed, reason (when drained)}. docs/SLURM.md describes the\n"
          "set-up.",
          {"inventory", "drain", "node", "scontrol"}, &RunHealthCheck};
}

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
