#include "server/export/nfd_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/export/labels.h"

namespace devplace::labels {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, " ", path, ": ", strerror(error)));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string temp = absl::StrCat(dir, "/.", name, ".tmp-", getpid());
  // A fresh file only: whatever sits at the temp path (a leftover, or a link planted by someone
  // who can write the directory) is removed, and O_EXCL | O_NOFOLLOW never follows or reuses one.
  unlink(temp.c_str());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", temp);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status = Errno("cannot write", temp);
      close(fd);
      unlink(temp.c_str());
      return status;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status status = Errno("cannot fsync", temp);
    close(fd);
    unlink(temp.c_str());
    return status;
  }
  close(fd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = Errno(absl::StrCat("cannot rename ", temp, " to"), path);
    unlink(temp.c_str());
    return status;
  }
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // makes the rename durable; the file is already in place either way
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

NfdFileWriter::NfdFileWriter(std::string path, absl::Duration expiry) : path_(std::move(path)), expiry_(expiry) {}

absl::Time NfdFileWriter::NextRestamp() const {
  return written_revision_ ? written_at_ + expiry_ / 2 : absl::InfiniteFuture();
}

absl::StatusOr<bool> NfdFileWriter::Update(const v1::Inventory& inventory, absl::Time now) {
  const bool new_revision = !written_revision_ || *written_revision_ != inventory.revision();
  if (!new_revision && now < NextRestamp()) return false;
  absl::Status status = WriteFileAtomically(path_, FeatureFileText(inventory, now + expiry_));
  if (!status.ok()) return status;
  written_revision_ = inventory.revision();
  written_at_ = now;
  return true;
}

NfdPublisher::NfdPublisher(std::string path, absl::Duration expiry, std::function<void(const absl::Status&)> on_error,
                           std::function<void(uint64_t)> on_written)
    : writer_(std::move(path), expiry), on_error_(std::move(on_error)), on_written_(std::move(on_written)) {
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
  // After a failed write, retry no sooner than this (a full disk must not spin the thread).
  const absl::Duration kRetry = absl::Seconds(5);
  absl::Time retry_at = absl::InfiniteFuture();
  for (;;) {
    std::shared_ptr<const v1::Inventory> snapshot;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = std::min(writer_.NextRestamp(), retry_at);
      auto ready = [this] { return stopping_ || fresh_; };
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (stopping_) return;
      fresh_ = false;
      snapshot = latest_;
    }
    if (snapshot == nullptr) continue;
    absl::StatusOr<bool> wrote = writer_.Update(*snapshot, absl::Now());
    if (!wrote.ok()) {
      retry_at = absl::Now() + kRetry;
      if (on_error_) on_error_(wrote.status());
      continue;
    }
    retry_at = absl::InfiniteFuture();
    if (*wrote && on_written_) on_written_(snapshot->revision());
  }
}

}  // namespace devplace::labels
