// `devplace pick`: on a shared host, asks the daemon for the least used devices of the job's row
// (PickDevices) and prints the `export` lines that make a job see exactly them, for
// `eval "$(devplace pick)"`. The lease is held for the process that evaluates them and runs the job
// (PickHolder, pick_holder.cc: past the subshells `$(...)` forks and the wrappers between;
// LEASE_HOLDER_PARENT) over the unix socket, or for --ttl. Whatever fails, the output makes `eval` fail (PrintPickFailClosed). The flags
// are shared with `devplace run` (run.cc) through PickOptionsFromFlags().
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "client/cli/request_flags.h"
#include "devplace/client.h"
#include "server/placement/backends.h"
#include "server/placement/pick.h"

ABSL_FLAG(int32_t, count, 1, "How many devices to pick (1 to 64)");
ABSL_FLAG(std::string, min_free, "",
          "Only devices with at least this much free memory: bytes, or a number with K, M, G or T (powers of "
          "1024; KiB, GB, ... read alike), e.g. 20G. Empty: any");
ABSL_FLAG(bool, shared, false,
          "Also pick devices other processes already use (after every idle one); without it only idle devices "
          "(or whose processes the vendor library does not list) are picked");
ABSL_FLAG(std::string, row, "",
          "The row to pick from (cuda/nvidia, cuda/amd, xpu, npu, ...: `devplace backends`); empty: the row of "
          "this job's own answer (`devplace resolve`)");
ABSL_FLAG(absl::Duration, ttl, absl::ZeroDuration(),
          "A lease's time to live, 1s to 24h. pick, run: hold the lease for this long instead of for the shell (over "
          "TCP a TTL lease is the only kind, and a pick there without --ttl is refused); renew: the lease's new time "
          "to live from now (default 5m)");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "When too few devices are free, let the daemon wait up to this long (at most 1h) for a lease to end "
          "instead of failing at once; a daemon restart (a package upgrade) meanwhile is waited out, keeping the "
          "pick's place in the queue");

