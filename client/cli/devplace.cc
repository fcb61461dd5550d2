// devplace: the command-line client of devplaced.
//
//   devplace [global flags] <command> [command flags]
//   commands: resolve, inventory, labels, backends, watch, health, probe, fleet
//
// resolve, inventory, labels, backends, watch and health call the daemon through libdevplace;
// `probe`, `resolve --inventory=FILE` and `labels --inventory=FILE` run the probers / the resolver /
// the label mapping in-process and need no daemon.
// Flags are absl flags, defined once here; this file parses the command line itself (each
// command accepts only the global flags and its own) so that usage errors exit with status 2.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/fleet.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"
#include "google/protobuf/util/json_util.h"
#include "server/export/labels.h"
#include "server/common/flag_errors.h"
#include "server/inventory/merge.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"
#include "server/placement/versions.h"
#include "server/probe/host_root.h"
#include "server/probe/probers.h"

// ---- global flags ----
ABSL_FLAG(bool, json, false, "Print the protobuf JSON mapping (as grpcurl would) instead of tables");

// ---- resolve ----
ABSL_FLAG(bool, explain, false,
          "Also print the explanation steps (rule ids), warnings, devices and max_memory, to stderr "
          "(stdout keeps only the device string)");
ABSL_FLAG(bool, quiet, false,
          "Do not print the answer's warnings (by default each goes to stderr as `devplace: warning: ...`; "
          "stdout keeps only the device string)");

// ---- watch ----
ABSL_FLAG(uint64_t, known_revision, 0,
          "Skip the current snapshot when its revision equals this one (0 = print it)");

// ---- probe ----
ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev (e.g. /host in a container, or a fixture tree)");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library to dlopen for GPU names, UUIDs, memory and MIG instances (empty: do not read NVML)");
ABSL_FLAG(std::string, cuda_library, "libcuda.so.1",
          "probe: libcuda to dlopen (in two child processes) for the CUDA runtime's GPU numbering under "
          "CUDA_DEVICE_ORDER unset and PCI_BUS_ID (empty: none)");
ABSL_FLAG(std::string, amd_smi_library, "libamd_smi.so",
          "AMD SMI library to dlopen for AMD GPU names, UUIDs, VRAM and partition modes (empty: do not read AMD SMI)");
ABSL_FLAG(std::string, level_zero_library, "libze_loader.so.1",
          "Level Zero loader to dlopen for Intel GPU names, UUIDs, memory and tiles (empty: do not read Level Zero)");
ABSL_FLAG(std::string, hlml_library, "libhlml.so",
          "HLML library (Intel Gaudi) to dlopen for names, UUIDs, memory and health (empty: do not read HLML)");
ABSL_FLAG(std::string, dcmi_library, "libdcmi.so",
          "DCMI library (Huawei Ascend) to dlopen for ids, names, HBM memory and health (empty: do not read DCMI)");
ABSL_FLAG(std::string, cndev_library, "libcndev.so",
          "CNDev library (Cambricon) to dlopen for names, UUIDs, memory and health (empty: do not read CNDev)");
ABSL_FLAG(std::string, mtml_library, "libmtml.so",
          "MTML library (Moore Threads) to dlopen for names, UUIDs and memory (empty: do not read MTML)");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(5),
          "Deadline of the vendor-library probers (NVML, libcuda, AMD SMI, Level Zero, HLML, DCMI, CNDev, MTML), each in its own process; one that overruns is "
          "reported as timed out, one that crashes as crashed");

