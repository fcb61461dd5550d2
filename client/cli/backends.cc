// `devplace backends`: the hardware table (ListBackends), one row per backend.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

namespace devplace::cli {
namespace {

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

}  // namespace

Command BackendsCommand() {
  return {"backends", "Show the hardware table: rows, device types, packages, mask variables.", "devplace backends",
          "Prints the 12 rows devplace places on, as the daemon's ListBackends returns them.", {}, &RunBackends};
}

}  // namespace devplace::cli
