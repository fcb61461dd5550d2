// `devplace fleet`: asks many daemons at once for their inventory, or (--resolve) where a job
// would run on each, and prints one row per target. One libdevplace Client per target, called
// from a small pool of threads; the results land in a vector indexed like the targets, so the
// output keeps the targets' order.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/fleet.pb.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "client/cli/request_flags.h"
#include "client/common/bounded_read.h"
#include "devplace/client.h"
#include "server/common/address.h"
#include "server/placement/backends.h"

ABSL_FLAG(std::string, targets, "",
          "Required: the daemons to ask, as a comma list of host:port / [v6]:port / unix:/path targets, or "
          "the path of a file with one target per line (`#` comments and blank lines allowed)");
ABSL_FLAG(int, concurrency, 16, "How many targets are called at the same time, 1..1024");
ABSL_FLAG(bool, resolve, false,
          "Ask each node ResolveDevice for the job the request flags describe (--workload is then "
          "required) instead of its inventory");

namespace devplace::cli {
namespace {

constexpr int kExitSomeFailed = 1;
constexpr int kMaxConcurrency = 1024;
constexpr const char* kAccepted = kTargetForms;

// A targets file: a regular file of at most 1 MiB (a fleet of thousands of nodes is a few hundred
// KB), read within 10 s (client/common/bounded_read.h's rule).
constexpr uint64_t kMaxTargetsBytes = reading::kMiB;

absl::StatusOr<std::vector<std::string>> ReadTargetsFile(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--targets=", path, ": cannot read: ", std::strerror(errno)));
  }
  reading::ReadBudget budget(absl::Seconds(10), kMaxTargetsBytes);
  std::vector<std::string> targets;
  absl::Status bad;
  int number = 0;
  const absl::StatusOr<reading::LinesEnd> end =
      reading::ReadLines(path, kMaxTargetsBytes, budget, [&](absl::string_view line) {
        ++number;
        absl::string_view target = line;
        const size_t hash = target.find('#');
        if (hash != absl::string_view::npos) target = target.substr(0, hash);
        target = absl::StripAsciiWhitespace(target);
        if (target.empty()) return true;
        if (!ParseAddress(target, AddressUse::kDial)) {
          bad = absl::InvalidArgumentError(absl::StrCat("--targets=", path, ":", number, ": \"",
                                                        reading::CutUtf8(reading::EscapeBytes(target), 256),
                                                        "\" is not a target; ", kAccepted));
          return false;
        }
        targets.emplace_back(target);
        return true;
      });
  if (!bad.ok()) return bad;
  if (!end.ok()) return absl::InvalidArgumentError(absl::StrCat("--targets=", path, ": ", end.status().message()));
  if (*end == reading::LinesEnd::kLimit) {
    return absl::InvalidArgumentError(absl::StrCat("--targets=", path, ": larger than ",
                                                   reading::SizeText(kMaxTargetsBytes), "; not read"));
  }
  if (targets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--targets=", path, ": the file names no target"));
  }
  return targets;
}

// The targets --targets=VALUE names, in order: VALUE is the path of an existing file (one target
// per line, `#` comments, blank lines skipped) or else a comma list. Each target is
// "unix:PATH" (PATH non-empty) or "HOST:PORT" / "[V6]:PORT" with PORT in 1..65535.
// INVALID_ARGUMENT (a usage error) naming the file and line, or the list position, of a malformed
// target; also for an empty VALUE, a file that names no target, a directory, a file that cannot
// be read, and a VALUE without ':' that is no file.
absl::StatusOr<std::vector<std::string>> ParseFleetTargets(const std::string& value) {
  if (value.empty()) {
    return absl::InvalidArgumentError("--targets is required: a file, or a comma list of host:port / unix:/path");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(value, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--targets=", value, ": is a directory, not a targets file"));
  }
  if (std::filesystem::exists(value, ec)) return ReadTargetsFile(value);
  if (value.find(':') == std::string::npos) {  // not a target list: a file that is not there
    return absl::InvalidArgumentError(
        absl::StrCat("--targets=", value, ": no such file (and not a target list; ", kAccepted, ")"));
  }
  std::vector<std::string> targets;
  int position = 0;
  for (absl::string_view piece : absl::StrSplit(value, ',')) {
    ++position;
    piece = absl::StripAsciiWhitespace(piece);
    if (!ParseAddress(piece, AddressUse::kDial)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--targets: item ", position, " \"", piece, "\" is not a target; ", kAccepted));
    }
    targets.emplace_back(piece);
  }
  return targets;
}

