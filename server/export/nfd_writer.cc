#include "server/export/nfd_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/atomic_file.h"
#include "server/common/safe_directory.h"
#include "server/export/labels.h"

namespace devplace::labels {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, " ", path, ": ", strerror(error)));
}

}  // namespace

std::string FeatureDirectory(const std::string& path) { return DirectoryOf(path); }

absl::StatusOr<int> OpenFeatureDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    struct stat link {};
    // O_NOFOLLOW | O_DIRECTORY on a link fails with ENOTDIR (or ELOOP): say why.
    if ((errno == ENOTDIR || errno == ELOOP) && lstat(dir.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "directory ", dir, " is a symbolic link: name the directory itself (a link could be re-pointed)"));
    }
    return Errno("cannot open directory", dir);
  }
  struct stat st {};
  absl::Status status = fstat(fd, &st) == 0 ? CheckSafeDirectory(st, absl::StrCat("directory ", dir), geteuid(),
                                                                 "another user could replace the feature file "
                                                                 "or the directory, and choose what is written where")
                                            : Errno("cannot stat directory", dir);
  if (!status.ok()) {
    close(fd);
    return status;
  }
  return fd;
}

NfdFileWriter::NfdFileWriter(std::string path, absl::Duration expiry) : path_(std::move(path)), expiry_(expiry) {
  OpenDirectory();
}

NfdFileWriter::~NfdFileWriter() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

void NfdFileWriter::OpenDirectory() {
  absl::StatusOr<int> fd = OpenFeatureDirectory(FeatureDirectory(path_));
  directory_status_ = fd.status();
  if (fd.ok()) dir_fd_ = *fd;
}

absl::Time NfdFileWriter::NextRestamp() const {
  return written_revision_ ? written_at_ + expiry_ / 2 : absl::InfiniteFuture();
}

absl::Status NfdFileWriter::Write(absl::string_view text) {
  if (dir_fd_ < 0) OpenDirectory();
  if (!directory_status_.ok()) return directory_status_;
  return WriteFileAtomicallyAt(dir_fd_, FeatureDirectory(path_), path_.substr(path_.rfind('/') + 1), text);
}

absl::StatusOr<bool> NfdFileWriter::Update(const v1::Inventory& inventory, absl::Time now) {
  const bool new_revision = !written_revision_ || *written_revision_ != inventory.revision();
  if (!new_revision && now < NextRestamp()) return false;
  const std::string text = FeatureFileText(inventory, now + expiry_);
  absl::Status status = Write(text);
  // A directory that was removed (not merely renamed) is opened again by its path, checked as at
  // the start: a package that re-creates features.d gets its file back.
  struct stat st {};
  if (!status.ok() && dir_fd_ >= 0 && fstat(dir_fd_, &st) == 0 && st.st_nlink == 0) {
    close(dir_fd_);
    dir_fd_ = -1;
    status = Write(text);
  }
  if (!status.ok()) return status;
  written_revision_ = inventory.revision();
  written_at_ = now;
  return true;
}

NfdPublisher::NfdPublisher(std::string path, absl::Duration expiry, std::function<void(const absl::Status&)> on_error,
                           std::function<void(uint64_t)> on_written)
    : writer_(std::move(path), expiry),
      directory_status_(writer_.directory_status()),
      on_error_(std::move(on_error)),
      on_written_(std::move(on_written)) {
  thread_ = std::thread([this] { Loop(); });
}

NfdPublisher::~NfdPublisher() { Stop(); }

void NfdPublisher::Publish(std::shared_ptr<const v1::Inventory> snapshot) {
  absl::MutexLock lock(&mu_);
  latest_ = std::move(snapshot);
  fresh_ = true;
}

void NfdPublisher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void NfdPublisher::Loop() {
  // After a failed write the next try waits (a full disk or a removed directory must not spin the
  // thread, and a re-stamp that is overdue stays overdue until a write succeeds).
  constexpr absl::Duration kFirstRetry = absl::Seconds(1), kMaxRetry = absl::Minutes(1);
  absl::Duration backoff = kFirstRetry;
  absl::Time retry_at = absl::InfinitePast();  // past: no failure pending
  std::optional<absl::Status> reported;         // the failure on_error_ last heard of
  for (;;) {
    std::shared_ptr<const v1::Inventory> snapshot;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = retry_at != absl::InfinitePast() ? retry_at : writer_.NextRestamp();
      // Await evaluates the condition with mu_ held; the annotation lets the analysis check it.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || fresh_; };
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (stopping_) return;
      fresh_ = false;
      snapshot = latest_;
    }
    if (snapshot == nullptr) continue;
    absl::StatusOr<bool> wrote = writer_.Update(*snapshot, absl::Now());
    if (!wrote.ok()) {
      retry_at = absl::Now() + backoff;
      backoff = std::min(backoff * 2, kMaxRetry);
      if (reported != wrote.status()) {
        reported = wrote.status();
        if (on_error_) on_error_(wrote.status());
      }
      continue;
    }
    retry_at = absl::InfinitePast();
    backoff = kFirstRetry;
    reported.reset();
    if (*wrote && on_written_) on_written_(snapshot->revision());
  }
}

}  // namespace devplace::labels
