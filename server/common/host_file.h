// The one reader of host files on the server side: every read of /proc, /sys, /dev and of the
// other files the daemon, the probe, the inventory store, the metrics and the service read (TLS
// files, flag files) goes through ReadHostFile, which returns a Status instead of throwing,
// opens regular files only and reads at most a given number of bytes.
//
// Why: a file under /proc/<pid>/ whose process ends between open() and read() fails the read
// with ESRCH; read through std::istreambuf_iterator (or a stream with exceptions() set) libstdc++
// throws std::ios_base::failure, and a daemon that does not catch it aborts. A FIFO or a device
// node opened where a file was expected blocks or runs a driver; a huge file costs its size in
// memory. docs/DEVELOPING.md ("Reading host files") has the rule; ctest
// layering.no_throwing_host_reads holds the code to it.
#ifndef DEVPLACE_SERVER_COMMON_HOST_FILE_H_
#define DEVPLACE_SERVER_COMMON_HOST_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace {

// ReadHostFile's default size cap: 1 MiB. A /proc or sysfs file is a page or two; a PEM bundle
// or a flag file a few KiB.
inline constexpr size_t kHostFileMaxBytes = size_t{1} << 20;

// What ReadHostFile does with a file longer than its cap.
enum class HostFileLimit {
  // FAILED_PRECONDITION "<path> is larger than <cap> bytes": for a file that only means something
  // whole (a certificate, a flag file).
  kError,
  // The first `max_bytes` bytes: for sysfs attributes and /proc files, whose head is what is
  // wanted (the kernel reports a size of 4096 or 0 for them whatever they hold, so the end is
  // found by reading).
  kTruncate,
};

// The content of the regular file at `path` (followed through symbolic links), at most
// `max_bytes` bytes. Never throws; bounded in memory by `max_bytes` and, since only regular files
// are opened, in time by the same (a stalled network file system aside).
// Errors (each message names `path`):
//  - NOT_FOUND: it does not exist (ENOENT, ENOTDIR), or it is a /proc file of a process that
//    ended between open and read (ESRCH);
//  - PERMISSION_DENIED: EACCES, EPERM;
//  - INVALID_ARGUMENT: EINVAL, or the name is too long (ENAMETOOLONG);
//  - FAILED_PRECONDITION: it is not a regular file (a FIFO, a device node, a socket, a directory;
//    checked with stat() before opening, and with fstat() after, with O_NONBLOCK, for a swap in
//    between), or, with HostFileLimit::kError, it is longer than `max_bytes`;
//  - INTERNAL: any other I/O error (EIO, EMFILE, ...).
absl::StatusOr<std::string> ReadHostFile(absl::string_view path, size_t max_bytes = kHostFileMaxBytes,
                                         HostFileLimit limit = HostFileLimit::kError);

// The Status for a failed system call on a host path, by errno as ReadHostFile maps it; the
// message is "<what> <path>: <strerror(err)>" (e.g. "cannot open /sys/x: No such file or
// directory"). HostRoot's directory and link reads share it.
absl::Status HostErrnoStatus(int err, absl::string_view what, absl::string_view path);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_HOST_FILE_H_
