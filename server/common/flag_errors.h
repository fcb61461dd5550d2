// Command-line flag helpers shared by devplaced and the devplace CLI, which check their flags
// themselves so that every flag error exits 2 with one line: splitting `--name=value` (a name takes
// - or _ alike), one wording for a bad value (the flag, the value, the accepted forms; a bare number
// given to a duration flag gets "write 30s") and for the flag an unknown one was probably meant to be.
#ifndef DEVPLACE_SERVER_COMMON_FLAG_ERRORS_H_
#define DEVPLACE_SERVER_COMMON_FLAG_ERRORS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace devplace {

struct FlagArgument {
  std::string name;                  // without the leading dashes; a '-' inside read as '_' (--device-map is device_map)
  std::optional<std::string> value;  // after '=', if any
  std::string typed;                 // the flag as written, dashes included, up to '=': "-x", "--device-map"
};

// `-name`, `--name` or `--name=value` split; `arg` must start with '-'.
inline FlagArgument SplitFlagArgument(absl::string_view arg) {
  const absl::string_view typed = arg.substr(0, arg.find('='));
  absl::ConsumePrefix(&arg, "-");
  absl::ConsumePrefix(&arg, "-");
  const size_t eq = arg.find('=');
  FlagArgument out{std::string(arg.substr(0, eq)), std::nullopt, std::string(typed)};
  std::replace(out.name.begin(), out.name.end(), '-', '_');
  if (eq != absl::string_view::npos) out.value = std::string(arg.substr(eq + 1));
  return out;
}

// "; did you mean --NEAR?" after "unknown flag --x", or "" without a `near` flag (the caller's
// placement::ClosestName of the unknown name among the flags it accepts, distance at most 2).
inline std::string DidYouMeanFlag(const std::optional<std::string>& near) {
  return near ? absl::StrCat("; did you mean --", *near, "?") : "";
}

// "--NAME=VALUE: <why>", where <why> is, for a duration flag, the accepted forms (e.g. 500ms, 30s,
// 5m, 1h) and, for a plain number N, "write Ns"; for a number or a bool (std::optional of one too),
// the type wanted and the flag's help (which states its range, e.g. "(1 to 64)"), on one line of at
// most 300 characters of help; for any other type, absl's parse error and that help.
inline std::string BadFlagValue(const absl::CommandLineFlag& flag, const std::string& value,
                                const std::string& absl_error) {
  std::string why = absl_error;
  // An optional number (std::optional<int>: unset by default) wants the same as the number; a value
  // past the type's range (--local_rank=99999999999) fails the same parse.
  const char* wanted = flag.IsOfType<bool>() ? "want true or false"
                       : flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>() || flag.IsOfType<std::optional<int32_t>>() ||
                               flag.IsOfType<std::optional<int64_t>>()
                           ? "want a whole number"
                       : flag.IsOfType<uint32_t>() || flag.IsOfType<uint64_t>() ||
                               flag.IsOfType<std::optional<uint32_t>>() || flag.IsOfType<std::optional<uint64_t>>()
                           ? "want a whole number, 0 or more"
                       : flag.IsOfType<double>() || flag.IsOfType<float>() || flag.IsOfType<std::optional<double>>()
                           ? "want a number"
                           : nullptr;
  if (flag.IsOfType<absl::Duration>() || flag.IsOfType<std::optional<absl::Duration>>()) {
    const bool number = !value.empty() && value.find_first_not_of("0123456789.") == std::string::npos;
    why = absl::StrCat("a duration needs a unit", number ? absl::StrCat(": write ", value, "s") : "",
                       " (accepted: 500ms, 30s, 5m, 1h30m, 0)");
  } else {
    std::string help = flag.Help();
    std::replace(help.begin(), help.end(), '\n', ' ');
    if (help.size() > 300) help = absl::StrCat(help.substr(0, 300), " ...");
    why = absl::StrCat(wanted != nullptr ? std::string(wanted) : absl_error, " (--", flag.Name(), ": ", help, ")");
  }
  return absl::StrCat("--", flag.Name(), "=", value, ": ", why);
}

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_FLAG_ERRORS_H_