// Not in an anonymous namespace: cli.h shares some of these definitions with fleet.cc.
namespace devplace::cli {

// ---------------------------------------------------------------------------------------------
// Commands and their flags
// ---------------------------------------------------------------------------------------------

struct Command {
  const char* name;
  const char* summary;
  const char* usage;
  const char* details;
  std::vector<const char*> flags;  // besides the global ones
  int (*run)();
};

const std::vector<const char*> kGlobalFlags = [] {
  std::vector<const char*> flags = ConnectFlagNames();  // --address, --timeout, --tls_*
  flags.push_back("json");
  return flags;
}();

int RunResolve();
int RunInventory();
int RunLabels();
int RunBackends();
int RunWatch();
int RunHealth();
int RunRefresh();
int RunProbe();

const std::vector<Command>& Commands() {
  static const std::vector<Command>* const kCommands = new std::vector<Command>{
      {"resolve", "Which device should this job use? Prints only the device string (e.g. cuda:0).",
       "devplace resolve --workload=training|inference [flags]",
       "Asks the daemon (or, with --inventory=FILE, the resolver in-process against a saved inventory)\n"
       "which device a PyTorch job should use, in the job's own numbering, following Transformers /\n"
       "Accelerate rules. stdout holds only the device string, so this works:\n"
       "  DEVICE=$(devplace resolve --workload=inference --device_map=auto)\n"
       "By default the job's placement variables (CUDA_VISIBLE_DEVICES, LOCAL_RANK, ...) come from this\n"
       "process's environment and its accelerator /dev nodes from this process's /dev; --env and the\n"
       "other flags override them. Warnings (a present accelerator the job cannot use, ...) go to stderr\n"
       "unless --quiet; --explain adds the reasoning on stderr; --json prints the whole\n"
       "ResolveDeviceResponse on stdout instead.",
       {"workload", "convention", "device_map", "use_cpu", "local_rank", "world_size", "runtime_backends",
        "strict", "model_size_bytes", "transformers_version", "accelerate_version", "env", "no_environment", "job_device_nodes", "explain", "quiet", "inventory"},
       &RunResolve},
      {"inventory", "Show the host's accelerator inventory (the daemon's current snapshot).", "devplace inventory",
       "Prints the host, the backends (rows) with their state, every device and the probers' reports.", {},
       &RunInventory},
      {"labels", "Print the host's Kubernetes node labels (key=value lines, as NFD publishes them).",
       "devplace labels [--inventory=FILE]",
       "Prints the node labels devplaced writes to --nfd_features_file (namespace\n"
       "devplace.feature.node.kubernetes.io), one key=value line each, sorted; --json prints one JSON\n"
       "object instead. From the daemon's inventory, or offline from --inventory=FILE. README.md\n"
       "(\"Node labels\") lists the keys and the rules for unknown and heterogeneous values.",
       {"inventory"}, &RunLabels},
      {"backends", "Show the hardware table: rows, device types, packages, mask variables.", "devplace backends",
       "Prints the 12 rows devplace places on, as the daemon's ListBackends returns them.", {}, &RunBackends},
      {"watch", "Print each inventory revision as it arrives, until interrupted.", "devplace watch",
       "Prints one summary line per inventory revision (or one JSON object per revision with --json),\n"
       "starting with the current one, until interrupted (Ctrl-C) or the daemon ends the stream.",
       {"known_revision"}, &RunWatch},
      {"health", "Print SERVING or NOT_SERVING; exit status 0 only when serving.", "devplace health",
       "Calls grpc.health.v1.Health/Check for the whole server (service \"\").", {}, &RunHealth},
      {"refresh", "Make the daemon re-probe the host now; prints the resulting inventory.", "devplace refresh",
       "Calls RefreshInventory. The daemon allows it only to root, its own user and members of its socket\n"
       "group over the unix socket, and to mTLS-authenticated clients (PERMISSION_DENIED otherwise), and\n"
       "starts at most one probe per --refresh_min_interval (RESOURCE_EXHAUSTED, with the time to wait).",
       {}, &RunRefresh},
      {"probe", "Probe this host in-process (no daemon) and print its inventory.",
       "devplace probe [--host_root=DIR]",
       "Runs devplace's probers in this process against --host_root (NVML through --nvml_library, libcuda's\n"
       "GPU numbering through --cuda_library, AMD SMI, Level Zero, HLML, DCMI, CNDev and MTML through\n"
       "--amd_smi_library, --level_zero_library, --hlml_library, --dcmi_library, --cndev_library,\n"
       "--mtml_library, each in its own child process under\n"
       "--probe_timeout) and prints the inventory it builds (the same content devplace-probe writes).\n"
       "Save it with --json for `resolve --inventory`.",
       {"host_root", "nvml_library", "cuda_library", "amd_smi_library", "level_zero_library", "hlml_library",
        "dcmi_library", "cndev_library", "mtml_library", "probe_timeout"},
       &RunProbe},
      {"fleet", kFleetSummary, kFleetUsage, kFleetDetails, FleetFlags(), &RunFleet},
  };
  return *kCommands;
}

const Command* FindCommand(absl::string_view name) {
  for (const Command& command : Commands()) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

// `text` filled into lines of at most 96 columns, each starting with `indent` spaces.
std::string Wrap(const std::string& text, size_t indent) {
  std::string out, line(indent, ' ');
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent && line.size() + 1 + word.size() > 96) {
      absl::StrAppend(&out, line, "\n");
      line.assign(indent, ' ');
    }
    absl::StrAppend(&line, line.size() > indent ? " " : "", word);
  }
  return absl::StrCat(out, line, "\n");
}

