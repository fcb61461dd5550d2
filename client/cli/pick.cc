// `devplace pick`: on a shared host, asks the daemon for the least used devices of the job's row
// (PickDevices) and prints the `export` lines that make a job see exactly them, for
// `eval "$(devplace pick)"`. The lease is held for the shell that evaluates them (this command's
// parent, LEASE_HOLDER_PARENT) over the unix socket, or for --ttl. The flags are shared with
// `devplace run` (run.cc) through PickOptionsFromFlags().
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
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
#include "devplace/client.h"
#include "server/placement/backends.h"

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
          "Hold the lease for this long (1s to 24h) instead of for a process; over TCP a TTL lease is the only "
          "kind (0 there: the daemon's 5m)");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "When too few devices are free, let the daemon wait up to this long (at most 1h) for a lease to end "
          "instead of failing at once");

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

int RunPick() {
  absl::StatusOr<PickOptions> options = PickOptionsFromFlags(v1::LEASE_HOLDER_PARENT);
  if (!options.ok()) return UsageError("pick", options.status().message());
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::PickDevicesResponse> pick = PickOverAnyTransport(client, *options);
    if (!pick.ok()) return Fail(pick.status());
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*pick);
    for (const std::string& name : pick->unset()) std::printf("unset %s\n", name.c_str());
    for (const auto& [name, value] : pick->env()) std::printf("export %s=%s\n", name.c_str(), ShellQuote(value).c_str());
    const v1::LeaseInfo& lease = pick->lease();
    std::printf("# devplace: %s; the job's device: %s; %s\n", Placed(*pick).c_str(), pick->device().c_str(),
                lease.holder() == v1::LEASE_HOLDER_TTL
                    ? absl::StrCat("lease ", lease.lease_id(), " until ", Timestamp(lease.expires_at())).c_str()
                    : absl::StrCat("lease ", lease.lease_id(), " held while pid ", lease.pid(), " runs").c_str());
    std::fflush(stdout);
    return 0;
  });
}

}  // namespace

absl::StatusOr<v1::PickDevicesResponse> PickOverAnyTransport(Client& client, PickOptions& options) {
  absl::StatusOr<v1::PickDevicesResponse> pick = client.Pick(options);
  if (!pick.ok() && absl::IsFailedPrecondition(pick.status()) && options.holder != v1::LEASE_HOLDER_TTL &&
      absl::StrContains(pick.status().message(), "needs the unix socket")) {
    options.holder = v1::LEASE_HOLDER_UNSPECIFIED;  // over TCP: the daemon's TTL lease
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
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  if (ttl != absl::ZeroDuration() && (ttl < absl::Seconds(1) || ttl > absl::Hours(24))) {
    return absl::InvalidArgumentError(absl::StrCat("--ttl=", absl::FormatDuration(ttl), ": want 1s to 24h"));
  }
  const absl::Duration wait = absl::GetFlag(FLAGS_wait);
  if (wait < absl::ZeroDuration() || wait > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat("--wait=", absl::FormatDuration(wait), ": want 0 to 1h"));
  }
  options.ttl = ttl;
  options.wait = wait;
  options.holder = ttl > absl::ZeroDuration() ? v1::LEASE_HOLDER_TTL : process_holder;
  return options;
}

const std::vector<const char*>& PickFlagNames() {
  static const std::vector<const char*> names = {"count",          "min_free",         "shared",
                                                  "row",            "ttl",              "wait",
                                                  "env",            "no_environment",   "job_device_nodes",
                                                  "runtime_backends", "dra_metadata_dir", "workload"};
  return names;
}

Command PickCommand() {
  return {"pick",
          "Shared hosts: lease the least used devices and print the export lines that hand them to a job.",
          "eval \"$(devplace pick [--count=N] [--min_free=SIZE] [--shared] [--ttl=D] [--wait=D])\"",
          "Calls PickDevices with this shell's environment (its masks, /dev nodes and DRA allocation bound the\n"
          "choice: a device outside them is never picked) and prints `unset` / `export` lines for eval, and a\n"
          "comment naming the devices, the job's device string and the lease. The daemon picks the least used\n"
          "devices nobody leased (fewest processes, then least memory in use) and leases them: over the unix\n"
          "socket to this command's parent (the shell that evals the output; released when it exits), with\n"
          "--ttl or over TCP for a time to live. Two picks at once never get the same device. Too few free:\n"
          "exit 1 with FAILED_PRECONDITION listing each device's usage, or wait with --wait. --json prints the\n"
          "PickDevicesResponse. `devplace run` runs a command under a lease instead.",
          PickFlagNames(), &RunPick};
}

}  // namespace devplace::cli
