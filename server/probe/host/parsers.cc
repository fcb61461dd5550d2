#include "server/probe/host/parsers.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/status_macros.h"

namespace devplace::probe {
namespace {

bool IsHexDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

// Calls `fn(key, value)` for each line split at the first `sep`, both trimmed.
template <typename Fn>
void ForEachField(absl::string_view text, char sep, Fn fn) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const size_t pos = line.find(sep);
    if (pos == absl::string_view::npos) continue;
    fn(absl::StripAsciiWhitespace(line.substr(0, pos)),
       absl::StripAsciiWhitespace(line.substr(pos + 1)));
  }
}

std::map<std::string, std::string> FirstFields(absl::string_view text, char sep) {
  std::map<std::string, std::string> out;
  ForEachField(text, sep, [&out](absl::string_view key, absl::string_view value) {
    if (!key.empty()) out.emplace(std::string(key), std::string(value));
  });
  return out;
}

}  // namespace

absl::StatusOr<uint32_t> ParseHex(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&s, "0x")) absl::ConsumePrefix(&s, "0X");
  uint32_t value = 0;
  if (!IsHexDigits(s) || s.size() > 8 || !absl::SimpleHexAtoi(s, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("not a hex number: \"", text, "\""));
  }
  return value;
}

absl::StatusOr<int64_t> ParseDecimal(absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("not a decimal number: \"", text, "\""));
  }
  return value;
}

absl::StatusOr<CpuRanges> ParseCpuRanges(absl::string_view text) {
  CpuRanges out;
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return out;
  std::vector<std::pair<uint32_t, uint32_t>>& ranges = out.ranges;
  for (absl::string_view range : absl::StrSplit(s, ',')) {
    const size_t dash = range.find('-');
    const absl::string_view first = range.substr(0, dash);
    const absl::string_view last = dash == absl::string_view::npos ? first : range.substr(dash + 1);
    uint32_t lo = 0, hi = 0;
    const bool ok = absl::SimpleAtoi(first, &lo) && absl::SimpleAtoi(last, &hi) && lo <= hi && hi - lo < (1u << 20);
    if (!ok) {  // the list may be 1 MiB: quote its start only
      return absl::InvalidArgumentError(absl::StrCat("bad cpulist \"", s.substr(0, 64), s.size() > 64 ? "...\"" : "\""));
    }
    ranges.emplace_back(lo, hi);
  }
  std::sort(ranges.begin(), ranges.end());
  size_t kept = 0;
  for (const auto& [lo, hi] : ranges) {
    if (kept > 0 && static_cast<uint64_t>(lo) <= static_cast<uint64_t>(ranges[kept - 1].second) + 1) {
      ranges[kept - 1].second = std::max(ranges[kept - 1].second, hi);
    } else {
      ranges[kept++] = {lo, hi};
    }
  }
  ranges.resize(kept);
  for (const auto& [lo, hi] : ranges) out.count += static_cast<uint64_t>(hi) - lo + 1;
  return out;
}

absl::StatusOr<std::vector<uint32_t>> ParseCpuList(absl::string_view text) {
  ASSIGN_OR_RETURN(const CpuRanges parsed, ParseCpuRanges(text));
  if (parsed.count > kMaxCpus) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpulist names ", parsed.count, " CPUs, more than the ", kMaxCpus, " accepted"));
  }
  std::vector<uint32_t> cpus;
  cpus.reserve(parsed.count);
  for (const auto& [lo, hi] : parsed.ranges) {
    for (uint64_t cpu = lo; cpu <= hi; ++cpu) cpus.push_back(static_cast<uint32_t>(cpu));
  }
  return cpus;
}

std::map<std::string, std::string> ParseColonFields(absl::string_view text) {
  return FirstFields(text, ':');
}

std::map<std::string, std::string> ParseSpaceFields(absl::string_view text) {
  return FirstFields(text, ' ');
}

std::map<std::string, uint64_t> ParseMeminfoBytes(absl::string_view text) {
  std::map<std::string, uint64_t> out;
  ForEachField(text, ':', [&out](absl::string_view key, absl::string_view value) {
    const size_t space = key.rfind(' ');
    if (space != absl::string_view::npos) key.remove_prefix(space + 1);
    const std::vector<absl::string_view> words =
        absl::StrSplit(value, ' ', absl::SkipWhitespace());
    uint64_t number = 0;
    if (words.empty() || words.size() > 2 || !absl::SimpleAtoi(words[0], &number)) return;
    if (words.size() == 2) {
      if (words[1] != "kB") return;
      number *= 1024;
    }
    out.emplace(std::string(key), number);
  });
  return out;
}

absl::StatusOr<std::map<std::string, uint32_t>> ParseMigMinors(absl::string_view text) {
  std::map<std::string, uint32_t> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    uint32_t minor = 0;
    if (words.size() != 2 || !absl::SimpleAtoi(words[1], &minor)) {
      return absl::InvalidArgumentError(absl::StrCat("bad mig-minors line \"", line, "\""));
    }
    out[std::string(words[0])] = minor;
  }
  return out;
}

absl::StatusOr<std::string> ParseNvidiaDriverVersion(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "NVRM version:")) continue;
    for (absl::string_view word : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      const bool version_like =
          absl::ascii_isdigit(word.front()) && word.find('.') != absl::string_view::npos &&
          std::all_of(word.begin(), word.end(),
                      [](char c) { return absl::ascii_isdigit(c) || c == '.'; });
      if (version_like) return std::string(word);
    }
  }
  return absl::NotFoundError("no \"NVRM version:\" line with a version number");
}

std::string GfxTargetName(uint32_t v) {
  return absl::StrFormat("gfx%d%x%x", v / 10000, v / 100 % 100, v % 100);
}

absl::StatusOr<CpuInfo> ParseCpuInfo(absl::string_view text) {
  CpuInfo info;
  bool x86 = false, arm64 = false;
  ForEachField(text, ':', [&](absl::string_view key, absl::string_view value) {
    if (key == "processor") {
      ++info.processors;
      return;
    }
    if (info.processors > 1) return;  // the first processor describes the CPU model
    const auto set_once = [](std::string& field, absl::string_view v) {
      if (field.empty()) field = std::string(v);
    };
    if (key == "vendor_id") {
      x86 = true;
      set_once(info.vendor, value);
    } else if (key == "CPU implementer") {
      arm64 = true;
      set_once(info.vendor, value);
    } else if (key == "model name") {
      set_once(info.model_name, value);
    } else if ((key == "flags" || key == "Features") && info.features.empty()) {
      arm64 = arm64 || key == "Features";
      for (absl::string_view f : absl::StrSplit(value, ' ', absl::SkipWhitespace())) {
        info.features.emplace(f);
      }
    }
  });
  if (info.processors == 0) return absl::InvalidArgumentError("no \"processor\" entry in cpuinfo");
  info.architecture = x86 ? "x86_64" : (arm64 ? "aarch64" : "");
  return info;
}

}  // namespace devplace::probe