std::string FlagHelp(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return "";
  const bool is_bool = flag->IsOfType<bool>();
  std::string help = flag->Help();
  const std::string def = flag->DefaultValue();
  if (!is_bool && !def.empty()) absl::StrAppend(&help, " (default: ", def, ")");
  return absl::StrCat("  --", name, is_bool ? "" : "=VALUE", "\n", Wrap(help, 6));
}

void PrintGeneralHelp(FILE* out) {
  std::string text =
      "devplace: which device should a PyTorch job use, and what accelerators does this host have?\n"
      "The command-line client of devplaced, the per-host devplace daemon.\n\n"
      "Usage: devplace [global flags] <command> [command flags]\n\nCommands:\n";
  for (const Command& command : Commands()) absl::StrAppend(&text, absl::StrFormat("  %-10s %s\n", command.name, command.summary));
  absl::StrAppend(&text, "\nGlobal flags (any command):\n");
  for (const char* flag : kGlobalFlags) absl::StrAppend(&text, FlagHelp(flag));
  absl::StrAppend(&text,
                  "\nExit status: 0 success; 1 error from the daemon or the work itself, reported as one line\n"
                  "on stderr `devplace: <command>: <gRPC code>: <message>`; 2 usage error.\n"
                  "`devplace <command> --help` describes a command and its flags.\n");
  std::fputs(text.c_str(), out);
}

void PrintCommandHelp(const Command& command) {
  std::string text = absl::StrCat("Usage: ", command.usage, "\n\n", command.summary, "\n", command.details, "\n");
  if (!command.flags.empty()) {
    absl::StrAppend(&text, "\nFlags:\n");
    for (const char* flag : command.flags) absl::StrAppend(&text, FlagHelp(flag));
  }
  absl::StrAppend(&text, "\nGlobal flags:\n");
  for (const char* flag : kGlobalFlags) absl::StrAppend(&text, FlagHelp(flag));
  std::fputs(text.c_str(), stdout);
}

int UsageError(absl::string_view command, absl::string_view message) {
  if (command.empty()) {
    std::fprintf(stderr, "devplace: %s (see devplace --help)\n", std::string(message).c_str());
  } else {
    std::fprintf(stderr, "devplace: %s: %s (see devplace %s --help)\n", std::string(command).c_str(),
                 std::string(message).c_str(), std::string(command).c_str());
  }
  return kExitUsage;
}

// The command being run, for error lines.
const char* g_command = "";

int Fail(const absl::Status& status) {
  // One line, printable, bounded: messages may quote file contents or long inputs.
  std::string message(status.message());
  for (char& c : message) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (message.size() > 1000) message = message.substr(0, 1000) + "... (truncated)";
  std::fprintf(stderr, "devplace: %s: %s: %s\n", g_command, absl::StatusCodeToString(status.code()).c_str(),
               message.c_str());
  return kExitError;
}

// Parses argv: sets the flags, returns the command, or the exit status to end with.
struct ParsedCommandLine {
  const Command* command = nullptr;
  std::optional<int> exit_status;
};

