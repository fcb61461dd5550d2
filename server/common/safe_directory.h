// The rule for a directory devplaced (often root) creates files in: its unix sockets' directory
// and --nfd_features_file's. Whoever may rename or replace entries in that directory decides what
// the daemon's file is (a socket a client trusts, a feature file NFD turns into node labels) and,
// by swapping the directory itself for a link, where the daemon writes. So the directory must be
// owned by root or the daemon's own user, and must not be writable by group or others unless the
// sticky bit is set (then only an entry's owner may rename or remove it, as in /tmp). A directory
// whose entries' names must be the daemon's alone follows the stricter CheckPrivateDirectory.
#ifndef DEVPLACE_SERVER_COMMON_SAFE_DIRECTORY_H_
#define DEVPLACE_SERVER_COMMON_SAFE_DIRECTORY_H_

#include <sys/stat.h>
#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace devplace {

// Applies the rule to `st` (from stat/fstat of the directory). `name` starts each message (e.g.
// "socket directory /run/devplace"), `risk` ends it (what another user could do). OK, or
// FAILED_PRECONDITION: "<name> is not a directory", "<name> is owned by uid U, not by root or uid
// <owner_ok>: <risk>", "<name> is writable by group or others without the sticky bit (mode
// 0777): <risk>".
absl::Status CheckSafeDirectory(const struct stat& st, absl::string_view name, uid_t owner_ok, absl::string_view risk);

// The stricter rule for a directory whose entries' names only the daemon may create (the lease
// table's): CheckSafeDirectory's, and writable by no one else even with the sticky bit (in a
// sticky directory such as /tmp another user may still create the daemon's file name first, e.g.
// as a directory, so that every write of the file fails). FAILED_PRECONDITION as
// CheckSafeDirectory, or "<name> is writable by group or others (mode 1777): <risk>".
absl::Status CheckPrivateDirectory(const struct stat& st, absl::string_view name, uid_t owner_ok,
                                   absl::string_view risk);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_SAFE_DIRECTORY_H_
