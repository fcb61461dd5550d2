// `devplace refresh`: the daemon re-probes now (RefreshInventory); prints the new inventory.
#include "absl/status/statusor.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

namespace devplace::cli {
namespace {

int RunRefresh() {
  return WithClient([](Client& client) {
    absl::StatusOr<v1::Inventory> inv = client.Refresh();
    return inv.ok() ? PrintInventory(*inv) : Fail(inv.status());
  });
}

}  // namespace

Command RefreshCommand() {
  return {"refresh", "Make the daemon re-probe the host now; prints the resulting inventory.", "devplace refresh",
          "Calls RefreshInventory. The daemon allows it only to root, its own user and members of its socket\n"
          "group over the unix socket, and to mTLS-authenticated clients (PERMISSION_DENIED otherwise), and\n"
          "starts at most one probe per --refresh_min_interval (RESOURCE_EXHAUSTED, with the time to wait).",
          {}, &RunRefresh};
}

}  // namespace devplace::cli