// The flags `fleet` accepts besides the global ones (--timeout, --json, --tls_*): its own, then the
// request flags of `devplace resolve` that describe the job (read by OptionsFromFlags).
std::vector<const char*> FleetFlags() {
  std::vector<const char*> flags = {"targets", "concurrency", "resolve"};
  for (const char* name : RequestFlagNames(RequestFlagUser::kFleet)) flags.push_back(name);
  return flags;
}

// The FleetRow of each backend of `inv` that has devices.
void Summarize(const v1::Inventory& inv, FleetNode& node) {
  node.set_hostname(inv.host().hostname());
  for (const v1::Backend& b : inv.backends()) {
    if (b.devices().empty()) continue;
    FleetRow& row = *node.add_rows();
    row.set_name(b.name());
    row.set_state(Strip("BACKEND_STATE_", v1::BackendState_Name(b.state())));
    row.set_total(b.devices_size());
    for (const v1::Device& d : b.devices()) {
      if (d.usable()) row.set_usable(row.usable() + 1);
      if (std::find(row.models().begin(), row.models().end(), d.name()) == row.models().end()) row.add_models(d.name());
      if (d.has_memory_total_bytes()) {
        row.add_memory_total_bytes(d.memory_total_bytes());
      } else {
        row.set_memory_unknown(row.memory_unknown() + 1);
      }
    }
  }
}

// Asks `node.target()` and fills `node`. `job` set: ResolveDevice; else GetInventory.
void Query(const std::optional<ResolveOptions>& job, FleetNode& node) {
  absl::Status status;
  ConnectOptions options = ConnectOptionsFromFlags();  // --timeout and the --tls_* flags
  options.address = node.target();
  absl::StatusOr<Client> client = Client::Connect(options);
  if (!client.ok()) {
    status = client.status();
  } else if (job) {
    absl::StatusOr<v1::ResolveDeviceResponse> answer = client->Resolve(*job);
    if (answer.ok()) *node.mutable_resolved() = *std::move(answer);
    status = answer.status();
  } else {
    absl::StatusOr<v1::Inventory> inv = client->Inventory();
    if (inv.ok()) {
      Summarize(*inv, node);
      *node.mutable_inventory() = *std::move(inv);
    }
    status = inv.status();
  }
  node.set_code(absl::StatusCodeToString(status.code()));
  // libdevplace ends an unreachable target's message with how to choose another daemon
  // (DEVPLACE_ADDRESS, --address); here the target comes from --targets.
  std::string error(status.message());
  if (const size_t note = error.find(" [devplace target "); note != std::string::npos) {
    error = absl::StrCat(error.substr(0, note), " [target ", node.target(), " from --targets]");
  }
  node.set_error(error);
}

// The widest a table cell may be, per column kind: a row must fit a terminal, whatever a node
// says. --json has every text in full.
constexpr size_t kNameWidth = 40;     // target, hostname, models
constexpr size_t kWarningWidth = 60;  // the first warning, and how many more
constexpr size_t kErrorWidth = 90;

// One line, printable, at most `width` characters (cut ones end in "..."): a node's message may
// quote anything.
std::string Cell(std::string text, size_t width = kNameWidth) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (text.size() > width) {
    text = text.substr(0, width - 3) + "...";
  }
  return text.empty() ? "-" : text;
}