ParsedCommandLine ParseCommandLine(int argc, char** argv) {
  ParsedCommandLine result;
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> given;  // flag name, value
  bool help = false;
  std::string error;  // the first bad flag, reported once the command is known
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.emplace_back(arg);
      continue;
    }
    auto [name, value] = SplitFlagArgument(arg);
    if (name == "help" || name == "h" || name == "helpfull" || name == "helpshort") {
      help = true;
      continue;
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {  // --nojson, --nostrict
      const absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>() && !value) {
        flag = positive;
        name = name.substr(2);
        value = "false";
      }
    }
    if (flag == nullptr || name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      if (error.empty()) error = absl::StrCat("unknown flag --", name);
      continue;
    }
    if (!value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        if (error.empty()) error = absl::StrCat("flag --", name, " needs a value");
        continue;
      }
    }
    given.emplace_back(name, *value);
  }

  if (positional.empty()) {
    if (!error.empty()) {
      result.exit_status = UsageError("", error);
    } else if (help) {
      PrintGeneralHelp(stdout);
      result.exit_status = 0;
    } else {
      result.exit_status = UsageError("", "missing command (one of resolve, inventory, labels, backends, watch, health, refresh, probe, fleet)");
    }
    return result;
  }
  if (positional[0] == "help") {  // devplace help [command]
    help = true;
    positional.erase(positional.begin());
    if (positional.empty()) {
      PrintGeneralHelp(stdout);
      result.exit_status = 0;
      return result;
    }
  }
  const Command* command = FindCommand(positional[0]);
  if (command == nullptr) {
    result.exit_status = UsageError("", absl::StrCat("unknown command \"", positional[0], "\""));
    return result;
  }
  g_command = command->name;
  if (!error.empty()) {
    result.exit_status = UsageError(command->name, error);
    return result;
  }
  if (help) {
    PrintCommandHelp(*command);
    result.exit_status = 0;
    return result;
  }
  if (positional.size() > 1) {
    result.exit_status = UsageError(command->name, absl::StrCat("unexpected argument \"", positional[1], "\""));
    return result;
  }
  for (const auto& [name, value] : given) {
    const bool allowed = std::count(kGlobalFlags.begin(), kGlobalFlags.end(), name) > 0 ||
                         std::count(command->flags.begin(), command->flags.end(), name) > 0;
    if (!allowed) {
      result.exit_status = UsageError(command->name, absl::StrCat("flag --", name, " does not apply to this command"));
      return result;
    }
    std::string error;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (!flag->ParseFrom(value, &error)) {
      result.exit_status = UsageError(command->name, BadFlagValue(*flag, value, error));
      return result;
    }
    if (name == "env") g_env_values.push_back(value);
  }
  result.command = command;
  return result;
}

// ---------------------------------------------------------------------------------------------
// Views of single commands
// ---------------------------------------------------------------------------------------------

// One line per inventory for `watch`.
std::string Summary(const v1::Inventory& inv) {
  std::vector<std::string> rows;
  for (const v1::Backend& b : inv.backends()) {
    int usable = 0;
    for (const v1::Device& d : b.devices()) usable += d.usable() ? 1 : 0;
    std::string row = absl::StrCat(b.name(), " ", Strip("BACKEND_STATE_", v1::BackendState_Name(b.state())));
    if (!b.devices().empty()) absl::StrAppend(&row, " ", usable, "/", b.devices_size());
    rows.push_back(row);
  }
  return absl::StrCat("revision ", inv.revision(), "  probed ", Timestamp(inv.probed_at()), "  ",
                      absl::StrJoin(rows, ", "));
}

