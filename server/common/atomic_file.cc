#include "server/common/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace devplace {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::Status(absl::ErrnoToStatusCode(error), absl::StrCat(what, " ", path, ": ", strerror(error)));
}

// The temporary files' names of WriteFileAtomically(<dir>/name): this prefix and the writer's pid.
std::string TemporaryPrefix(absl::string_view name) { return absl::StrCat(".", name, ".tmp-"); }

}  // namespace

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content, mode_t mode) {
  const std::string dir = DirectoryOf(path);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open directory", dir);
  absl::Status status = WriteFileAtomicallyAt(dir_fd, dir, path.substr(path.rfind('/') + 1), content, mode);
  close(dir_fd);
  return status;
}

absl::Status WriteFileAtomicallyAt(int dir_fd, const std::string& dir, const std::string& name,
                                   absl::string_view content, mode_t mode) {
  const std::string temp = absl::StrCat(TemporaryPrefix(name), getpid());
  const std::string temp_path = absl::StrCat(dir, "/", temp), path = absl::StrCat(dir, "/", name);
  // A fresh file only: whatever sits at the temp name (a leftover, or a link planted by someone
  // who can write the directory) is removed, and O_EXCL | O_NOFOLLOW never follows or reuses one.
  unlinkat(dir_fd, temp.c_str(), 0);
  const int fd = openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Errno("cannot create", temp_path);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status = Errno("cannot write", temp_path);
      close(fd);
      unlinkat(dir_fd, temp.c_str(), 0);
      return status;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status status = Errno("cannot fsync", temp_path);
    close(fd);
    unlinkat(dir_fd, temp.c_str(), 0);
    return status;
  }
  close(fd);
  if (renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
    absl::Status status = Errno(absl::StrCat("cannot rename ", temp_path, " to"), path);
    unlinkat(dir_fd, temp.c_str(), 0);
    return status;
  }
  fsync(dir_fd);  // makes the rename durable; the file is already in place either way
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RemoveTemporaryFiles(const std::string& path) {
  const std::string dir = DirectoryOf(path), name = path.substr(path.rfind('/') + 1);
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return Errno("cannot open directory", dir);
  DIR* listing = fdopendir(dir_fd);
  if (listing == nullptr) {
    absl::Status status = Errno("cannot list directory", dir);
    close(dir_fd);
    return status;
  }
  const std::string prefix = TemporaryPrefix(name), own = absl::StrCat(prefix, getpid());
  std::vector<std::string> removed;
  size_t scanned = 0;
  for (const dirent* entry = readdir(listing); entry != nullptr && scanned < kMaxScannedEntries;
       entry = readdir(listing), ++scanned) {
    absl::string_view pid = entry->d_name;
    if (!absl::ConsumePrefix(&pid, prefix) || pid.empty() || entry->d_name == own ||
        !std::all_of(pid.begin(), pid.end(), absl::ascii_isdigit)) {
      continue;
    }
    struct stat st {};
    if (fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (unlinkat(dir_fd, entry->d_name, 0) == 0) removed.emplace_back(entry->d_name);
  }
  closedir(listing);  // closes dir_fd
  return removed;
}

}  // namespace devplace
