// The --help of devplaced and devplace-probe (flag_help.h).
#include "server/common/flag_help.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/flag_errors.h"

namespace devplace {
namespace {

// absl's human-readable flag help: "    --name (help); default: x;" filled to 80 columns, later lines
// indented 6 (absl's FlagHelpPrettyPrinter; deploy/man/make_manpage.sh and tests read this layout).
std::string FlagHelpText(const absl::CommandLineFlag& flag) {
  std::string out, line;
  size_t length = 0;
  auto write = [&](absl::string_view text, bool wrap) {
    std::vector<absl::string_view> tokens;
    if (wrap) {
      tokens = absl::StrSplit(text, absl::ByAnyChar(" \t\n\r"), absl::SkipEmpty());
    } else {
      tokens = {text};
    }
    for (absl::string_view token : tokens) {
      if (length > 0 && length + token.size() >= 80) {
        absl::StrAppend(&out, "\n");
        length = 0;
      }
      if (length == 0) {
        const size_t indent = out.empty() ? 4 : 6;
        out.append(indent, ' ');
        length = indent;
      } else {
        out += ' ';
        ++length;
      }
      absl::StrAppend(&out, token);
      length += token.size();
    }
  };
  const bool quoted = flag.IsOfType<std::string>();
  auto shown = [&](const std::string& value) { return quoted ? absl::StrCat("\"", value, "\"") : value; };
  write(absl::StrCat("--", flag.Name()), false);
  write(absl::StrCat("(", flag.Help(), ");"), true);
  write(absl::StrCat("default: ", shown(flag.DefaultValue()), ";"), false);
  if (flag.CurrentValue() != flag.DefaultValue()) write(absl::StrCat("currently: ", shown(flag.CurrentValue()), ";"), false);
  return absl::StrCat(out, "\n");
}

}  // namespace

std::optional<std::string> FlagHelp(const std::vector<std::string>& args, absl::string_view program,
                                    absl::string_view own_file) {
  std::optional<std::function<bool(const absl::CommandLineFlag&)>> shown;
  auto own = [own_file](const absl::CommandLineFlag& flag) { return flag.Filename() == own_file; };
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const FlagArgument a = SplitFlagArgument(arg);
    const std::string match = a.value.value_or("");
    if (a.name == "h" || a.name == "helpshort" || a.name == "helppackage" || (a.name == "help" && match.empty())) {
      shown = own;
    } else if (a.name == "helpfull") {
      shown = [](const absl::CommandLineFlag&) { return true; };
    } else if (a.name == "help" || a.name == "helpmatch") {
      shown = [match](const absl::CommandLineFlag& flag) {
        return absl::StrContains(flag.Name(), match) || absl::StrContains(flag.Filename(), match) ||
               absl::StrContains(flag.Help(), match);
      };
    } else if (a.name == "helpon") {
      shown = [match](const absl::CommandLineFlag& flag) { return absl::StartsWith(flag.Filename(), match + "."); };
    }
    if (shown) break;
  }
  if (!shown) return std::nullopt;
  std::map<std::string, std::vector<const absl::CommandLineFlag*>> files;  // by file, then by name
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if ((*shown)(*flag)) files[flag->Filename()].push_back(flag);
  }
  std::string text = absl::StrCat(program, ": ", absl::ProgramUsageMessage(), "\n\n");
  for (auto& [file, flags] : files) {
    absl::StrAppend(&text, file == files.begin()->first ? "" : "\n", "  Flags from ", file, ":\n");
    std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
    for (const absl::CommandLineFlag* flag : flags) absl::StrAppend(&text, FlagHelpText(*flag));
  }
  if (files.empty()) absl::StrAppend(&text, "No flags matched.\n");
  absl::StrAppend(&text, "\nTry --helpfull for every flag, or --help=SUBSTRING for the flags whose name, description or\n"
                         "file holds SUBSTRING.\n");
  return text;
}

}  // namespace devplace