// The --explain block (on stderr).
void PrintExplanation(const v1::ResolveDeviceResponse& r) {
  std::string out = absl::StrCat("device:     ", r.device(), "\n", "backend:    ", RowName(r.backend()), " (package ",
                                 r.package(), ")\n");
  if (!r.devices().empty()) absl::StrAppend(&out, "devices:    ", absl::StrJoin(r.devices(), ", "), "\n");
  if (!r.transformers_version().empty()) {
    absl::StrAppend(&out, "versions:   Transformers ", r.transformers_version(), ", Accelerate ", r.accelerate_version(),
                    " (rules emulated; the V step below says why)\n");
  }
  for (const v1::PlacedDevice& p : r.placed()) {
    absl::StrAppend(&out, "placed:     ", p.device(), " = host #", p.host_index(),
                    p.pci_bus_id().empty() ? "" : absl::StrCat(" ", p.pci_bus_id()),
                    p.name().empty() ? "" : absl::StrCat(" ", p.name()),
                    p.has_memory_total_bytes() ? absl::StrCat(" (", Bytes(p.memory_total_bytes()), ")") : "",
                    p.sub_device() >= 0 ? absl::StrCat(" sub-device ", p.sub_device()) : "",
                    p.partition_uuid().empty() ? "" : absl::StrCat(" partition ", p.partition_uuid()), "\n");
  }
  if (!r.max_memory().empty()) {
    std::vector<std::pair<std::string, uint64_t>> budgets(r.max_memory().begin(), r.max_memory().end());
    std::sort(budgets.begin(), budgets.end(), [](const auto& a, const auto& b) {
      // "0" < "1" < ... < "10" < "cpu"/"mps": numbers by value, then names.
      int x, y;
      const bool nx = absl::SimpleAtoi(a.first, &x), ny = absl::SimpleAtoi(b.first, &y);
      if (nx && ny) return x < y;
      if (nx != ny) return nx;
      return a.first < b.first;
    });
    std::vector<std::string> parts;
    for (const auto& [key, bytes] : budgets) parts.push_back(absl::StrCat(key, "=", Bytes(bytes)));
    absl::StrAppend(&out, "max_memory: ", absl::StrJoin(parts, ", "), "\n");
  }
  absl::StrAppend(&out, "inventory revision: ", r.inventory_revision(), "\n");
  if (!r.explanation().empty()) absl::StrAppend(&out, "explanation:\n");
  for (int i = 0; i < r.explanation_size(); ++i) absl::StrAppend(&out, "  ", i + 1, ". ", r.explanation(i), "\n");
  if (!r.warnings().empty()) absl::StrAppend(&out, "warnings:\n");
  for (const std::string& w : r.warnings()) absl::StrAppend(&out, "  - ", w, "\n");
  std::fputs(out.c_str(), stderr);
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

int RunInventory() {
  return WithClient([](Client& client) {
    absl::StatusOr<v1::Inventory> inv = client.Inventory();
    return inv.ok() ? PrintInventory(*inv) : Fail(inv.status());
  });
}

int RunBackends() {
  return WithClient([](Client& client) {
    absl::StatusOr<v1::ListBackendsResponse> table = client.Backends();
    if (!table.ok()) return Fail(table.status());
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*table);
    std::vector<std::vector<std::string>> rows = {{"BACKEND", "TYPE", "PACKAGE", "AUTO", "HARDWARE", "MASK VARIABLES"}};
    for (const v1::BackendInfo& b : table->backends()) {
      rows.push_back({b.name(), b.device_type(), b.package(), b.auto_map() ? "yes" : "no", b.hardware(),
                      b.mask_variables().empty() ? "-" : absl::StrJoin(b.mask_variables(), ",")});
    }
    PrintTable(rows);
    return 0;
  });
}

int RunWatch() {
  return WithClient([](Client& client) {
    const bool json = absl::GetFlag(FLAGS_json);
    int print_status = 0;
    const absl::Status status = client.Watch(absl::GetFlag(FLAGS_known_revision), [&](const v1::Inventory& inv) {
      if (json) {
        print_status = PrintJson(inv);
        return print_status == 0;
      }
      std::printf("%s\n", Summary(inv).c_str());
      std::fflush(stdout);
      return true;
    });
    // The daemon ending the stream (ABORTED: it shuts down) is the end of the watch, not a failure.
    if (status.code() == absl::StatusCode::kAborted) return print_status;
    if (!status.ok()) return Fail(status);
    return print_status;
  });
}

int RunRefresh() {
  return WithClient([](Client& client) {
    absl::StatusOr<v1::Inventory> inv = client.Refresh();
    return inv.ok() ? PrintInventory(*inv) : Fail(inv.status());
  });
}

int RunHealth() {
  return WithClient([](Client& client) {
    absl::StatusOr<bool> serving = client.Health();
    if (!serving.ok()) return Fail(serving.status());
    const char* word = *serving ? "SERVING" : "NOT_SERVING";
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("{\n  \"status\": \"%s\"\n}\n", word);
    } else {
      std::printf("%s\n", word);
    }
    return *serving ? 0 : kExitError;
  });
}