namespace devplace::cli {
namespace {

// "20G", "512MiB", "1.5T", "1048576" -> bytes.
absl::StatusOr<uint64_t> ParseSize(const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  uint64_t unit = 1;
  for (const auto& [suffix, bytes] : std::vector<std::pair<std::string, uint64_t>>{
           {"TIB", 1ull << 40}, {"GIB", 1ull << 30}, {"MIB", 1ull << 20}, {"KIB", 1ull << 10},
           {"TB", 1ull << 40},  {"GB", 1ull << 30},  {"MB", 1ull << 20},  {"KB", 1ull << 10},
           {"T", 1ull << 40},   {"G", 1ull << 30},   {"M", 1ull << 20},   {"K", 1ull << 10}, {"B", 1}}) {
    if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
      t.resize(t.size() - suffix.size());
      unit = bytes;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(t, &value) || value < 0 || value * static_cast<double>(unit) > 1.8e19) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_free='", text, "': want bytes or a number with K, M, G or T, e.g. 20G"));
  }
  return static_cast<uint64_t>(value * static_cast<double>(unit));
}

// The value quoted for a POSIX shell.
std::string ShellQuote(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string Placed(const v1::PickDevicesResponse& pick) {
  std::vector<std::string> parts;
  for (const v1::PlacedDevice& p : pick.placed()) {
    parts.push_back(absl::StrCat(p.device(), " = host device ", p.host_index(),
                                 p.pci_bus_id().empty() ? "" : absl::StrCat(" (", p.pci_bus_id(), ")"),
                                 p.partition_uuid().empty() ? "" : absl::StrCat(" ", p.partition_uuid())));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

namespace {

// The row a failed pick was for, once RunPick knows it (--row, or the job's answer); unknown:
// ROW_UNSPECIFIED, and the failure hides every row's devices.
v1::Row g_failed_pick_row = v1::ROW_UNSPECIFIED;

}  // namespace

// Every command line ends with `;` and comes before the first comment: an unquoted `eval $(...)`
// joins the lines into one, where a `#` would comment out whatever follows it.
void PrintPickFailClosed() {
  const std::vector<std::pair<std::string, std::string>> hide = placement::NoDeviceEnvironment(g_failed_pick_row);
  std::vector<std::string> names;
  for (const auto& [name, value] : hide) {
    std::printf("export %s=%s ;\n", name.c_str(), value.c_str());
    names.push_back(name);
  }
  const std::string whose = g_failed_pick_row == v1::ROW_UNSPECIFIED
                                ? "Every row's mask variable is set (the job's row is not known)"
                                : absl::StrCat("The ", placement::RowName(g_failed_pick_row), " mask variable",
                                               hide.size() > 1 ? "s are" : " is", " set");
  std::printf(
      "false ;\n"
      "# devplace pick failed (its error is on stderr): nothing is leased. %s to a value that shows no device\n"
      "# (%s) so that nothing started from this shell sees every device, and eval fails\n"
      "# (`eval \"$(devplace pick)\" && cmd` does not run cmd; set -e stops the script). Unset them before picking\n"
      "# again from this shell. devplace run -- cmd picks and runs in one step.\n",
      whose.c_str(), absl::StrJoin(names, ", ").c_str());
  std::fflush(stdout);
}

namespace {

// The note on the lease: devices, the job's device, the lease and who holds it until when.
std::string PickNote(const v1::PickDevicesResponse& pick) {
  const v1::LeaseInfo& lease = pick.lease();
  std::string holder;
  switch (lease.holder()) {
    case v1::LEASE_HOLDER_TTL:
      holder = absl::StrCat("until ", Timestamp(lease.expires_at()), " unless renewed (devplace renew --lease_id=",
                            lease.lease_id(), " --ttl=D)");
      break;
    case v1::LEASE_HOLDER_PARENT:
      holder = absl::StrCat("held while the shell (pid ", lease.pid(), ") runs");
      break;
    default:
      holder = absl::StrCat("held while pid ", lease.pid(), " runs");
  }
  return absl::StrCat(Placed(pick), "; the job's device: ", pick.device(), "; lease ", lease.lease_id(), " ", holder,
                      "; end it sooner: devplace release --lease_id=", lease.lease_id());
}

int RunPick() {
  absl::StatusOr<PickOptions> options = PickOptionsFromFlags(v1::LEASE_HOLDER_PARENT);
  if (!options.ok()) return UsageError("pick", options.status().message());
  g_failed_pick_row = options->row;
  if (options->holder == v1::LEASE_HOLDER_PARENT) {
    absl::StatusOr<pid_t> holder = PickHolder();
    if (!holder.ok()) return Fail(holder.status());
    options->holder_pid = *holder;
  }
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::PickDevicesResponse> pick = client.Pick(*options);
    if (!pick.ok()) {
      // The daemon answered: the row the pick was for is the job's answer's (P-PICK step 1: its
      // workload, TRAINING when unspecified), so that the shell code hides only that row's devices.
      if (g_failed_pick_row == v1::ROW_UNSPECIFIED && !absl::IsUnavailable(pick.status()) &&
          !absl::IsDeadlineExceeded(pick.status()) && !absl::GetFlag(FLAGS_json)) {
        ResolveOptions job = options->job;
        if (job.workload == v1::WORKLOAD_UNSPECIFIED) job.workload = v1::WORKLOAD_TRAINING;
        absl::StatusOr<v1::ResolveDeviceResponse> answer = client.Resolve(job);
        if (answer.ok() && placement::NoDeviceEnvironment(answer->backend()).size() > 0) {
          g_failed_pick_row = answer->backend();
        }
      }
      return Fail(SpellWaitCommand(pick.status()));
    }
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*pick);
    // `;` after each command, the note last: see PrintPickFailClosed.
    for (const std::string& name : pick->unset()) std::printf("unset %s;\n", name.c_str());
    for (const auto& [name, value] : pick->env()) std::printf("export %s=%s;\n", name.c_str(), ShellQuote(value).c_str());
    const std::string note = PickNote(*pick);
    std::printf("# devplace: %s\n", note.c_str());
    std::fflush(stdout);
    // Also on stderr, which eval does not swallow (not where stdout shows it already, a terminal),
    // with the pick's warnings.
    if (!isatty(STDOUT_FILENO)) std::fprintf(stderr, "devplace pick: %s\n", note.c_str());
    for (const std::string& w : pick->warnings()) std::fprintf(stderr, "devplace pick: warning: %s\n", w.c_str());
    if (isatty(STDOUT_FILENO)) {
      std::fprintf(stderr,
                   "devplace pick: the lines above were printed, not run: this shell (pid %u) now holds the lease "
                   "and its devices stay taken until it exits or `devplace release --lease_id=%s`; to hand them to a "
                   "job, run eval \"$(devplace pick ...)\" && cmd, or devplace run -- cmd\n",
                   pick->lease().pid(), pick->lease().lease_id().c_str());
    } else if (isatty(STDERR_FILENO) && pick->lease().holder() == v1::LEASE_HOLDER_PARENT) {
      std::fprintf(stderr, "devplace pick: this shell (pid %u) now holds the lease: exit it, or run devplace release "
                           "--lease_id=%s, to free the devices\n",
                   pick->lease().pid(), pick->lease().lease_id().c_str());
    }
    return 0;
  });
}

}  // namespace

std::string LeaseTtlFlagError(absl::Duration ttl, absl::string_view zero) {
  const absl::Duration low = absl::Milliseconds(placement::kMinLeaseTtlMs);
  const absl::Duration high = absl::Milliseconds(placement::kMaxLeaseTtlMs);
  if (ttl == absl::ZeroDuration() || (ttl >= low && ttl <= high)) return "";
  return absl::StrCat("--ttl=", absl::FormatDuration(ttl), ": want a duration from ", absl::FormatDuration(low), " to ",
                      absl::FormatDuration(high), " (e.g. 30m; ", zero, ")");
}

absl::Status SpellWaitCommand(const absl::Status& status) {
  std::string message(status.message());
  const size_t at = message.find(placement::kWaitCommands);
  if (at == std::string::npos) return status;
  // Words a shell reads as they are; any other is quoted.
  const auto word = [](const std::string& w) {
    const bool plain = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789_-./=:,+@%") == std::string::npos;
    return plain ? w : ShellQuote(w);
  };
  std::string line = "devplace";
  bool command_seen = false, after_dashes = false;
  for (size_t i = 0; i < g_command_line.size(); ++i) {
    const std::string& arg = g_command_line[i];
    after_dashes = after_dashes || arg == "--";
    if (!after_dashes && (arg == "--wait" || arg == "-wait")) {
      ++i;  // `--wait 5m`: its value goes too
      continue;
    }
    if (!after_dashes && (absl::StartsWith(arg, "--wait=") || absl::StartsWith(arg, "-wait="))) continue;
    absl::StrAppend(&line, " ", word(arg));
    if (!command_seen && !after_dashes && arg == g_command) {
      command_seen = true;
      absl::StrAppend(&line, " --wait=D");
    }
  }
  if (line.size() > 300) line = absl::StrCat(line.substr(0, 300), " ...");
  message.replace(at, std::string(placement::kWaitCommands).size(), line);
  return absl::Status(status.code(), message);
}

absl::StatusOr<v1::PickDevicesResponse> PickOverAnyTransport(Client& client, PickOptions& options) {
  absl::StatusOr<v1::PickDevicesResponse> pick = client.Pick(options);
  if (!pick.ok() && absl::IsFailedPrecondition(pick.status()) && options.holder != v1::LEASE_HOLDER_TTL &&
      absl::StrContains(pick.status().message(), "needs the unix socket")) {
    // Over TCP: a TTL lease, asked for here, that the caller (devplace run) keeps alive.
    options.holder = v1::LEASE_HOLDER_TTL;
    if (options.ttl == absl::ZeroDuration()) options.ttl = absl::Minutes(1);
    pick = client.Pick(options);
  }
  return pick;
}

absl::StatusOr<PickOptions> PickOptionsFromFlags(v1::LeaseHolder process_holder) {
  PickOptions options;
  // The job: this process's environment, /dev nodes and DRA allocation, as `resolve` sends them
  // (--env, --no_environment, --job_device_nodes, --runtime_backends, --dra_metadata_dir).
  absl::StatusOr<ResolveOptions> job = OptionsFromFlags(/*offline=*/false, /*use_environment=*/true,
                                                        /*workload_required=*/false);
  if (!job.ok()) return job.status();
  options.job = *std::move(job);
  const int32_t count = absl::GetFlag(FLAGS_count);
  if (count < 1 || count > 64) return absl::InvalidArgumentError(absl::StrCat("--count=", count, ": want 1 to 64"));
  options.count = static_cast<uint32_t>(count);
  if (const std::string min_free = absl::GetFlag(FLAGS_min_free); !min_free.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseSize(min_free);
    if (!bytes.ok()) return bytes.status();
    options.min_free_bytes = *bytes;
  }
  options.allow_shared = absl::GetFlag(FLAGS_shared);
  if (const std::string row = absl::GetFlag(FLAGS_row); !row.empty()) {
    const placement::BackendSpec* found = nullptr;
    std::vector<std::string> names;
    for (const placement::BackendSpec& spec : placement::Backends()) {
      if (spec.row == v1::ROW_CPU || spec.row == v1::ROW_MPS) continue;
      names.emplace_back(spec.name);
      if (row == spec.name) found = &spec;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--row=", row, ": want one of ", absl::StrJoin(names, ", ")));
    }
    options.row = found->row;
  }
  // The daemon's bounds (PickDevicesRequest.ttl_ms, wait_ms: placement/pick.h), checked here so
  // that the error names the flag.
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  if (const std::string error = LeaseTtlFlagError(ttl, "0: none, the lease is held for the shell or the command");
      !error.empty()) {
    return absl::InvalidArgumentError(error);
  }
  const absl::Duration wait = absl::GetFlag(FLAGS_wait);
  if (wait < absl::ZeroDuration() || wait > absl::Milliseconds(placement::kMaxPickWaitMs)) {
    return absl::InvalidArgumentError(absl::StrCat("--wait=", absl::FormatDuration(wait), ": want a duration from 0 to ",
                                                   absl::FormatDuration(absl::Milliseconds(placement::kMaxPickWaitMs)),
                                                   " (e.g. 10m; 0: fail at once when too few are free)"));
  }
  options.ttl = ttl;
  options.wait = wait;
  options.holder = ttl > absl::ZeroDuration() ? v1::LEASE_HOLDER_TTL : process_holder;
  return options;
}

const std::vector<const char*>& PickFlagNames() {
  static const std::vector<const char*>* const names = [] {
    auto* flags = new std::vector<const char*>{"count", "min_free", "shared", "row", "ttl", "wait"};
    for (const char* name : RequestFlagNames(RequestFlagUser::kPick)) flags->push_back(name);
    return flags;
  }();
  return *names;
}

Command PickCommand() {
  return {"pick",
          "Shared hosts: lease the least used devices and print the export lines that hand them to a job.",
          "eval \"$(devplace pick [--count=N] [--min_free=SIZE] [--shared] [--ttl=D] [--wait=D])\" && cmd",
          "Calls PickDevices with this shell's environment (its masks, /dev nodes and DRA allocation bound the\n"
          "choice: a device outside them is never picked) and prints `unset` / `export` lines for eval, and a\n"
          "comment naming the devices, the job's device string and the lease (also on stderr, which eval does\n"
          "not hide, with the pick's warnings). The daemon picks the least used devices nobody leased (fewest\n"
          "processes, then least memory in use) and leases them: over the unix socket to the process that evals\n"
          "the output and runs the job (the ancestor that reads this command's stdout, past the subshells of\n"
          "`$(...)` and wrappers such as timeout or flock; a wrapper that would hold it is refused; released\n"
          "when that shell exits, or by devplace release --lease_id=ID), with\n"
          "--ttl for a time to live (over TCP --ttl is required). Two picks at once never get the same device.\n"
          DEVPLACE_PICK_HEALTH_HELP
          "Too few free: FAILED_PRECONDITION listing each device's usage, or wait with --wait. Whatever fails,\n"
          "exit 1 and stdout sets the mask variables of the job's row (of every row when the daemon does not\n"
          "answer) to show no device, e.g. CUDA_VISIBLE_DEVICES= , and ends with `false`, so eval fails and\n"
          "`&& cmd` never runs on every device. --json prints the PickDevicesResponse (nothing on stdout on failure). Scripts\n"
          "and units: `devplace run -- cmd` picks and runs in one step.",
          PickFlagNames(), &RunPick};
}

}  // namespace devplace::cli
