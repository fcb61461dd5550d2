// `devplace version`: this client's version and, like `kubectl version`, the version of the daemon
// it reaches (Inventory.daemon_version). `devplace --version` (devplace.cc) prints the client's only.
#include <cstdio>
#include <string>

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

namespace devplace::cli {
namespace {

int RunVersion() {
  const bool json = absl::GetFlag(FLAGS_json);
  google::protobuf::Struct report;
  (*report.mutable_fields())["clientVersion"].set_string_value(kVersion);
  if (!json) std::printf("Client: devplace %s\n", kVersion);
  std::fflush(stdout);
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::Inventory> inventory = client.Inventory();
    if (!inventory.ok()) {
      if (json) PrintJson(report);
      return Fail(absl::Status(inventory.status().code(),
                               absl::StrCat("cannot reach the daemon for its version: ", inventory.status().message())));
    }
    const std::string& daemon = inventory->daemon_version();
    if (json) {
      if (!daemon.empty()) (*report.mutable_fields())["daemonVersion"].set_string_value(daemon);
      return PrintJson(report);
    }
    std::printf("Daemon: devplaced %s\n", daemon.empty() ? "(version not reported)" : daemon.c_str());
    return 0;
  });
}

}  // namespace

Command VersionCommand() {
  return {"version", "Print this client's version and the daemon's (exit 1 when the daemon cannot be reached).",
          "devplace version",
          "Prints `Client: devplace VERSION`, then asks the daemon for its inventory and prints `Daemon: devplaced\n"
          "VERSION` (Inventory.daemon_version). When the daemon cannot be reached, the client line is still printed\n"
          "and the error follows on stderr (exit 1). With --json: {\"clientVersion\": ..., \"daemonVersion\": ...},\n"
          "daemonVersion absent when the daemon was not reached or did not report one. `devplace --version`\n"
          "prints `devplace VERSION` only and contacts no daemon.",
          {}, &RunVersion};
}

}  // namespace devplace::cli
