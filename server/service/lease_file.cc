#include "server/service/lease_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/atomic_file.h"
#include "server/common/host_file.h"
#include "server/common/safe_directory.h"

namespace devplace::service {
namespace {

// The lease file's directory, open, when it is the daemon's own, else why not.
absl::StatusOr<int> OpenLeaseDirectory(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return errno == ELOOP || errno == ENOTDIR
               ? absl::FailedPreconditionError(absl::StrCat("directory ", dir, " is not a directory (a symbolic link?)"))
               : HostErrnoStatus(errno, "cannot open directory", dir);
  }
  struct stat st {};
  absl::Status status = fstat(fd, &st) == 0 ? CheckLeaseDirectory(st, dir) : HostErrnoStatus(errno, "cannot stat", dir);
  if (!status.ok()) {
    close(fd);
    return status;
  }
  return fd;
}

// The pid a lock file records ("<pid>\n", at most 32 bytes read); 0 when it records none.
int64_t RecordedPid(int fd) {
  char buf[32];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t pid = 0;
  if (n <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))), &pid) ||
      pid <= 0) {
    return 0;
  }
  return pid;
}

}  // namespace

absl::StatusOr<StateDirectoryLock> StateDirectoryLock::Take(const std::string& lease_file) {
  absl::StatusOr<int> dir_fd = OpenLeaseDirectory(lease_file);
  if (!dir_fd.ok()) return dir_fd.status();
  const std::string path = absl::StrCat(DirectoryOf(lease_file), "/", kStateLockFileName);
  // O_NONBLOCK: a FIFO planted at the name is refused below, never waited on.
  const int fd = openat(*dir_fd, kStateLockFileName, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  const int open_errno = errno;
  close(*dir_fd);
  if (fd < 0) {
    return open_errno == ELOOP ? absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link"))
                               : HostErrnoStatus(open_errno, "cannot open", path);
  }
  StateDirectoryLock lock(fd, path);
  struct stat st {};
  if (fstat(fd, &st) != 0) return HostErrnoStatus(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is owned by uid ", st.st_uid, ", not by devplaced's uid ", geteuid()));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return HostErrnoStatus(errno, "cannot lock", path);
    const int64_t pid = RecordedPid(fd);
    return absl::UnavailableError(absl::StrCat(
        "--lease_state_file=", lease_file, " is in use by another devplaced (", pid > 0 ? absl::StrCat("pid ", pid) : "pid unknown",
        ", holding ", path, "): stop that daemon, or give this one another --lease_state_file (in another "
        "directory) or --lease_state_file=none"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return HostErrnoStatus(errno, "cannot write", path);
  }
  return lock;
}

StateDirectoryLock& StateDirectoryLock::operator=(StateDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

StateDirectoryLock::~StateDirectoryLock() {
  if (fd_ >= 0) close(fd_);  // the lock ends with its last descriptor
}

absl::StatusOr<std::string> ReadStateFile(const std::string& path, size_t max_bytes, bool& found) {
  absl::StatusOr<int> dir_fd = OpenLeaseDirectory(path);
  // A directory not made yet (the default one, before the first start made it) holds no file.
  if (absl::IsNotFound(dir_fd.status())) return std::string();
  if (!dir_fd.ok()) return dir_fd.status();
  close(*dir_fd);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::string();
    return HostErrnoStatus(errno, "cannot stat", path);
  }
  found = true;
  if (S_ISLNK(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link"));
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is owned by uid ", st.st_uid, ", not by devplaced's uid ", geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is writable by group or others (mode %04o)", path, st.st_mode & 07777));
  }
  return ReadHostFile(path, max_bytes, HostFileLimit::kError);
}

absl::Status CheckLeaseDirectory(const struct stat& st, const std::string& dir) {
  return CheckPrivateDirectory(st, absl::StrCat("directory ", dir), geteuid(),
                               "another user could create or replace the lease table (e.g. make leases.state a "
                               "directory, so that no lease could be written)");
}

std::string CurrentBootId() {
  std::string id = ReadHostFile("/proc/sys/kernel/random/boot_id", 128, HostFileLimit::kTruncate).value_or("");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

absl::Status WriteStateFile(const std::string& path, const std::string& content) {
  absl::StatusOr<int> dir_fd = OpenLeaseDirectory(path);
  if (!dir_fd.ok()) return dir_fd.status();
  absl::Status written =
      WriteFileAtomicallyAt(*dir_fd, DirectoryOf(path), path.substr(path.rfind('/') + 1), content, 0600);
  close(*dir_fd);
  return written;
}

absl::Status LeaseFileWriter::Write(std::vector<state::HeldLease> leases, std::vector<state::Waiter> waiters) const {
  state::LeaseState file;
  file.set_version(kLeaseFileVersion);
  file.set_boot_id(CurrentBootId());
  file.mutable_leases()->Reserve(static_cast<int>(leases.size()));
  for (state::HeldLease& held : leases) *file.add_leases() = std::move(held);
  for (state::Waiter& waiter : waiters) *file.add_waiters() = std::move(waiter);
  return WriteStateFile(path_, file.SerializeAsString());
}

std::vector<std::string> RemoveLeaseTemporaryFiles(const std::string& path) {
  absl::StatusOr<int> dir_fd = OpenLeaseDirectory(path);
  if (!dir_fd.ok()) return {};  // not the daemon's own: nothing there is trusted, nothing removed
  close(*dir_fd);
  absl::StatusOr<std::vector<std::string>> removed = RemoveTemporaryFiles(path);
  return removed.ok() ? *std::move(removed) : std::vector<std::string>();
}

LeaseFileContents ReadLeaseFile(const std::string& path) {
  LeaseFileContents contents;
  RestoreReport& report = contents.report;
  absl::StatusOr<std::string> bytes = ReadStateFile(path, kMaxLeaseFileBytes, report.found);
  state::LeaseState file;
  if (!bytes.ok()) {
    report.warning = absl::StrCat(bytes.status().message(), "; starting with no leases");
  } else if (!file.ParseFromString(*bytes)) {
    report.warning = absl::StrCat(path, " is not a lease table (corrupt or another format); starting with no leases");
  } else if (report.found && file.version() != kLeaseFileVersion) {
    report.warning = absl::StrCat(path, " has lease table version ", file.version(), ", this devplaced reads version ",
                                  kLeaseFileVersion, "; starting with no leases");
  }
  if (!report.warning.empty()) return contents;
  contents.boot_id = file.boot_id();
  contents.report.waiters.assign(file.waiters().begin(), file.waiters().end());
  contents.leases.reserve(static_cast<size_t>(file.leases_size()));
  for (state::HeldLease& held : *file.mutable_leases()) contents.leases.push_back(std::move(held));
  // Oldest first, as LeaseTable::List() gives them.
  std::stable_sort(contents.leases.begin(), contents.leases.end(), [](const state::HeldLease& a, const state::HeldLease& b) {
    const google::protobuf::Timestamp &x = a.info().created_at(), &y = b.info().created_at();
    return x.seconds() != y.seconds() ? x.seconds() < y.seconds() : x.nanos() < y.nanos();
  });
  return contents;
}

}  // namespace devplace::service
