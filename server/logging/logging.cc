#include "server/logging/logging.h"

#include <chrono>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace devplace::logging {
namespace {

constexpr char kTextPattern[] = "%Y-%m-%dT%H:%M:%S.%e%z %l %v";

bool IsKeyChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// A JSON number as JSON's grammar has it (no leading zeros, no exponent needed here).
bool IsJsonNumber(absl::string_view v) {
  if (absl::ConsumePrefix(&v, "-") && v.empty()) return false;
  if (v.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(v[0]))) return false;
  if (v[0] == '0' && v.size() > 1 && v[1] != '.') return false;
  const size_t dot = v.find('.');
  absl::string_view whole = v.substr(0, dot);
  for (char c : whole) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  if (dot == absl::string_view::npos) return true;
  absl::string_view fraction = v.substr(dot + 1);
  if (fraction.empty()) return false;
  for (char c : fraction) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

void AppendJsonString(std::string& out, absl::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {  // bytes >= 0x80 pass through: UTF-8 stays UTF-8
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    const std::string line = JsonLine(absl::FromChrono(msg.time), absl::string_view(level.data(), level.size()),
                                      absl::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

RateLimiter* protobuf_limiter = nullptr;  // set once by RouteProtobufLogs, never freed

void ProtobufHandler(google::protobuf::LogLevel level, const char* filename, int line, const std::string& message) {
  spdlog::level::level_enum spd = spdlog::level::err;
  if (level == google::protobuf::LOGLEVEL_INFO) spd = spdlog::level::info;
  if (level == google::protobuf::LOGLEVEL_WARNING) spd = spdlog::level::warn;
  LibraryLog(*protobuf_limiter, "protobuf", spd, filename != nullptr ? filename : "", line, message);
}

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view value) {
  if (value == "debug") return spdlog::level::debug;
  if (value == "info") return spdlog::level::info;
  if (value == "warn") return spdlog::level::warn;
  if (value == "error") return spdlog::level::err;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_level='", value, "' is not one of debug, info, warn, error"));
}

absl::StatusOr<Format> ParseFormat(absl::string_view value) {
  if (value == "text") return Format::kText;
  if (value == "json") return Format::kJson;
  return absl::InvalidArgumentError(absl::StrCat("--log_format='", value, "' is not one of text, json"));
}

void Configure(spdlog::level::level_enum level, Format format) {
  auto logger = std::make_shared<spdlog::logger>("devplaced", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == Format::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_pattern(kTextPattern);
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);  // one event, one line, as it happens
  spdlog::set_default_logger(std::move(logger));
}

std::vector<Field> ParseFields(absl::string_view message) {
  std::vector<Field> fields;
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(message);
  while (!rest.empty()) {
    size_t k = 0;
    while (k < rest.size() && IsKeyChar(rest[k])) ++k;
    if (k == 0 || k >= rest.size() || rest[k] != '=') break;
    Field field;
    field.key = std::string(rest.substr(0, k));
    rest.remove_prefix(k + 1);
    if (!rest.empty() && rest[0] == '"') {
      field.quoted = true;
      size_t i = 1;
      for (; i < rest.size(); ++i) {
        const char c = rest[i];
        if (c == '\\' && i + 1 < rest.size()) {
          field.value.push_back(rest[++i]);
        } else if (c == '"' && (i + 1 == rest.size() || rest[i + 1] == ' ')) {
          break;
        } else {
          field.value.push_back(c);
        }
      }
      rest.remove_prefix(std::min(rest.size(), i + 1));
    } else {
      const size_t end = std::min(rest.find(' '), rest.size());
      field.value = std::string(rest.substr(0, end));
      rest.remove_prefix(end);
    }
    fields.push_back(std::move(field));
    rest = absl::StripLeadingAsciiWhitespace(rest);
  }
  if (!rest.empty()) fields.push_back({"msg", std::string(rest), true});
  return fields;
}

std::string JsonLine(absl::Time time, absl::string_view level, absl::string_view message) {
  std::string out = "{\"time\":";
  AppendJsonString(out, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()));
  out += ",\"level\":";
  AppendJsonString(out, level);
  for (const Field& field : ParseFields(message)) {
    out.push_back(',');
    AppendJsonString(out, field.key);
    out.push_back(':');
    if (!field.quoted && IsJsonNumber(field.value)) {
      out += field.value;
    } else {
      AppendJsonString(out, field.value);
    }
  }
  out.push_back('}');
  return out;
}

std::string Quote(absl::string_view value) {
  std::string out = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back('"');
  return out;
}

bool RateLimiter::Allow(absl::Time now, uint64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  *suppressed = 0;
  if (now - window_start_ >= absl::Seconds(1)) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    ++dropped_;
    return false;
  }
  ++in_window_;
  *suppressed = dropped_;
  dropped_ = 0;
  return true;
}

void LibraryLog(RateLimiter& limiter, absl::string_view source, spdlog::level::level_enum level,
                absl::string_view file, int line, absl::string_view message) {
  if (!spdlog::should_log(level)) return;
  uint64_t suppressed = 0;
  if (!limiter.Allow(absl::Now(), &suppressed)) return;
  if (suppressed > 0) {
    spdlog::warn("event=library_log_suppressed source={} suppressed={}", std::string(source), suppressed);
  }
  // Only the file's base name: gRPC passes source paths.
  const size_t slash = file.rfind('/');
  if (slash != absl::string_view::npos) file.remove_prefix(slash + 1);
  spdlog::log(level, "event=library_log source={} file={} line={} message={}", std::string(source), std::string(file), line,
              Quote(absl::StripTrailingAsciiWhitespace(message)));
}

void RouteProtobufLogs(int per_second) {
  if (protobuf_limiter == nullptr) protobuf_limiter = new RateLimiter(per_second);
  google::protobuf::SetLogHandler(&ProtobufHandler);
}

}  // namespace devplace::logging