std::string ErrorCell(const FleetNode& node) {
  return node.code() == "OK" ? "-" : Cell(absl::StrCat(node.code(), ": ", node.error()), kErrorWidth);
}

// The first warning, shortened, and "(+N more)".
std::string WarningsCell(const v1::ResolveDeviceResponse& r) {
  if (r.warnings().empty()) return "-";
  const std::string more = r.warnings_size() > 1 ? absl::StrCat(" (+", r.warnings_size() - 1, " more)") : "";
  return Cell(r.warnings(0), kWarningWidth - more.size()) + more;
}

void PrintInventoryTable(const FleetReport& report) {
  std::vector<std::vector<std::string>> rows = {
      {"TARGET", "HOSTNAME", "ROWS", "STATE", "DEVICES", "MODELS", "MEMORY", "ERROR"}};
  for (const FleetNode& node : report.nodes()) {
    if (node.code() != "OK") {
      rows.push_back({Cell(node.target()), "-", "-", "-", "-", "-", "-", ErrorCell(node)});
      continue;
    }
    std::vector<std::string> names, states, devices, models, memory;
    for (const FleetRow& row : node.rows()) {
      names.push_back(row.name());
      states.push_back(row.state());
      devices.push_back(absl::StrCat(row.usable(), "/", row.total(), " usable"));
      models.push_back(absl::StrJoin(row.models(), ", ", [](std::string* out, const std::string& m) {
        absl::StrAppend(out, m.empty() ? "?" : m);
      }));
      std::vector<std::string> sizes;  // distinct, in host order
      for (uint64_t bytes : row.memory_total_bytes()) {
        const std::string size = Bytes(bytes);
        if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
      }
      if (row.memory_unknown() > 0) sizes.push_back("?");
      memory.push_back(absl::StrJoin(sizes, ", "));
    }
    if (names.empty()) {  // no accelerator: the cpu row only
      rows.push_back({Cell(node.target()), Cell(node.hostname()), "cpu only", "-", "-", "-", "-", "-"});
      continue;
    }
    rows.push_back({Cell(node.target()), Cell(node.hostname()), Cell(absl::StrJoin(names, "; ")),
                    Cell(absl::StrJoin(states, "; ")), Cell(absl::StrJoin(devices, "; ")),
                    Cell(absl::StrJoin(models, "; ")), Cell(absl::StrJoin(memory, "; ")), "-"});
  }
  PrintTable(rows);
}

void PrintResolveTable(const FleetReport& report) {
  std::vector<std::vector<std::string>> rows = {{"TARGET", "DEVICE", "BACKEND", "DEVICES", "WARNINGS", "ERROR"}};
  for (const FleetNode& node : report.nodes()) {
    if (node.code() != "OK") {
      rows.push_back({Cell(node.target()), "-", "-", "-", "-", ErrorCell(node)});
      continue;
    }
    const v1::ResolveDeviceResponse& r = node.resolved();
    rows.push_back({Cell(node.target()), Cell(r.device()), placement::RowName(r.backend()),
                    r.devices().empty() ? "-" : Cell(absl::StrJoin(r.devices(), ",")), WarningsCell(r), "-"});
  }
  PrintTable(rows);
}

