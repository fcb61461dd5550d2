#include "client/common/bounded_read.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace devplace::reading {
namespace {

constexpr size_t kChunk = 64 * 1024;

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` for reading without blocking (a FIFO would wait for a writer) and checks it is a
// regular file; the descriptor, or the why.
absl::StatusOr<int> OpenRegular(const std::string& path, struct stat* st) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::FailedPreconditionError(CannotRead(errno));
  if (::fstat(fd, st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::FailedPreconditionError(CannotRead(error));
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("not a regular file (", KindText(st->st_mode), "); not read"));
  }
  return fd;
}

// read(2) retried on EINTR; -1 with errno on error.
ssize_t ReadSome(int fd, char* buffer, size_t size) {
  ssize_t n;
  do {
    n = ::read(fd, buffer, size);
  } while (n < 0 && errno == EINTR);
  return n;
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0 when it is not one.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) low = 0xA0;   // no overlong forms
    if (b0 == 0xED) high = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) low = 0x90;
    if (b0 == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::string SizeText(uint64_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, " MiB");
  if (bytes >= kKiB && bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, " KiB");
  return absl::StrCat(bytes, " bytes");
}

std::string DurationText(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, " s");
  return absl::StrCat(ms, " ms");
}

ReadBudget::ReadBudget(absl::Duration time, uint64_t bytes)
    : time_(time), deadline_(absl::Now() + time), bytes_(bytes), bytes_left_(bytes) {}

bool ReadBudget::TimeLeft() const { return absl::Now() < deadline_; }

std::string ReadBudget::OutOfTime() const {
  return absl::StrCat("not read: the reader's ", DurationText(time_), " were spent");
}

std::string ReadBudget::OutOfBytes() const {
  return absl::StrCat("not read: the files read before it used up ", SizeText(bytes_));
}

void ReadSet::Problem(const std::string& what) {
  if (problems_.size() < kMaxProblems) problems_.Add(CutUtf8(what, kMaxProblemBytes));
}

void ReadSet::Failed(const std::string& shown, const absl::Status& status) {
  Problem(absl::StrCat(shown, ": ", status.message()));
  if (absl::IsDeadlineExceeded(status) || absl::IsResourceExhausted(status)) stopped_ = true;
}

PathStat StatPath(const std::string& path) {
  PathStat out;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    out.error = errno;
    return out;
  }
  out.mode = st.st_mode;
  out.dev = st.st_dev;
  out.ino = st.st_ino;
  out.size = st.st_size;
  return out;
}

std::string KindText(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string CannotRead(int error) { return absl::StrCat("cannot read it (", std::strerror(error), ")"); }

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes, ReadBudget& budget) {
  if (!budget.TimeLeft()) return absl::DeadlineExceededError(budget.OutOfTime());
  struct stat st;
  absl::StatusOr<int> opened = OpenRegular(path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  const std::string too_large = absl::StrCat("larger than ", SizeText(max_bytes), "; not read");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return absl::FailedPreconditionError(too_large);
  if (static_cast<uint64_t>(st.st_size) > budget.bytes_left()) return absl::ResourceExhaustedError(budget.OutOfBytes());
  std::string content;
  content.reserve(static_cast<size_t>(st.st_size));
  char buffer[kChunk];
  while (true) {
    if (!budget.TimeLeft()) return absl::DeadlineExceededError(budget.OutOfTime());
    const ssize_t n = ReadSome(fd.get(), buffer, sizeof buffer);
    if (n < 0) return absl::FailedPreconditionError(CannotRead(errno));
    if (n == 0) break;
    if (content.size() + static_cast<size_t>(n) > max_bytes) return absl::FailedPreconditionError(too_large);
    if (content.size() + static_cast<size_t>(n) > budget.bytes_left()) {
      return absl::ResourceExhaustedError(budget.OutOfBytes());
    }
    content.append(buffer, static_cast<size_t>(n));
  }
  budget.Spend(content.size());
  return content;
}

absl::StatusOr<LinesEnd> ReadLines(const std::string& path, uint64_t max_bytes, ReadBudget& budget,
                                   absl::FunctionRef<bool(absl::string_view)> on_line) {
  if (!budget.TimeLeft()) return absl::DeadlineExceededError(budget.OutOfTime());
  struct stat st;
  absl::StatusOr<int> opened = OpenRegular(path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  std::string line;
  uint64_t total = 0;
  char buffer[kChunk];
  while (true) {
    if (!budget.TimeLeft()) return absl::DeadlineExceededError(budget.OutOfTime());
    if (total == max_bytes) return LinesEnd::kLimit;
    if (budget.bytes_left() == 0) return absl::ResourceExhaustedError(budget.OutOfBytes());
    const size_t want = static_cast<size_t>(std::min<uint64_t>({sizeof buffer, max_bytes - total, budget.bytes_left()}));
    const ssize_t n = ReadSome(fd.get(), buffer, want);
    if (n < 0) return absl::FailedPreconditionError(CannotRead(errno));
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    budget.Spend(static_cast<uint64_t>(n));
    absl::string_view chunk(buffer, static_cast<size_t>(n));
    for (size_t newline; (newline = chunk.find('\n')) != absl::string_view::npos;) {
      line.append(chunk.data(), newline);
      if (!on_line(line)) return LinesEnd::kStopped;
      line.clear();
      chunk.remove_prefix(newline + 1);
    }
    line.append(chunk.data(), chunk.size());
  }
  if (!line.empty() && !on_line(line)) return LinesEnd::kStopped;
  return LinesEnd::kEndOfFile;
}

absl::StatusOr<std::vector<std::string>> ListNames(const std::string& dir, size_t max_names, ReadBudget& budget,
                                                   absl::FunctionRef<bool(absl::string_view)> keep, bool* more) {
  *more = false;
  if (!budget.TimeLeft()) return absl::DeadlineExceededError(budget.OutOfTime());
  DIR* handle = ::opendir(dir.c_str());  // O_DIRECTORY: a FIFO or a device fails at once (ENOTDIR)
  if (handle == nullptr) {
    const std::string why = absl::StrCat("cannot list it (", std::strerror(errno), ")");
    return errno == ENOENT ? absl::NotFoundError(why) : absl::FailedPreconditionError(why);
  }
  std::priority_queue<std::string> kept;  // the largest on top, dropped when over max_names
  size_t seen = 0;
  absl::Status status;
  while (true) {
    errno = 0;
    const dirent* entry = ::readdir(handle);
    if (entry == nullptr) {
      if (errno != 0) status = absl::FailedPreconditionError(absl::StrCat("cannot list it (", std::strerror(errno), ")"));
      break;
    }
    if (++seen % 1024 == 0 && !budget.TimeLeft()) {
      status = absl::DeadlineExceededError(budget.OutOfTime());
      break;
    }
    const absl::string_view name(entry->d_name);
    if (name == "." || name == ".." || !keep(name)) continue;
    if (kept.size() < max_names) {
      kept.emplace(name);
    } else {
      *more = true;
      if (max_names > 0 && name < kept.top()) {
        kept.pop();
        kept.emplace(name);
      }
    }
  }
  ::closedir(handle);
  if (!status.ok()) return status;
  std::vector<std::string> out;
  out.reserve(kept.size());
  while (!kept.empty()) {
    out.push_back(kept.top());
    kept.pop();
  }
  std::reverse(out.begin(), out.end());
  return out;
}

bool IsUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string EscapeBytes(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  static constexpr char kHex[] = "0123456789abcdef";
  const auto escape = [&](unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
  };
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    const size_t n = Utf8SequenceLength(bytes.substr(i));
    if (n == 0 || b < 0x20 || b == 0x7F) {
      escape(b);
      ++i;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string CutUtf8(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  // Back up over continuation bytes to the start of the character cut at `end`.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

}  // namespace devplace::reading
