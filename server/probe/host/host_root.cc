#include "server/probe/host/host_root.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/common/host_file.h"

namespace devplace::probe {

HostRoot::HostRoot(std::string root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
}

absl::StatusOr<HostRoot> HostRoot::Open(std::string root) {
  if (root.empty()) return absl::InvalidArgumentError("host root is empty");
  struct stat st;
  if (stat(root.c_str(), &st) != 0) return HostErrnoStatus(errno, "cannot open host root", root);
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("host root ", root, " is not a directory"));
  }
  if (access(root.c_str(), R_OK | X_OK) != 0) {
    return HostErrnoStatus(errno, "cannot read host root", root);
  }
  return HostRoot(std::move(root));
}

std::string HostRoot::Resolve(absl::string_view path) const {
  if (root_ == "/") return std::string(path);
  absl::string_view root = root_;
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  return absl::StrCat(root, path);
}

absl::StatusOr<std::string> HostRoot::ReadFile(absl::string_view path, size_t max_bytes) const {
  return ReadHostFile(Resolve(path), max_bytes, HostFileLimit::kTruncate);
}

absl::StatusOr<std::string> HostRoot::ReadTrimmed(absl::string_view path) const {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) return content.status();
  return std::string(absl::StripAsciiWhitespace(*content));
}

absl::StatusOr<std::string> HostRoot::ReadLinkBasename(absl::string_view path) const {
  const std::string real = Resolve(path);
  char buf[4096];
  const ssize_t n = readlink(real.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) return HostErrnoStatus(errno, "cannot read link", real);
  absl::string_view target(buf, static_cast<size_t>(n));
  while (target.size() > 1 && target.back() == '/') target.remove_suffix(1);
  const size_t slash = target.rfind('/');
  if (slash != absl::string_view::npos) target.remove_prefix(slash + 1);
  return std::string(target);
}

absl::StatusOr<std::vector<std::string>> HostRoot::ListDir(absl::string_view path) const {
  const std::string real = Resolve(path);
  DIR* dir = opendir(real.c_str());
  if (dir == nullptr) return HostErrnoStatus(errno, "cannot list", real);
  std::vector<std::string> names;
  while (const struct dirent* entry = readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool HostRoot::Exists(absl::string_view path) const {
  struct stat st;
  return stat(Resolve(path).c_str(), &st) == 0;
}

bool HostRoot::IsDirectory(absl::string_view path) const {
  struct stat st;
  return stat(Resolve(path).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace devplace::probe
