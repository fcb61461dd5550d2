#include "server/common/safe_directory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace devplace {

absl::Status CheckSafeDirectory(const struct stat& st, absl::string_view name, uid_t owner_ok,
                                absl::string_view risk) {
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(name, " is not a directory"));
  if (st.st_uid != 0 && st.st_uid != owner_ok) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is owned by uid ", st.st_uid, ", not by root or uid ", owner_ok, ": ", risk));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(name,
                                                      " is writable by group or others without the sticky bit (mode ",
                                                      absl::StrFormat("%04o", st.st_mode & 07777), "): ", risk));
  }
  return absl::OkStatus();
}

absl::Status CheckPrivateDirectory(const struct stat& st, absl::string_view name, uid_t owner_ok,
                                   absl::string_view risk) {
  if (absl::Status safe = CheckSafeDirectory(st, name, owner_ok, risk); !safe.ok()) return safe;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(name, " is writable by group or others (mode ",
                                                      absl::StrFormat("%04o", st.st_mode & 07777), "): ", risk));
  }
  return absl::OkStatus();
}

}  // namespace devplace
