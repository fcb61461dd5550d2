// `devplace watch`: one line (or, with --json, one JSON object) per inventory revision until
// interrupted or the daemon ends the stream.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

ABSL_FLAG(uint64_t, known_revision, 0,
          "Skip the current snapshot when its revision equals this one (0 = print it)");

namespace devplace::cli {
namespace {

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

}  // namespace

Command WatchCommand() {
  return {"watch", "Print each inventory revision as it arrives, until interrupted.", "devplace watch",
          "Prints one summary line per inventory revision (or one JSON object per revision with --json),\n"
          "starting with the current one, until interrupted (Ctrl-C) or the daemon ends the stream.",
          {"known_revision"}, &RunWatch};
}

}  // namespace devplace::cli
