// Helpers of the devplace CLI (defined in devplace.cc) that the commands in other files of
// client/cli/ (fleet.cc) share: flag parsing for requests, connection options, output.
#ifndef DEVPLACE_CLIENT_CLI_CLI_H_
#define DEVPLACE_CLIENT_CLI_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/client.h"
#include "google/protobuf/message.h"

ABSL_DECLARE_FLAG(std::string, address);
ABSL_DECLARE_FLAG(absl::Duration, timeout);
ABSL_DECLARE_FLAG(bool, json);

namespace devplace::cli {

// The command being run, for error lines.
extern const char* g_command;

// Prints `devplace: <command>: <message> (see devplace <command> --help)` on stderr; returns 2.
int UsageError(absl::string_view command, absl::string_view message);

// The ResolveOptions the request flags (--workload, --device_map, --env, ...) describe, on top of
// this process's environment and /dev unless --no_environment or `use_environment` is false.
// `offline`: the job runs against a saved inventory (this /dev is not scanned). INVALID_ARGUMENT
// naming the flag for a bad value.
absl::StatusOr<ResolveOptions> OptionsFromFlags(bool offline, bool use_environment = true);

// Prints `rows` (the first is the header) on stdout as columns separated by two spaces.
void PrintTable(const std::vector<std::vector<std::string>>& rows);
// "80.0 GiB", "512 B".
std::string Bytes(uint64_t bytes);
// `enum_name` without `prefix` ("BACKEND_STATE_READY" -> "READY").
std::string Strip(absl::string_view prefix, const std::string& enum_name);
// The row's name ("cuda/nvidia"), or the enum name for an unknown row.
std::string RowName(v1::Row row);
// Prints the protobuf JSON mapping of `message` on stdout; 0, or 1 after an error line.
int PrintJson(const google::protobuf::Message& message);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_CLI_H_
