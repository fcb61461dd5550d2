// devplaced's lease file (--lease_state_file): the lease table as lease_state.proto's LeaseState,
// so that a restart, a crash (kill -9) or a package upgrade loses no live lease. A writer/reader
// pair in the manner of LevelDB's log_writer/log_reader: LeaseFileWriter replaces the whole file
// after every change of the table, atomically and durably; ReadLeaseFile reads it back when the
// daemon starts and checks that it is the daemon's own and of a version it reads. Which leases are
// still held is the table's and the holders' question (lease_table.h, lease_holder.h), not the
// file's. No gRPC, no mutex: the LeaseTable serializes its writes (its write_mu_); one daemon per
// directory: StateDirectoryLock below.
//
// Format: the serialized LeaseState, nothing around it, version kLeaseFileVersion; an older
// daemon's file (the same format) is read back as it was written.
#ifndef DEVPLACE_SERVER_SERVICE_LEASE_FILE_H_
#define DEVPLACE_SERVER_SERVICE_LEASE_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/service/lease_state.pb.h"

namespace devplace::service {

// LeaseState.version this daemon writes and reads; a file with another version (a newer daemon's,
// after a downgrade) is not used.
inline constexpr uint32_t kLeaseFileVersion = 1;

// The largest lease file ReadLeaseFile reads, in bytes (16 MiB: the table's limit of 1024 leases
// of 64 devices each fits).
inline constexpr size_t kMaxLeaseFileBytes = size_t{16} << 20;

// What LeaseTable::Restore did with the file: ReadLeaseFile fills `found` and `warning`, the table
// `kept` and `dropped`.
struct RestoreReport {
  // Non-empty when the file was not used (unreadable, not the daemon's, writable by others,
  // corrupt, too large, a newer version): the table starts empty and the file is rewritten.
  std::string warning;
  size_t kept = 0;
  // One line per lease dropped: its id and why ("pid 123 has exited", "pid 123 is another process
  // now", "its time to live passed at ...").
  std::vector<std::string> dropped;
  bool found = false;  // whether the file existed
  // The picks that were waiting (LeaseState.waiters, in arrival order), unchecked: the service
  // restores them as placeholders (WaitingPicks::Restore).
  std::vector<state::Waiter> waiters;
  // The temporary files of writes a killed daemon left beside the file, removed
  // (RemoveLeaseTemporaryFiles).
  std::vector<std::string> temporary_removed;
};

// The rule for the lease file's directory (CheckPrivateDirectory, server/common/safe_directory.h):
// owned by root or the daemon's user and writable by no one else, the sticky bit no exception.
// Another user who may create entries there could create leases.state first (as a directory: no
// lease could be written) or replace it. `st` is the directory's stat; FAILED_PRECONDITION naming
// `dir` otherwise.
absl::Status CheckLeaseDirectory(const struct stat& st, const std::string& dir);

// Writes the lease table to one path. Not thread-safe: one Write at a time.
class LeaseFileWriter {
 public:
  explicit LeaseFileWriter(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  // Replaces the file with a LeaseState of version kLeaseFileVersion holding `leases`, in their
  // order, `waiters` and CurrentBootId(), mode 0600 (before the umask), through WriteFileAtomically (server/common/atomic_file.h:
  // a temporary file beside it, fsync, rename, fsync of the directory): a reader or a crash sees
  // the old table or the new one, never a part. The directory is opened (not following a symbolic
  // link) and checked first (CheckLeaseDirectory). Errors: FAILED_PRECONDITION when the directory
  // is not the daemon's own or is a symbolic link; WriteFileAtomicallyAt's (the errno of the failing
  // step, naming the path: ENOSPC on a full filesystem, EISDIR when leases.state is a directory,
  // EROFS, ...); the file then keeps the table it held.
  absl::Status Write(std::vector<state::HeldLease> leases, std::vector<state::Waiter> waiters = {}) const;

 private:
  std::string path_;
};

// The daemon's other state files in the lease file's directory (the health file,
// health_file.h), read and written under the lease file's rules: ReadStateFile reads `path` (at
// most `max_bytes`) when its directory is the daemon's own (CheckLeaseDirectory) and the file a
// regular file owned by this process's euid and writable by no group or others; "" with `found`
// false when it is missing, its directory too (a missing directory is a missing file, not an
// unusable one); otherwise the reason, naming the path. WriteStateFile replaces it as
// LeaseFileWriter::Write does (mode 0600; the same errors).
absl::StatusOr<std::string> ReadStateFile(const std::string& path, size_t max_bytes, bool& found);
absl::Status WriteStateFile(const std::string& path, const std::string& content);

// The lock file in the lease file's directory: devplaced holds an exclusive flock(2) on it for its
// whole life, so that no second daemon reads or writes the state files there (the lease file, the
// health file) while one runs.
inline constexpr char kStateLockFileName[] = "devplaced.lock";

// An exclusive flock on kStateLockFileName beside a lease file, held until destroyed (or until the
// process ends, however it ends: the kernel drops it; never inherited by an exec'd child).
class StateDirectoryLock {
 public:
  // Takes the lock without waiting: opens (creates, mode 0600, not following a symbolic link) the
  // lock file in `lease_file`'s directory and writes this process's pid into it, for the message a
  // second daemon gives. Errors: NOT_FOUND when the directory does not exist (yet); UNAVAILABLE
  // when another process holds the lock, naming the lease file, the lock file, the holder's pid
  // when the file records one, and the fix (stop that daemon, or give this one another
  // --lease_state_file); FAILED_PRECONDITION when the directory is not the daemon's own
  // (CheckLeaseDirectory) or the lock file is not a regular file owned by this process's euid;
  // else the errno of the failing step (EROFS, ENOSPC, ...), naming the path.
  static absl::StatusOr<StateDirectoryLock> Take(const std::string& lease_file);
  StateDirectoryLock(StateDirectoryLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  StateDirectoryLock& operator=(StateDirectoryLock&& other) noexcept;
  StateDirectoryLock(const StateDirectoryLock&) = delete;
  StateDirectoryLock& operator=(const StateDirectoryLock&) = delete;
  ~StateDirectoryLock();
  const std::string& path() const { return path_; }  // the lock file

 private:
  StateDirectoryLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// This boot of the host: /proc/sys/kernel/random/boot_id without its newline ("" when it cannot be
// read). LeaseFileWriter records it; LeaseTable::Restore compares it.
std::string CurrentBootId();

// What ReadLeaseFile found.
struct LeaseFileContents {
  // The boot the file was written in (LeaseState.boot_id; "" from an older daemon's file).
  std::string boot_id;
  // The file's leases, oldest first (by created_at; equal times in the file's order), unchecked:
  // empty when the file is missing or was not used.
  std::vector<state::HeldLease> leases;
  // `found` and `warning` (RestoreReport's); `kept` and `dropped` are left to the caller.
  RestoreReport report;
};

// Reads the lease file at `path`. A missing file is no warning (found false, no leases). A file that
// cannot be used is a warning that ends "; starting with no leases", never an error or a crash: its
// directory not the daemon's own (CheckLeaseDirectory) or a symbolic link; the file a symbolic link, not a regular file, not owned by this process's effective uid, writable by group
// or others, unreadable, larger than kMaxLeaseFileBytes, not a LeaseState ("is not a lease table
// (corrupt or another format)": a cut or damaged file that no longer parses), or a version other
// than kLeaseFileVersion (an empty file is version 0).
LeaseFileContents ReadLeaseFile(const std::string& path);

// Removes the temporary files (".leases.state.tmp-<pid>") of writes that a daemon killed between
// creating and renaming one left beside `path` (RemoveTemporaryFiles, server/common/atomic_file.h),
// when the directory is the daemon's own (CheckLeaseDirectory; else nothing); returns their names.
std::vector<std::string> RemoveLeaseTemporaryFiles(const std::string& path);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LEASE_FILE_H_
