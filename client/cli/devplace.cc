// devplace: the command-line client of devplaced. This file is the dispatcher: the command table,
// the global --json flag, the help texts, the command-line parser and main.
//
//   devplace [global flags] <command> [command flags]
//   commands: resolve, inventory, labels, backends, watch, health, refresh, probe, fleet, slurm, pick, run,
//   release, version
//   devplace --version: prints `devplace VERSION` (server/common/version.h) and exits 0
//
// Each command is a file of its own (resolve.cc, ..., fleet.cc) defining its flags, its Command
// entry (cli.h) and what it runs; what several share is output.{h,cc} (tables, JSON),
// connect_flags.{h,cc} (--address, --timeout, --tls_*), request_flags.{h,cc} (resolve's request
// flags, and which of them fleet, pick and run take) and inventory_file.cc (--inventory).
// resolve, inventory, labels, backends, watch, health and refresh call the daemon through
// libdevplace; `probe`, `resolve --inventory=FILE` and `labels --inventory=FILE` run the probers /
// the resolver / the label mapping in-process and need no daemon. The parser here checks the
// command line itself (each command accepts only the global flags and its own) so that usage errors
// exit with status 2.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/request_flags.h"
#include "server/common/flag_errors.h"
#include "server/common/version.h"
#include "server/placement/env_typos.h"

ABSL_FLAG(bool, json, false, "Print the protobuf JSON mapping (as grpcurl would) instead of tables");

namespace devplace::cli {

const char* g_command = "";
std::vector<std::string> g_arguments;
std::vector<std::string> g_command_line;

namespace {

// One line, printable, bounded: messages may quote file contents or long inputs. A longer one keeps
// its first 600 and last 400 characters: what to do about an error comes last (a pick's refusal
// ends with its advice), and a cut after the first 1000 lost it.
std::string OneLine(absl::string_view text) {
  std::string message(text);
  for (char& c : message) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  constexpr size_t kHead = 600, kTail = 400;
  if (message.size() > kHead + kTail) {
    message = absl::StrCat(message.substr(0, kHead), " ... (", message.size() - kHead - kTail,
                           " characters left out) ... ", message.substr(message.size() - kTail));
  }
  return message;
}

}  // namespace

int UsageError(absl::string_view command, absl::string_view message) {
  const std::string line = OneLine(message);
  if (command.empty()) {
    std::fprintf(stderr, "devplace: %s (see devplace --help)\n", line.c_str());
  } else {
    std::fprintf(stderr, "devplace: %s: %s (see devplace %s --help)\n", std::string(command).c_str(), line.c_str(),
                 std::string(command).c_str());
  }
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "devplace: %s: %s: %s\n", g_command, absl::StatusCodeToString(status.code()).c_str(),
               OneLine(status.message()).c_str());
  return kExitError;
}

namespace {

const std::vector<const char*> kGlobalFlags = [] {
  std::vector<const char*> flags = ConnectFlagNames();  // --address, --timeout, --tls_*
  flags.push_back("json");
  return flags;
}();

// The commands in `devplace --help` order.
const std::vector<Command>& Commands() {
  static const std::vector<Command>* const kCommands = new std::vector<Command>{
      ResolveCommand(), InventoryCommand(), LabelsCommand(), BackendsCommand(), WatchCommand(),
      HealthCommand(),  RefreshCommand(),   ProbeCommand(),  FleetCommand(),
      SlurmGresCommand(), SlurmTaskPrologCommand(), SlurmHealthCheckCommand(), PickCommand(), RunCommand(), ReleaseCommand(), RenewCommand(), VersionCommand(),
  };
  return *kCommands;
}

const Command* FindCommand(absl::string_view name) {
  for (const Command& command : Commands()) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

// `text` filled into lines of at most 96 columns, each starting with `indent` spaces.
std::string Wrap(const std::string& text, size_t indent) {
  std::string out, line(indent, ' ');
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent && line.size() + 1 + word.size() > 96) {
      absl::StrAppend(&out, line, "\n");
      line.assign(indent, ' ');
    }
    absl::StrAppend(&line, line.size() > indent ? " " : "", word);
  }
  return absl::StrCat(out, line, "\n");
}