int RunFleet() {
  if (!absl::GetFlag(FLAGS_address).empty()) {
    return UsageError(g_command, "--address does not apply to fleet; name the daemons with --targets");
  }
  absl::StatusOr<std::vector<std::string>> targets = ParseFleetTargets(absl::GetFlag(FLAGS_targets));
  if (!targets.ok()) return UsageError(g_command, targets.status().message());
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  if (concurrency < 1 || concurrency > kMaxConcurrency) {
    return UsageError(g_command, absl::StrCat("--concurrency=", concurrency, ": want 1..", kMaxConcurrency));
  }
  std::optional<ResolveOptions> job;
  if (!absl::GetFlag(FLAGS_resolve)) {
    for (const char* name : RequestFlagNames(RequestFlagUser::kFleet)) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag->CurrentValue() != flag->DefaultValue()) {
        return UsageError(g_command, absl::StrCat("--", name, " describes a job: it applies only with --resolve"));
      }
    }
  } else {
    // The caller's own variables and /dev say nothing about a job on another node.
    absl::StatusOr<ResolveOptions> options = OptionsFromFlags(/*offline=*/false, /*use_environment=*/false);
    if (!options.ok()) return UsageError(g_command, options.status().message());
    job = *std::move(options);
  }

  FleetReport report;
  for (const std::string& target : *targets) report.add_nodes()->set_target(target);
  // Each worker takes the next unasked target; every node is written by exactly one worker.
  std::vector<FleetNode*> nodes;
  for (FleetNode& node : *report.mutable_nodes()) nodes.push_back(&node);
  const int count = static_cast<int>(nodes.size());
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < std::min(concurrency, count); ++i) {
    workers.emplace_back([&] {
      for (int index = next++; index < count; index = next++) Query(job, *nodes[index]);
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (const FleetNode& node : report.nodes()) {
    if (node.code() == "OK") {
      report.set_answered(report.answered() + 1);
    } else {
      report.set_failed(report.failed() + 1);
    }
  }

  if (absl::GetFlag(FLAGS_json)) {
    if (const int status = PrintJson(report); status != 0) return status;
  } else if (job) {
    PrintResolveTable(report);
  } else {
    PrintInventoryTable(report);
  }

  return report.failed() > 0 ? kExitSomeFailed : 0;
}

}  // namespace

Command FleetCommand() {
  return {"fleet", "Ask many daemons at once: their accelerators, or (--resolve) a job's device on each.",
          "devplace fleet --targets=FILE|TARGET,TARGET,... [--resolve --workload=...]",
          "Calls every target (host:port or unix:/path) at once, at most --concurrency at a time, each\n"
          "with the --timeout deadline, and prints one row per target in the order given, whatever order\n"
          "the answers come in. --targets is a comma list or a file with one target per line (`#` starts a\n"
          "comment; blank lines are skipped).\n"
          "Without --resolve (GetInventory) a row has the hostname and, for each accelerator row with\n"
          "devices, its state, usable/total devices, models and memory per device.\n"
          "With --resolve (ResolveDevice, taking the request flags of `devplace resolve`) a row says what the\n"
          "job would get on that node: device, backend, devices and warnings, or the error (e.g.\n"
          "FAILED_PRECONDITION: the node cannot satisfy the request). Only the flags describe the job:\n"
          "this process's environment and /dev are not sent (--no_environment is implied).\n"
          "A target that fails (unreachable: UNAVAILABLE; too slow: DEADLINE_EXCEEDED; or the daemon's\n"
          "refusal) is one error row naming its --targets entry; the other rows still come. Table cells are\n"
          "cut to fit a terminal (targets, names and models at 40 characters, the first warning and a count\n"
          "of the others at 60, errors at 90; a cut cell ends in ...). --json prints a devplace.cli.FleetReport\n"
          "(client/cli/fleet.proto) in the protobuf JSON mapping instead, with each node's whole inventory\n"
          "or ResolveDeviceResponse and every message in full; a memory size a node does not know is left\n"
          "out (memoryUnknown counts it), never written as 0.\n"
          "--timeout=0 sets no deadline (a target that accepts connections but never answers then holds\n"
          "its row until gRPC gives up connecting).\n"
          "Exit status: 0 every target answered; 1 at least one row is an error (all rows are still\n"
          "printed); 2 usage error (no targets, unreadable targets file, a malformed target: the message\n"
          "names its line or position; request flags without --resolve). --address does not apply: use\n"
          "--targets.",
          FleetFlags(), &RunFleet};
}

}  // namespace devplace::cli
