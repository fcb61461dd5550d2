// `devplace labels`: the Kubernetes node labels devplaced publishes, from the daemon's inventory
// or, with --inventory=FILE, from a saved one.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "devplace/client.h"
#include "server/export/labels.h"

namespace devplace::cli {
namespace {

int PrintLabels(const v1::Inventory& inv) {
  const std::vector<labels::Label> node_labels = labels::NodeLabels(inv);
  std::string out;
  if (absl::GetFlag(FLAGS_json)) {
    // Keys and values hold only [A-Za-z0-9_./-]: nothing to escape.
    out = "{";
    for (size_t i = 0; i < node_labels.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "  \"", node_labels[i].first, "\": \"", node_labels[i].second, "\"");
    }
    absl::StrAppend(&out, node_labels.empty() ? "}\n" : "\n}\n");
  } else {
    for (const auto& [key, value] : node_labels) absl::StrAppend(&out, key, "=", value, "\n");
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

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