std::string FlagHelp(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return "";
  const bool is_bool = flag->IsOfType<bool>();
  std::string help = flag->Help();
  const std::string def = flag->DefaultValue();
  if (!is_bool && !def.empty()) absl::StrAppend(&help, " (default: ", def, ")");
  return absl::StrCat("  --", name, is_bool ? "" : "=VALUE", "\n", Wrap(help, 6));
}

void PrintGeneralHelp(FILE* out) {
  std::string text =
      "devplace: which device should a PyTorch job use, and what accelerators does this host have?\n"
      "The command-line client of devplaced, the per-host devplace daemon.\n\n"
      "Usage: devplace [global flags] <command> [command flags]\n\nCommands:\n";
  // One column as wide as the longest name ("slurm health-check") and two spaces, summaries wrapped
  // under themselves: help2man (the man page) and the bash completion read these lines.
  size_t width = 0;
  for (const Command& command : Commands()) width = std::max(width, std::strlen(command.name));
  for (const Command& command : Commands()) {
    const std::string summary = Wrap(command.summary, width + 4);
    absl::StrAppend(&text, absl::StrFormat("  %-*s", width + 2, command.name), summary.substr(width + 4));
  }
  absl::StrAppend(&text, "\nGlobal flags (any command):\n");
  for (const char* flag : kGlobalFlags) absl::StrAppend(&text, FlagHelp(flag));
  absl::StrAppend(&text,
                  "\nExit status: 0 success; 1 error from the daemon or the work itself, reported as one line\n"
                  "on stderr `devplace: <command>: <gRPC code>: <message>`; 2 usage error: an unknown command or\n"
                  "flag, a bad value (also one the daemon refuses as INVALID_ARGUMENT, e.g. --device_map=atuo).\n"
                  "Flag names take - or _ alike (--device-map is --device_map).\n"
                  "`devplace <command> --help` describes a command and its flags; `devplace --version` prints\n"
                  "this client's version, `devplace version` the daemon's too.\n");
  std::fputs(text.c_str(), out);
}

void PrintCommandHelp(const Command& command) {
  std::string text = absl::StrCat("Usage: ", command.usage, "\n\n", command.summary, "\n", command.details, "\n");
  if (!command.flags.empty()) {
    absl::StrAppend(&text, "\nFlags:\n");
    for (const char* flag : command.flags) absl::StrAppend(&text, FlagHelp(flag));
  }
  absl::StrAppend(&text, "\nGlobal flags:\n");
  for (const char* flag : kGlobalFlags) absl::StrAppend(&text, FlagHelp(flag));
  std::fputs(text.c_str(), stdout);
}

// "; did you mean --X?" for an unknown flag `name` near one of `command`'s or the global flags
// (underscores as written in --help), or "".
std::string FlagSuggestion(const Command& command, const std::string& name) {
  std::vector<std::string> flags(kGlobalFlags.begin(), kGlobalFlags.end());
  flags.insert(flags.end(), command.flags.begin(), command.flags.end());
  return DidYouMeanFlag(placement::ClosestName(name, flags, 2));
}

// The first words of the command names ("slurm" for "slurm gres"), each once.
std::vector<std::string> CommandWords() {
  std::vector<std::string> known;
  for (const Command& c : Commands()) {
    const std::string word(absl::string_view(c.name).substr(0, absl::string_view(c.name).find(' ')));
    if (std::find(known.begin(), known.end(), word) == known.end()) known.push_back(word);
  }
  return known;
}

// The command line as the parser reads it, before it is checked: the words that are not flags (the
// first names the command), those after `--`, each flag with its value (a flag that takes a value
// and has no `=` takes the next argument, as in `--address unix:/s pick`), and the first problem.
struct ScannedCommandLine {
  std::vector<std::string> positional;
  std::vector<std::string> after_dashes;  // after `--`: a command's trailing arguments
  std::vector<std::pair<std::string, std::string>> given;  // flag name, value
  bool help = false;
  bool version = false;  // --version: the client's version, whatever else the command line says
  std::string error;  // the first bad flag, reported once the command is known
  std::string unknown_flag;  // its name when that flag does not exist, for "did you mean"
};

