// --inventory=FILE: `resolve` and `labels` work offline against a saved inventory (cli.h's
// ReadInventory).
#include <cstring>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/common/bounded_read.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, inventory, "",
          "Work offline (resolve, labels, slurm gres, task-prolog and health-check) against a saved inventory (JSON from `devplace inventory --json` or "
          "`devplace-probe --json`, or devplace-probe's binary output); no daemon is contacted");

namespace devplace::cli {
namespace {

// A saved inventory: a regular file of at most this much (a 256-GPU host's JSON is about 300 KB),
// read within this time (client/common/bounded_read.h's rule).
constexpr uint64_t kMaxInventoryBytes = 64 * reading::kMiB;
constexpr absl::Duration kInventoryReadTime = absl::Seconds(10);

// The inventory in `path`: protobuf JSON, or the serialized message devplace-probe writes.
absl::StatusOr<v1::Inventory> ParseInventoryFile(const std::string& path) {
  if (const int error = reading::StatPath(path).error; error != 0) {
    return absl::NotFoundError(absl::StrCat("--inventory=", path, ": cannot read: ", std::strerror(error)));
  }
  reading::ReadBudget budget(kInventoryReadTime, kMaxInventoryBytes);
  absl::StatusOr<std::string> read = reading::ReadRegularFile(path, kMaxInventoryBytes, budget);
  if (!read.ok()) return absl::InvalidArgumentError(absl::StrCat("--inventory=", path, ": ", read.status().message()));
  const std::string content = *std::move(read);
  v1::Inventory inv;
  google::protobuf::util::JsonParseOptions json_options;
  json_options.ignore_unknown_fields = true;
  const auto json_status = google::protobuf::util::JsonStringToMessage(content, &inv, json_options);
  if (json_status.ok()) return inv;
  inv.Clear();
  if (!content.empty() && content.find_first_not_of(" \t\r\n") != std::string::npos && content[0] != '{' &&
      inv.ParseFromString(content)) {
    return inv;
  }
  return absl::InvalidArgumentError(absl::StrCat("--inventory=", path, ": not an inventory (JSON: ",
                                                 json_status.ToString(), ")"));
}

}  // namespace

absl::StatusOr<v1::Inventory> ReadInventory(const std::string& path) {
  if (reading::StatPath(path).directory()) {
    return absl::InvalidArgumentError(absl::StrCat("--inventory=", path, ": is a directory, not an inventory file"));
  }
  absl::StatusOr<v1::Inventory> inv = ParseInventoryFile(path);
  // Every probe reports the cpu row first; anything else parsed by accident ("{}", stray bytes).
  if (inv.ok() && (inv->backends_size() == 0 || inv->backends(0).row() != v1::ROW_CPU)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inventory=", path, ": not a devplace inventory (no cpu row); save one with `devplace inventory --json` "
        "or `devplace-probe --json`"));
  }
  return inv;
}

int WithInventoryFile(const std::string& path, absl::FunctionRef<int(const v1::Inventory&)> body) {
  absl::StatusOr<v1::Inventory> inv = ReadInventory(path);
  // A file that cannot be read or is not an inventory is the caller's input: a usage error (exit
  // 2) naming --inventory and the OS error, as every other file flag has it.
  if (!inv.ok()) return UsageError(g_command, inv.status().message());
  return body(*inv);
}

}  // namespace devplace::cli