// Stamps probed_at with now.
void StampNow(v1::Inventory& inv) {
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  inv.mutable_probed_at()->set_seconds(now_ns / 1000000000);
  inv.mutable_probed_at()->set_nanos(static_cast<int32_t>(now_ns % 1000000000));
}

int RunProbe() {
  absl::StatusOr<probe::HostRoot> root = probe::HostRoot::Open(absl::GetFlag(FLAGS_host_root));
  if (!root.ok()) return UsageError(g_command, absl::StrCat("--host_root: ", root.status().message()));
  if (absl::GetFlag(FLAGS_probe_timeout) <= absl::ZeroDuration()) {
    return UsageError(g_command, "--probe_timeout must be positive, e.g. 5s");
  }
  probe::ProbeOptions options;
  options.nvml_library = absl::GetFlag(FLAGS_nvml_library);
  options.cuda_library = absl::GetFlag(FLAGS_cuda_library);
  options.amd_smi_library = absl::GetFlag(FLAGS_amd_smi_library);
  options.level_zero_library = absl::GetFlag(FLAGS_level_zero_library);
  options.hlml_library = absl::GetFlag(FLAGS_hlml_library);
  options.dcmi_library = absl::GetFlag(FLAGS_dcmi_library);
  options.cndev_library = absl::GetFlag(FLAGS_cndev_library);
  options.mtml_library = absl::GetFlag(FLAGS_mtml_library);
  options.vendor_timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_probe_timeout)));
  const probe::ProbeRun run = probe::RunProbers(*root, options);
  v1::Inventory inv = inventory::BuildInventory(run);
  StampNow(inv);
  return PrintInventory(inv);
}


int PrintResolved(const absl::StatusOr<v1::ResolveDeviceResponse>& response) {
  if (!response.ok()) return Fail(response.status());
  if (absl::GetFlag(FLAGS_json)) return PrintJson(*response);
  std::printf("%s\n", response->device().c_str());
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_explain)) {
    PrintExplanation(*response);  // its own warnings: section
  } else if (!absl::GetFlag(FLAGS_quiet)) {
    for (const std::string& w : response->warnings()) std::fprintf(stderr, "devplace: warning: %s\n", w.c_str());
  }
  return 0;
}

int RunResolve() {
  const std::string inventory_path = absl::GetFlag(FLAGS_inventory);
  absl::StatusOr<ResolveOptions> options = OptionsFromFlags(!inventory_path.empty());
  if (!options.ok()) return UsageError(g_command, options.status().message());
  if (inventory_path.empty()) {
    return WithClient([&](Client& client) { return PrintResolved(client.Resolve(*options)); });
  }
  absl::StatusOr<v1::Inventory> inv = ReadInventory(inventory_path);
  if (!inv.ok()) return Fail(inv.status());
  return PrintResolved(placement::Resolve(*inv, options->ToRequest()));
}

int PrintLabels(const v1::Inventory& inv) {
  const std::vector<labels::Label> node_labels = labels::NodeLabels(inv);
  std::string out;
  if (absl::GetFlag(FLAGS_json)) {
    // Keys and values hold only [A-Za-z0-9_./-]: nothing to escape.
    out = "{";
    for (size_t i = 0; i < node_labels.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "  \"", node_labels[i].first, "\": \"", node_labels[i].second, "\"");
    }
    absl::StrAppend(&out, node_labels.empty() ? "}\n" : "\n}\n");
  } else {
    for (const auto& [key, value] : node_labels) absl::StrAppend(&out, key, "=", value, "\n");
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

int RunLabels() {
  const std::string inventory_path = absl::GetFlag(FLAGS_inventory);
  if (inventory_path.empty()) {
    return WithClient([](Client& client) {
      absl::StatusOr<v1::Inventory> inv = client.Inventory();
      return inv.ok() ? PrintLabels(*inv) : Fail(inv.status());
    });
  }
  absl::StatusOr<v1::Inventory> inv = ReadInventory(inventory_path);
  if (!inv.ok()) return Fail(inv.status());
  return PrintLabels(*inv);
}

}  // namespace devplace::cli

int main(int argc, char** argv) {
  const devplace::cli::ParsedCommandLine parsed = devplace::cli::ParseCommandLine(argc, argv);
  if (parsed.exit_status) return *parsed.exit_status;
  return parsed.command->run();
}
