// The one atomic file replace of the daemon's own files (NFD's feature file, the lease table's
// file): a fresh temporary file beside the target, written, fsync'ed, renamed over the target, then
// the directory fsync'ed. Readers see the old or the new file, never a partial one, and a crash
// (kill -9, power loss) after the call returned keeps the new one.
#ifndef DEVPLACE_SERVER_COMMON_ATOMIC_FILE_H_
#define DEVPLACE_SERVER_COMMON_ATOMIC_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace {

// Writes `content` to `path` atomically through "<dir>/.<name>.tmp-<pid>" (a dot file: NFD and
// other directory readers skip it), created with O_EXCL | O_NOFOLLOW (a leftover or a planted link
// at that name is removed first, never followed) and permission bits `mode` (before the umask).
// Errors: the errno-derived status of the failing step, message naming the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content, mode_t mode = 0644);

// The same, relative to the open directory `dir_fd` (openat, renameat): the file lands in that
// directory whatever is at its path by now. `dir` names it in error messages.
absl::Status WriteFileAtomicallyAt(int dir_fd, const std::string& dir, const std::string& name,
                                   absl::string_view content, mode_t mode = 0644);

// Removes the temporary files that WriteFileAtomically(path, ...) calls left behind when their
// process was killed between creating and renaming one: "<dir>/.<name>.tmp-<pid>" for any pid but
// this process's, regular files only (lstat), among the directory's first kMaxScannedEntries
// entries. Returns the names removed. Errors: the directory cannot be opened (the errno-derived
// status naming it). Call it only on a directory no other user may write (CheckPrivateDirectory):
// it trusts the names it finds there.
inline constexpr size_t kMaxScannedEntries = 65536;
absl::StatusOr<std::vector<std::string>> RemoveTemporaryFiles(const std::string& path);

// The directory part of `path`: "." without a slash, "/" for "/name".
std::string DirectoryOf(const std::string& path);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_ATOMIC_FILE_H_
