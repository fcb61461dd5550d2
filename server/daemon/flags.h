// devplaced's command line: the --flags (defined in flags.cc, one per DaemonConfig setting), the
// --help text, the check of every flag before absl parses them, and the DaemonConfig they give.
//
// Contract: SetUpFlagUsage() before parsing; HelpText(), then CheckFlags() on the raw arguments (absl would exit 1
// on a bad flag by itself; devplaced exits 2 with CheckFlags' line); then absl::ParseCommandLine on
// the arguments CheckFlags gave back; then ConfigFromFlags(). Every error is one line for
// `devplaced: <message> (see --help)`.
#ifndef DEVPLACE_SERVER_DAEMON_FLAGS_H_
#define DEVPLACE_SERVER_DAEMON_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/daemon/config.h"

namespace devplace::daemon {

// Installs devplaced's usage message and lists the flags of flags.cc under "Flags from
// devplaced.cc" in --help (as they always were, when they lived there), so --help and
// --helpshort stay as they were.
void SetUpFlagUsage();

// The help that `args` (argv without argv[0]) ask for, or nullopt: --help, -h, --helpshort and
// --helppackage list devplaced's own flags, --helpfull every flag, --help=SUBSTRING (or
// --helpmatch=) the flags whose name, file or description holds SUBSTRING, --helpon=FILE those of
// FILE.cc; in absl's layout (usage message, "  Flags from devplaced.cc:", "    --name (help);
// default: x;"). devplaced prints it on stdout and exits 0 (absl's own handler exits 1).
std::optional<std::string> HelpText(const std::vector<std::string>& args);

// Checks every flag in `args` (argv without argv[0]) and in --flagfile files before absl parses
// them: an unknown flag (with "; did you mean --X?" when one is near, as the CLI says it), a value
// the flag cannot take or an unreadable flag file is one line naming the flag and what it accepts.
// nullopt when all is well. Flag names take - or _ alike, as the CLI's do (--lease-state-file is
// --lease_state_file); `for_absl` (when given) receives the arguments for absl::ParseCommandLine,
// each flag spelled with underscores and each --flagfile replaced by the flags its files hold.
std::optional<std::string> CheckFlags(const std::vector<std::string>& args, std::vector<std::string>* for_absl = nullptr);

// The DaemonConfig the parsed flags give, checked by ValidateConfig.
absl::StatusOr<ValidConfig> ConfigFromFlags();

}  // namespace devplace::daemon

#endif  // DEVPLACE_SERVER_DAEMON_FLAGS_H_