ScannedCommandLine ScanCommandLine(int argc, char** argv) {
  ScannedCommandLine s;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) s.after_dashes.emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      s.positional.emplace_back(arg);
      continue;
    }
    auto [name, value, typed] = SplitFlagArgument(arg);  // --device-map is --device_map
    if (name == "help" || name == "h" || name == "helpfull" || name == "helpshort") {
      s.help = true;
      continue;
    }
    if (name == "version") {
      if (value) {
        if (s.error.empty()) s.error = absl::StrCat("flag ", typed, " takes no value (", typed, "=", *value, ")");
      } else {
        s.version = true;
      }
      continue;
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {  // --nojson, --nostrict
      const absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>() && !value) {
        flag = positive;
        name = name.substr(2);
        value = "false";
      }
    }
    if (flag == nullptr || name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      if (s.error.empty()) {
        s.error = absl::StrCat("unknown flag ", typed);  // as typed: -x, not --x
        s.unknown_flag = name;
      }
      continue;
    }
    if (!value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        if (s.error.empty()) s.error = absl::StrCat("flag ", typed, " needs a value");
        continue;
      }
    }
    s.given.emplace_back(name, *value);
  }
  return s;
}

// Whether a failure of this command line prints PrintPickFailClosed()'s lines: the command the
// parser reads is `pick` (its first word that is not a flag or a flag's value; `devplace -- pick`
// too) and --json does not ask for JSON. When the parser finds no command (a flag that needs a
// value took it, as in `--address pick`; a misspelt flag's value was read as the command, as in
// `--adress unix:/s pick`; `pikc`, which the usage error answers with "did you mean pick"), any
// argument `pick` before `--`, or a first word nearest `pick`, counts: a usage error must not let
// `eval "$(devplace ... pick)"` succeed with an empty output.
bool IsPickForEval(int argc, char** argv) {
  const ScannedCommandLine s = ScanCommandLine(argc, argv);
  bool json = false;
  for (const auto& [name, value] : s.given) {
    bool parsed = false;
    std::string ignored;
    if (name == "json" && absl::ParseFlag(value, &parsed, &ignored)) json = parsed;
  }
  if (json) return false;
  const std::vector<std::string>& words = s.positional.empty() ? s.after_dashes : s.positional;
  if (!words.empty() && FindCommand(words[0]) != nullptr) return words[0] == "pick";
  for (int i = 1; i < argc && absl::string_view(argv[i]) != "--"; ++i) {
    if (absl::string_view(argv[i]) == "pick") return true;
  }
  return !words.empty() && placement::ClosestName(words[0], CommandWords(), 2) == std::optional<std::string>("pick");
}

// Parses argv: sets the flags, returns the command, or the exit status to end with.
struct ParsedCommandLine {
  const Command* command = nullptr;
  std::optional<int> exit_status;
};

