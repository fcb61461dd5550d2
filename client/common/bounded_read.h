// The one rule for every reader of outside input in the clients (libdevplace and the devplace
// CLI): DRA Device Metadata, Python environments, an interpreter's sys.path, saved inventories,
// /proc/net/tcp, /dev, PEM and target files. Regular files only (a FIFO, a device or a link to
// one is refused before any read, so nothing blocks), a size cap per file and a byte and time
// budget per read set (the files one request reads), reads in chunks that stop at the cap, and
// text made safe to send: names escaped, problem texts cut at UTF-8 character boundaries.
// Nothing here throws; every failure is a status whose message is the "why" a problem entry
// carries ("not a regular file (a FIFO); not read"). The Python client's copy of these rules,
// wording included, is client/python/devplace/_read.py; tests/client/reader_table.txt holds both
// to the same results.
#ifndef DEVPLACE_CLIENT_COMMON_BOUNDED_READ_H_
#define DEVPLACE_CLIENT_COMMON_BOUNDED_READ_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace devplace::reading {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;

// "1 MiB", "64 KiB", "100 bytes": a cap as messages print it.
std::string SizeText(uint64_t bytes);
// "2 s", "250 ms".
std::string DurationText(absl::Duration d);

// The time and bytes one read set may spend: every file and listing of one reader's call draws
// on it, and a read that finds it spent stops with a message saying so. Not thread-safe.
class ReadBudget {
 public:
  ReadBudget(absl::Duration time, uint64_t bytes);
  // False once the deadline has passed.
  bool TimeLeft() const;
  uint64_t bytes_left() const { return bytes_left_; }
  void Spend(uint64_t n) { bytes_left_ = n > bytes_left_ ? 0 : bytes_left_ - n; }
  absl::Duration time() const { return time_; }
  uint64_t bytes() const { return bytes_; }
  // "not read: the reader's 2 s were spent" / "not read: the files read before it used up 16 MiB".
  std::string OutOfTime() const;
  std::string OutOfBytes() const;

 private:
  absl::Duration time_;
  absl::Time deadline_;
  uint64_t bytes_;
  uint64_t bytes_left_;
};

// One reader's call: its budget and its problems (the request's list, DeviceAllocation.problems or
// JobEnvironment.problems: at most kMaxProblems of at most kMaxProblemBytes, cut at a character
// boundary, the rest dropped). A read that finds the budget spent ends the call: stopped().
class ReadSet {
 public:
  static constexpr int kMaxProblems = 64;
  static constexpr size_t kMaxProblemBytes = 1024;

  ReadSet(absl::Duration time, uint64_t bytes, google::protobuf::RepeatedPtrField<std::string>* problems)
      : budget_(time, bytes), problems_(*problems) {}
  ReadBudget& budget() { return budget_; }
  bool stopped() const { return stopped_; }
  void Problem(const std::string& what);
  // "<shown>: <why>" for a failed read; DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED (the budget) stop.
  void Failed(const std::string& shown, const absl::Status& status);

 private:
  ReadBudget budget_;
  google::protobuf::RepeatedPtrField<std::string>& problems_;
  bool stopped_ = false;
};

// stat(2) of a path, following links: `error` is errno (0 = found).
struct PathStat {
  int error = 0;
  mode_t mode = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  bool regular() const { return error == 0 && S_ISREG(mode); }
  bool directory() const { return error == 0 && S_ISDIR(mode); }
};
PathStat StatPath(const std::string& path);
// What a non-regular file is, for messages: "a directory", "a FIFO", "a character device", "a
// block device", "a socket", or "not a regular file".
std::string KindText(mode_t mode);
// "cannot read it (No such file or directory)": errno as strerror words.
std::string CannotRead(int error);

// The whole of the regular file `path`, at most `max_bytes` (and no more than the budget has
// left). Errors (the message is the why): "cannot read it (<strerror>)", "not a regular file (a
// FIFO); not read", "larger than 1 MiB; not read", the budget's OutOfTime() (DEADLINE_EXCEEDED) /
// OutOfBytes() (RESOURCE_EXHAUSTED).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes, ReadBudget& budget);

// How ReadLines ended.
enum class LinesEnd { kStopped, kEndOfFile, kLimit };
// Calls `on_line` with each line of the regular file `path` (without "\n"; a last line without
// one too) until it returns false, the file ends, or `max_bytes` have been read (kLimit; the line
// cut there is not passed). Memory: one chunk and one line, a line longer than `max_bytes` is never
// held. Errors as ReadRegularFile's, except that a file larger than `max_bytes` is read up to it,
// and the budget's bytes run out mid-file (OutOfBytes) rather than before it.
absl::StatusOr<LinesEnd> ReadLines(const std::string& path, uint64_t max_bytes, ReadBudget& budget,
                                   absl::FunctionRef<bool(absl::string_view)> on_line);

// The names in directory `dir` (not "." or "..") that `keep` accepts: the first `max_names` in
// byte order, sorted; `*more` is set when `keep` accepted others beyond them. Only the kept names
// are held, so a directory of millions of entries costs their listing time, bounded by the budget.
// Errors: "cannot list it (<strerror>)" (NOT_FOUND for a missing directory), OutOfTime()
// (DEADLINE_EXCEEDED).
absl::StatusOr<std::vector<std::string>> ListNames(const std::string& dir, size_t max_names, ReadBudget& budget,
                                                   absl::FunctionRef<bool(absl::string_view)> keep, bool* more);

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsUtf8(absl::string_view text);
// `bytes` (a file name, a path) as valid UTF-8 text for a message or a request field: valid UTF-8
// kept, each byte of an invalid sequence and each C0 control or DEL written "\xNN" (lower-case
// hex). Python: os.fsencode(name) through the same rule.
std::string EscapeBytes(absl::string_view bytes);
// Valid UTF-8 `text` cut to at most `max_bytes` at a character boundary.
std::string CutUtf8(absl::string_view text, size_t max_bytes);

}  // namespace devplace::reading

#endif  // DEVPLACE_CLIENT_COMMON_BOUNDED_READ_H_
