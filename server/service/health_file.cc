#include "server/service/health_file.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/common/atomic_file.h"
#include "server/service/lease_file.h"
#include "server/service/lease_state.pb.h"

namespace devplace::service {

constexpr char kNotUsed[] = "; starting without the kept readings";

std::string HealthFileBeside(const std::string& lease_file) {
  return absl::StrCat(DirectoryOf(lease_file), "/", kHealthStateFileName);
}

HealthFileContents ReadHealthFile(const std::string& path) {
  HealthFileContents contents;
  absl::StatusOr<std::string> bytes = ReadStateFile(path, kMaxHealthFileBytes, contents.found);
  state::HealthState file;
  if (!bytes.ok()) {
    contents.warning = absl::StrCat(bytes.status().message(), kNotUsed);
  } else if (!contents.found || bytes->empty()) {
    // An empty file (0 bytes: `: > health.state`, or a disk that filled) keeps no readings; it is
    // no other version of the format, which protobuf would read as version 0.
    return contents;
  } else if (!file.ParseFromString(*bytes)) {
    contents.warning = absl::StrCat(path, " is not a health state (corrupt or another format)", kNotUsed);
  } else if (file.version() != kHealthFileVersion) {
    contents.warning = absl::StrCat(path, " has health state version ", file.version(), ", this devplaced reads version ",
                                    kHealthFileVersion, kNotUsed);
  } else {
    contents.readings = std::move(*file.mutable_readings());
  }
  return contents;
}

absl::Status WriteHealthFile(const std::string& path, const v1::Inventory& readings) {
  state::HealthState file;
  file.set_version(kHealthFileVersion);
  *file.mutable_readings() = readings;
  return WriteStateFile(path, file.SerializeAsString());
}

}  // namespace devplace::service