ParsedCommandLine ParseCommandLine(int argc, char** argv) {
  ParsedCommandLine result;
  ScannedCommandLine scanned = ScanCommandLine(argc, argv);
  std::vector<std::string>& positional = scanned.positional;
  std::vector<std::string>& after_dashes = scanned.after_dashes;
  const std::vector<std::pair<std::string, std::string>>& given = scanned.given;
  const bool version = scanned.version;
  bool help = scanned.help;
  std::string& error = scanned.error;
  const std::string& unknown_flag = scanned.unknown_flag;

  if (version && !help) {
    std::printf("devplace %s\n", kVersion);
    result.exit_status = 0;
    return result;
  }
  if (positional.empty()) positional.swap(after_dashes);
  if (positional.empty()) {
    if (!error.empty()) {
      result.exit_status = UsageError("", error);
    } else if (help) {
      PrintGeneralHelp(stdout);
      result.exit_status = 0;
    } else {
      result.exit_status = UsageError("", "missing command (one of resolve, inventory, labels, backends, watch, health, refresh, probe, fleet, slurm, pick, run, version)");
    }
    return result;
  }
  if (positional[0] == "help") {  // devplace help [command]
    help = true;
    positional.erase(positional.begin());
    if (positional.empty()) {
      PrintGeneralHelp(stdout);
      result.exit_status = 0;
      return result;
    }
  }
  // Two-word commands ("slurm gres"): the group word and its subcommand name one command.
  if (positional.size() >= 2 && FindCommand(absl::StrCat(positional[0], " ", positional[1])) != nullptr) {
    positional[0] = absl::StrCat(positional[0], " ", positional[1]);
    positional.erase(positional.begin() + 1);
  }
  const Command* command = FindCommand(positional[0]);
  if (command == nullptr) {
    std::vector<const Command*> subcommands;  // "slurm" names the group of "slurm gres", ...
    std::vector<std::string> names;
    for (const Command& c : Commands()) {
      absl::string_view name = c.name;
      if (absl::ConsumePrefix(&name, absl::StrCat(positional[0], " "))) {
        subcommands.push_back(&c);
        names.emplace_back(name);
      }
    }
    if (!subcommands.empty() && help && positional.size() == 1) {  // devplace slurm --help
      std::string text = absl::StrCat("Subcommands of devplace ", positional[0], ":\n");
      for (const Command* c : subcommands) absl::StrAppend(&text, "\n  ", c->usage, "\n      ", c->summary, "\n");
      absl::StrAppend(&text, "\ndevplace ", positional[0], " SUBCOMMAND --help describes one.\n");
      std::fputs(text.c_str(), stdout);
      result.exit_status = 0;
      return result;
    }
    if (!subcommands.empty()) {
      const std::string problem =
          positional.size() > 1 ? absl::StrCat("unknown subcommand \"", positional[0], " ", positional[1], "\"")
                                : absl::StrCat("missing subcommand after \"", positional[0], "\"");
      result.exit_status = UsageError("", absl::StrCat(problem, " (one of ", absl::StrJoin(names, ", "), ")"));
      return result;
    }
    const std::optional<std::string> near = placement::ClosestName(positional[0], CommandWords(), 2);
    result.exit_status = UsageError("", absl::StrCat("unknown command \"", positional[0], "\"",
                                                     near ? absl::StrCat("; did you mean \"", *near, "\"?") : ""));
    return result;
  }
  g_command = command->name;
  if (command->trailing_arguments) {
    g_arguments = std::move(after_dashes);
  } else {
    positional.insert(positional.end(), after_dashes.begin(), after_dashes.end());
  }
  if (!error.empty()) {
    if (!unknown_flag.empty()) absl::StrAppend(&error, FlagSuggestion(*command, unknown_flag));
    result.exit_status = UsageError(command->name, error);
    return result;
  }
  if (help) {
    PrintCommandHelp(*command);
    result.exit_status = 0;
    return result;
  }
  if (positional.size() > 1) {
    result.exit_status = UsageError(command->name, absl::StrCat("unexpected argument \"", positional[1], "\""));
    return result;
  }
  for (const auto& [name, value] : given) {
    const bool allowed = std::count(kGlobalFlags.begin(), kGlobalFlags.end(), name) > 0 ||
                         std::count(command->flags.begin(), command->flags.end(), name) > 0;
    if (!allowed) {
      result.exit_status = UsageError(command->name, absl::StrCat("flag --", name, " does not apply to this command"));
      return result;
    }
    std::string error;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (!flag->ParseFrom(value, &error)) {
      result.exit_status = UsageError(command->name, BadFlagValue(*flag, value, error));
      return result;
    }
    if (name == "timeout" && !(error = TimeoutFlagError(value)).empty()) {
      result.exit_status = UsageError(command->name, error);
      return result;
    }
    if (name == "env") g_env_values.push_back(value);
  }
  result.command = command;
  return result;
}

}  // namespace
}  // namespace devplace::cli

int main(int argc, char** argv) {
  // gRPC's own log lines ("Handshake failed ...") would reach the terminal beside the one error
  // line each command prints; an explicit GRPC_VERBOSITY (e.g. DEBUG) still wins.
  ::setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  devplace::cli::g_command_line.assign(argv + 1, argv + argc);
  const devplace::cli::ParsedCommandLine parsed = devplace::cli::ParseCommandLine(argc, argv);
  const int status = parsed.exit_status ? *parsed.exit_status : parsed.command->run();
  // `eval "$(devplace pick ...)"` must fail whatever went wrong, a bad flag included.
  if (status != 0 && devplace::cli::IsPickForEval(argc, argv)) devplace::cli::PrintPickFailClosed();
  return status;
}
