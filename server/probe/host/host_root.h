// HostRoot: every prober reads the host's /sys, /proc and /dev through one root prefix, so the
// daemon can run in a container with the host's trees mounted at e.g. /host, and tests can point
// it at a fixture tree (tests/fixtures/hosts/<name>/).
#ifndef DEVPLACE_SERVER_PROBE_HOST_HOST_ROOT_H_
#define DEVPLACE_SERVER_PROBE_HOST_HOST_ROOT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace::probe {

// A read-only view of a host's file system under a root prefix. Paths passed to the methods are
// absolute host paths ("/sys/bus/pci/devices"); they are resolved under the root. Symbolic links
// are followed by the kernel as usual (on a real host /sys/bus/pci/devices/<bdf> is a link to a
// directory); links inside the tree are relative, so they stay inside the root.
// Errors: NotFound when the path does not exist, PermissionDenied when it cannot be read,
// Internal for other I/O errors; the message names the resolved path.
class HostRoot {
 public:
  // `root` is a directory; "/" (the default) means the live host.
  explicit HostRoot(std::string root = "/");

  // Like the constructor, but checks that `root` is a readable directory
  // (InvalidArgument / NotFound / PermissionDenied otherwise).
  static absl::StatusOr<HostRoot> Open(std::string root);

  // The root prefix as given.
  const std::string& root() const { return root_; }

  // The real path of the host path `path` (which must start with '/').
  std::string Resolve(absl::string_view path) const;

  // The file's content, at most `max_bytes` bytes (sysfs files report a size of 4096 whatever
  // they hold, so this reads until end of file; a longer file is cut there): ReadHostFile
  // (server/common/host_file.h) with HostFileLimit::kTruncate. FailedPrecondition, without
  // opening it, when `path` is not a regular file (a FIFO would block the probe, a device node
  // runs its driver); NotFound also for a /proc/<pid> file whose process ended (ESRCH).
  absl::StatusOr<std::string> ReadFile(absl::string_view path,
                                       size_t max_bytes = 1 << 20) const;

  // ReadFile with surrounding whitespace (the kernel's trailing "\n") removed.
  absl::StatusOr<std::string> ReadTrimmed(absl::string_view path) const;

  // The basename of a symbolic link's target, without resolving it (the target may dangle):
  // for ".../0000:18:00.0/driver -> ../../../bus/pci/drivers/nvidia" this is "nvidia".
  // NotFound when `path` does not exist; InvalidArgument when it is not a link.
  absl::StatusOr<std::string> ReadLinkBasename(absl::string_view path) const;

  // The names in a directory (following links), without "." and "..", sorted by byte order.
  absl::StatusOr<std::vector<std::string>> ListDir(absl::string_view path) const;

  // Whether `path` exists (following links: a dangling link does not exist).
  bool Exists(absl::string_view path) const;

  // Whether `path` is a directory (following links).
  bool IsDirectory(absl::string_view path) const;

 private:
  std::string root_;
};

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_HOST_ROOT_H_
