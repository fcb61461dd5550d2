// --inventory=FILE: `resolve` and `labels` work offline against a saved inventory (cli.h's
// ReadInventory).
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, inventory, "",
          "Work offline (resolve, labels) against a saved inventory (JSON from `devplace inventory --json` or "
          "`devplace-probe --json`, or devplace-probe's binary output); no daemon is contacted");

namespace devplace::cli {
namespace {

// The inventory in `path`: protobuf JSON, or the serialized message devplace-probe writes.
absl::StatusOr<v1::Inventory> ParseInventoryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--inventory=", path, ": cannot read: ", std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string content = buffer.str();
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
  if (std::filesystem::is_directory(path)) {
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
