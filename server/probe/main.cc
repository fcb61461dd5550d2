// devplace-probe: probes this host's accelerators and CPU once and writes one devplace.v1
// Inventory to stdout. devplaced runs it as a child process with a deadline, so probe code never
// runs inside the daemon.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/flag_help.h"
#include "server/common/json.h"
#include "server/common/vendor_libraries.h"
#include "server/common/vendor_library_flags.h"
#include "server/common/version.h"
#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probe_flags.h"
#include "server/probe/probers.h"
#include "server/probe/vendor_libs/nvml_xid_watch.h"

ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev (e.g. /host when the host's trees "
          "are mounted there in a container, or a fixture tree in tests)");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(5),
          "This probe's own deadline, for the whole probe: the sysfs/procfs probers first, then the vendor-library "
          "probers (one per --<name>_library flag), which run at once, each in its own child process, with what "
          "is left: one that has not finished by then is killed and reported "
          "PROBE_STATUS_TIMED_OUT, naming the call that did not return; one whose process dies of a "
          "signal is reported PROBE_STATUS_CRASHED; the rest of the inventory is still written. A host read "
          "that never returns (a driver's sysfs file) ends the probe 1s past the deadline with exit status 3. "
          "Keep it below devplaced's --probe_timeout (default 10s), which kills the whole probe and is only "
          "the safety net");
ABSL_FLAG(bool, usage_only, false,
          "Read only what moves while jobs run, for devplaced's usage refresh (--usage_interval): the PCI scan, "
          "the sysfs files of memory in use (AMD's mem_info_vram_used, Neuron's per-core device memory) and "
          "the vendor libraries that report memory, for the rows the scan found (their memory figures, processes "
          "and compute modes; not libcuda's numbering, not NVML's driver versions). The inventory written has the "
          "PCI devices with those figures and nothing of the other host probers");
ABSL_FLAG(bool, watch_xid, false,
          "Instead of probing, watch NVML's critical XID events (the library of --nvml_library) until stdout "
          "closes or the parent exits, one line per event: devplaced runs this as its XID watcher "
          "(docs/PROBE.md \"XID critical errors\")");
ABSL_FLAG(bool, json, false,
          "Print the inventory as pretty JSON (the protobuf JSON mapping) for people, instead of "
          "the serialized devplace.v1.Inventory bytes");

namespace {

constexpr char kUsageDetails[] =
    "Output: the serialized protobuf message (binary; what devplaced reads) by default, or the "
    "protobuf JSON mapping with --json.\n"
    "Exit status: 0 when an inventory was written (probers that failed or timed out are reported in its "
    "probe_reports), 2 on bad flags or an unreadable --host_root, 1 when writing failed, 3 when a read "
    "never returned and the probe overran --probe_timeout (nothing written).\n"
    "Files that are not regular files (a FIFO, a device node) are never opened; the sysfs/procfs probers run "
    "under an address-space cap (512 MiB above the process's size).";

// --help's text: the usage line names every vendor library's flag (registry order, about 100
// columns a line).
std::string Usage() {
  std::string usage = "Usage: devplace-probe [--host_root=DIR]";
  size_t line_start = 0;
  for (const devplace::VendorLibrary& library : devplace::kVendorLibraries) {
    const std::string flag = absl::StrCat(" [--", library.flag, "=PATH]");
    if (usage.size() - line_start + flag.size() > 100) {
      line_start = usage.size() + 1;
      absl::StrAppend(&usage, "\n      ");
    }
    absl::StrAppend(&usage, flag);
  }
  return absl::StrCat(
      "Probes this host's accelerators, CPU and memory once and writes one devplace.v1.Inventory "
      "to stdout.\n\n",
      usage, " [--probe_timeout=5s] [--usage_only] [--json]\n"
      "       devplace-probe --watch_xid [--nvml_library=PATH]\n\n", kUsageDetails);
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "devplace-probe: %s\n", message.c_str());
  return code;
}

