#include "server/common/host_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace devplace {
namespace {

absl::Status NotRegular(absl::string_view path, mode_t mode) {
  const char* kind = S_ISFIFO(mode)  ? "a FIFO"
                     : S_ISCHR(mode) ? "a character device"
                     : S_ISBLK(mode) ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISDIR(mode)  ? "a directory"
                                      : "not a regular file";
  return absl::FailedPreconditionError(absl::StrCat("not read: ", path, " is ", kind, ", not a regular file"));
}

// Closes the descriptor on every path out of ReadHostFile.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

absl::Status HostErrnoStatus(int err, absl::string_view what, absl::string_view path) {
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ESRCH:  // /proc/<pid>/...: the process ended
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EINVAL:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<std::string> ReadHostFile(absl::string_view path, size_t max_bytes, HostFileLimit limit) {
  const std::string real(path);
  // stat() first, so a FIFO (open blocks until a writer comes) or a device node (open runs its
  // driver) is never opened; O_NONBLOCK and fstat() cover a swap between the two calls.
  struct stat st;
  if (stat(real.c_str(), &st) != 0) return HostErrnoStatus(errno, "cannot open", real);
  if (!S_ISREG(st.st_mode)) return NotRegular(real, st.st_mode);
  const int fd = open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return HostErrnoStatus(errno, "cannot open", real);
  const FdCloser closer(fd);
  if (fstat(fd, &st) != 0) return HostErrnoStatus(errno, "cannot stat", real);
  if (!S_ISREG(st.st_mode)) return NotRegular(real, st.st_mode);
  // One byte past the cap tells kError that the file is longer.
  const size_t want_total = limit == HostFileLimit::kError && max_bytes < SIZE_MAX ? max_bytes + 1 : max_bytes;
  std::string out;
  char buf[4096];
  while (out.size() < want_total) {
    const ssize_t n = read(fd, buf, std::min(sizeof(buf), want_total - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return HostErrnoStatus(errno, "cannot read", real);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  if (out.size() > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("not read: ", real, " is larger than ", max_bytes, " bytes"));
  }
  return out;
}

}  // namespace devplace
