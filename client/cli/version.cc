// `devplace version`: this client's version and, like `kubectl version`, the version of the daemon
// it reaches (Inventory.daemon_version), each with the newest Transformers / Accelerate releases
// its rules know (V-SKEW: a job's newer release gets these rules, with a warning). The client's are
// the resolver linked in (resolve --inventory); the daemon's are what it applies to a request that
// names no release. `devplace --version` (devplace.cc) prints the client's version only.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"
#include "google/protobuf/struct.pb.h"
#include "server/common/version.h"
#include "server/placement/versions.h"

namespace devplace::cli {
namespace {

// {"transformers": "5.15.0", "accelerate": "1.14.0"}
google::protobuf::Value RulesJson(const std::string& transformers, const std::string& accelerate) {
  google::protobuf::Value rules;
  auto& fields = *rules.mutable_struct_value()->mutable_fields();
  fields["transformers"].set_string_value(transformers);
  fields["accelerate"].set_string_value(accelerate);
  return rules;
}

// The daemon's newest rules: the releases its answer applies when the request names none (and
// describes no job). Nullopt when it does not answer (no inventory yet, an error).
std::optional<std::pair<std::string, std::string>> DaemonRules(Client& client) {
  ResolveOptions probe;
  probe.workload = v1::WORKLOAD_TRAINING;
  absl::StatusOr<v1::ResolveDeviceResponse> answer = client.Resolve(probe);
  if (!answer.ok() || answer->transformers_version().empty()) return std::nullopt;
  return std::make_pair(answer->transformers_version(), answer->accelerate_version());
}

int RunVersion() {
  const bool json = absl::GetFlag(FLAGS_json);
  google::protobuf::Struct report;
  (*report.mutable_fields())["clientVersion"].set_string_value(kVersion);
  const std::string tf = placement::NewestVersion(placement::Library::kTransformers).ToString();
  const std::string acc = placement::NewestVersion(placement::Library::kAccelerate).ToString();
  (*report.mutable_fields())["clientNewestRules"] = RulesJson(tf, acc);
  if (!json) std::printf("Client: devplace %s (newest rules: %s)\n", kVersion, placement::NewestRules().c_str());
  std::fflush(stdout);
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::Inventory> inventory = client.Inventory();
    if (!inventory.ok()) {
      if (json) PrintJson(report);
      return Fail(absl::Status(inventory.status().code(),
                               absl::StrCat("cannot reach the daemon for its version: ", inventory.status().message())));
    }
    const std::string& daemon = inventory->daemon_version();
    const std::optional<std::pair<std::string, std::string>> rules = DaemonRules(client);
    if (json) {
      if (!daemon.empty()) (*report.mutable_fields())["daemonVersion"].set_string_value(daemon);
      if (rules) (*report.mutable_fields())["daemonNewestRules"] = RulesJson(rules->first, rules->second);
      return PrintJson(report);
    }
    std::printf("Daemon: devplaced %s%s\n", daemon.empty() ? "(version not reported)" : daemon.c_str(),
                rules ? absl::StrCat(" (newest rules: Transformers ", rules->first, ", Accelerate ", rules->second, ")")
                            .c_str()
                      : "");
    return 0;
  });
}

}  // namespace

Command VersionCommand() {
  return {"version", "Print this client's version and the daemon's (exit 1 when the daemon cannot be reached).",
          "devplace version",
          "Prints `Client: devplace VERSION (newest rules: Transformers X, Accelerate Y)`, then asks the daemon\n"
          "for its inventory and prints `Daemon: devplaced VERSION (newest rules: ...)` (Inventory.daemon_version;\n"
          "the rules are the releases the daemon applies when a request names none: a job with a newer\n"
          "Transformers or Accelerate gets these rules and a warning). When the daemon cannot be reached, the\n"
          "client line is still printed and the error follows on stderr (exit 1). With --json:\n"
          "{\"clientVersion\": ..., \"clientNewestRules\": {\"transformers\": ..., \"accelerate\": ...},\n"
          "\"daemonVersion\": ..., \"daemonNewestRules\": {...}}, the daemon's keys absent when it was not\n"
          "reached or did not report them. `devplace --version` prints `devplace VERSION` only and contacts no\n"
          "daemon.",
          {}, &RunVersion};
}

}  // namespace devplace::cli