// What is wrong with the command line, or "" when absl::ParseCommandLine will accept it (it
// exits with status 1 on a bad flag; this binary documents 2).
std::string CommandLineError(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      return i + 1 < argc ? absl::StrCat("unexpected argument \"", argv[i + 1], "\" (see --help)") : "";
    }
    if (!absl::ConsumePrefix(&arg, "-")) return absl::StrCat("unexpected argument \"", arg, "\" (see --help)");
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    // absl's usage flags are not in the flag registry; ParseCommandLine handles them.
    for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                    "helpmatch", "version", "only_check_args"}) {
      if (name == usage) name = "";
    }
    if (name.empty()) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {  // --nojson
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && (!flag->IsOfType<bool>() || has_value)) flag = nullptr;
      if (flag != nullptr) continue;
    }
    if (flag == nullptr) return absl::StrCat("unknown flag --", name, " (see --help)");
    if (flag->IsOfType<bool>()) {
      bool value = false;
      std::string error;
      if (has_value && !absl::ParseFlag(arg.substr(eq + 1), &value, &error)) {
        return absl::StrCat("--", name, ": bad value \"", arg.substr(eq + 1), "\" (want true or false)",
                            error.empty() ? "" : ": ", error);
      }
      continue;
    }
    if (!has_value && ++i >= argc) return absl::StrCat("--", name, " needs a value");
    const absl::string_view value = has_value ? arg.substr(eq + 1) : absl::string_view(argv[i]);
    absl::Duration duration;
    std::string error;
    if (flag->IsOfType<absl::Duration>() &&
        (!absl::ParseFlag(value, &duration, &error) || duration <= absl::ZeroDuration())) {
      return absl::StrCat("--", name, ": bad value \"", value, "\" (want a positive duration such as 5s or 500ms)");
    }
  }
  return "";
}

bool WriteAll(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(STDOUT_FILENO, bytes.data() + done, bytes.size() - done);
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Stamps `inventory` with the time and writes it to stdout; the exit status.
int Write(devplace::v1::Inventory inventory) {
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  inventory.mutable_probed_at()->set_seconds(now_ns / 1000000000);
  inventory.mutable_probed_at()->set_nanos(static_cast<int32_t>(now_ns % 1000000000));

  std::string out;
  if (absl::GetFlag(FLAGS_json)) {
    absl::StatusOr<std::string> json = devplace::ToJson(inventory);
    if (!json.ok()) return Fail(1, std::string(json.status().message()));
    out = *json + "\n";
  } else if (!inventory.SerializeToString(&out)) {
    return Fail(1, "cannot serialize the inventory");
  }
  if (!WriteAll(out)) return Fail(1, "cannot write to stdout");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(Usage());
  absl::FlagsUsageConfig config;
  // This file's flags and the vendor-library flags (defined in server/common) are this binary's
  // own: --help lists them together.
  config.normalize_filename = [](absl::string_view file) {
    if (file == __FILE__ || file == devplace::VendorLibraryFlagsFile()) return std::string("devplace-probe.cc");
    const size_t slash = file.rfind('/');
    return std::string(slash == absl::string_view::npos ? file : file.substr(slash + 1));
  };
  config.contains_help_flags = [](absl::string_view file) { return file == "devplace-probe.cc"; };
  config.version_string = [] { return absl::StrCat("devplace-probe ", devplace::kVersion, "\n"); };
  absl::SetFlagsUsageConfig(config);
  // --help and -h (absl's handler exits 1 and knows no -h): on stdout, exit 0, as devplaced's.
  if (std::optional<std::string> help = devplace::FlagHelp(std::vector<std::string>(argv + 1, argv + argc),
                                                           "devplace-probe", "devplace-probe.cc")) {
    std::fputs(help->c_str(), stdout);
    return 0;
  }
  if (const std::string error = CommandLineError(argc, argv); !error.empty()) return Fail(2, error);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return Fail(2, absl::StrCat("unexpected argument \"", positional[1], "\" (see --help)"));
  }

  if (absl::GetFlag(FLAGS_watch_xid)) {
    // Dies with devplaced, whichever way it ends.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    return devplace::probe::WatchXidEvents(devplace::probe::ProbeOptionsFromFlags(absl::Seconds(1)).nvml_library,
                                           STDOUT_FILENO);
  }
  absl::StatusOr<devplace::probe::HostRoot> root = devplace::probe::HostRoot::Open(absl::GetFlag(FLAGS_host_root));
  if (!root.ok()) return Fail(2, absl::StrCat("--host_root: ", root.status().message()));

  devplace::probe::ProbeOptions options = devplace::probe::ProbeOptionsFromFlags(absl::GetFlag(FLAGS_probe_timeout));
  options.usage_only = absl::GetFlag(FLAGS_usage_only);
  devplace::probe::ExitWhenOverdue(options.vendor_timeout, "devplace-probe");
  const devplace::probe::ProbeRun run = devplace::probe::RunProbers(*root, options);
  const int status = Write(devplace::probe::BuildInventory(run));
  return status;
}
