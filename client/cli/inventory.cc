// `devplace inventory`: the daemon's current inventory (output.h's PrintInventory).
#include "absl/status/statusor.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

namespace devplace::cli {
namespace {

int RunInventory() {
  return WithClient([](Client& client) {
    absl::StatusOr<v1::Inventory> inv = client.Inventory();
    return inv.ok() ? PrintInventory(*inv) : Fail(inv.status());
  });
}

}  // namespace

Command InventoryCommand() {
  return {"inventory", "Show the host's accelerator inventory (the daemon's current snapshot).", "devplace inventory",
          "Prints the host, the backends (rows) with their state, every device with its HEALTH (ok, degraded:\n"
          "why, fault, lost; docs/PROBE.md \"Device health\") and USABLE columns, each device's usage with the\n"
          "LEASE that holds it, the leases, and the probers' reports. --json prints the whole Inventory\n"
          "message, health counters and leases included.",
          {},
          &RunInventory};
}

}  // namespace devplace::cli
