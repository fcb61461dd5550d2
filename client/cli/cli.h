// Helpers of the devplace CLI (defined in devplace.cc) that the commands in other files of
// client/cli/ (fleet.cc) share: exit statuses, error lines, flag parsing for requests. Output is
// output.h, connection options connect_flags.h.
#ifndef DEVPLACE_CLIENT_CLI_CLI_H_
#define DEVPLACE_CLIENT_CLI_CLI_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/client.h"

ABSL_DECLARE_FLAG(std::string, address);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(bool, json);

namespace devplace::cli {

// Exit statuses: 0 success, kExitError an error from the daemon or the work, kExitUsage a usage error.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// The command being run, for error lines.
extern const char* g_command;

// Prints `devplace: <command>: <message> (see devplace <command> --help)` on stderr, or
// `devplace: <message> (see devplace --help)` when `command` is empty; returns kExitUsage.
int UsageError(absl::string_view command, absl::string_view message);

// Prints `devplace: <g_command>: <CODE>: <message>` on stderr (CODE the status code's name, the
// message on one line, control characters replaced, cut after 1000 characters); returns kExitError.
int Fail(const absl::Status& status);

// The ResolveOptions the request flags (--workload, --device_map, --env, ...) describe, on top of
// this process's environment and /dev unless --no_environment or `use_environment` is false.
// `offline`: the job runs against a saved inventory (this /dev is not scanned). INVALID_ARGUMENT
// naming the flag for a bad value.
absl::StatusOr<ResolveOptions> OptionsFromFlags(bool offline, bool use_environment = true);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_CLI_H_
