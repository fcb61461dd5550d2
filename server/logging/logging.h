// devplaced's log output: one line per event on stderr, as `text` (the daemon's historic
// `TIME LEVEL event=NAME key=value ...` lines) or `json` (one object per line whose members are the
// event's key=value fields), plus routing of libraries' own log lines (libprotobuf here; gRPC
// core in server/service/grpc_log.h) into the same logger, rate-limited per source. No gRPC here.
#ifndef DEVPLACE_SERVER_LOGGING_LOGGING_H_
#define DEVPLACE_SERVER_LOGGING_LOGGING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spdlog/common.h"

namespace devplace::logging {

enum class Format { kText, kJson };

// "debug", "info", "warn" or "error"; otherwise INVALID_ARGUMENT naming --log_level and the
// accepted values.
absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view value);
// "text" or "json"; otherwise INVALID_ARGUMENT naming --log_format and the accepted values.
absl::StatusOr<Format> ParseFormat(absl::string_view value);

// Makes spdlog's default logger write to stderr at `level` and above, in `format`. Call once at
// start, before other threads log.
void Configure(spdlog::level::level_enum level, Format format);

// The fields of an event message `key=value key2="quoted value" ...`, in order. A quoted value
// ends at a `"` followed by a space or the end, with \" and \\ unescaped. Text from the first
// token that is not key=value on is kept whole as a field named "msg".
struct Field {
  std::string key;
  std::string value;
  bool quoted = false;
};
std::vector<Field> ParseFields(absl::string_view message);

// One JSON log line (no newline): {"time":"2026-11-30T18:00:00.000Z","level":"info",<fields>}.
// Unquoted values that are JSON integers or decimals become numbers; everything else a string.
// `time` is printed in UTC with milliseconds; `level` as spdlog names it (info, warning, ...).
std::string JsonLine(absl::Time time, absl::string_view level, absl::string_view message);

// `value` as a double-quoted text-log value: `"` and `\` backslash-escaped, control characters
// as \n, \t or \xHH, so a line stays one line.
std::string Quote(absl::string_view value);

// At most `per_second` lines per one-second window (per instance, i.e. per source). Thread-safe.
class RateLimiter {
 public:
  explicit RateLimiter(int per_second) : per_second_(per_second) {}
  // Whether a line arriving at `now` may be written. When it may and lines were dropped since the
  // last one written, `*suppressed` gets their count (else 0), to be reported before it.
  bool Allow(absl::Time now, uint64_t* suppressed);

 private:
  const int per_second_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int in_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Writes a library's log line through the default logger as
// `event=library_log source=SOURCE file=FILE line=N message="..."` at `level`, limited by
// `limiter`; a `event=library_log_suppressed source=SOURCE suppressed=K` warning line precedes the
// first line written after K were dropped.
void LibraryLog(RateLimiter& limiter, absl::string_view source, spdlog::level::level_enum level,
                absl::string_view file, int line, absl::string_view message);

// Sends libprotobuf's log lines (e.g. "String field ... contains invalid UTF-8 data", logged for
// every such request) through LibraryLog with source=protobuf, at most `per_second` a second.
void RouteProtobufLogs(int per_second);

}  // namespace devplace::logging

#endif  // DEVPLACE_SERVER_LOGGING_LOGGING_H_
