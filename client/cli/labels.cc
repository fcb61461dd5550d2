// `devplace labels`: the Kubernetes node labels devplaced publishes, from the daemon's inventory
// or, with --inventory=FILE, from a saved one.
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"
#include "server/export/labels.h"

namespace devplace::cli {
namespace {

int PrintLabels(const v1::Inventory& inv) { return PrintKeyValues(labels::NodeLabels(inv)); }

int RunLabels() {
  const std::string inventory_path = absl::GetFlag(FLAGS_inventory);
  if (inventory_path.empty()) {
    return WithClient([](Client& client) {
      absl::StatusOr<v1::Inventory> inv = client.Inventory();
      return inv.ok() ? PrintLabels(*inv) : Fail(inv.status());
    });
  }
  return WithInventoryFile(inventory_path, PrintLabels);
}

}  // namespace

Command LabelsCommand() {
  return {"labels", "Print the host's Kubernetes node labels (key=value lines, as NFD publishes them).",
          "devplace labels [--inventory=FILE]",
          "Prints the node labels devplaced writes to --nfd_features_file (namespace\n"
          "devplace.feature.node.kubernetes.io), one key=value line each, sorted; --json prints one JSON\n"
          "object instead. From the daemon's inventory, or offline from --inventory=FILE. docs/OPERATOR.md\n"
          "(\"Node labels\") lists the keys and the rules for unknown and heterogeneous values.",
          {"inventory"}, &RunLabels};
}

}  // namespace devplace::cli
