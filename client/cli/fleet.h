// `devplace fleet`: asks many daemons at once for their inventory, or (--resolve) where a job
// would run on each, and prints one row per target. Registered in devplace.cc's command table.
#ifndef DEVPLACE_CLIENT_CLI_FLEET_H_
#define DEVPLACE_CLIENT_CLI_FLEET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace devplace::cli {

inline constexpr const char* kFleetSummary =
    "Ask many daemons at once: their accelerators, or (--resolve) a job's device on each.";
inline constexpr const char* kFleetUsage = "devplace fleet --targets=FILE|TARGET,TARGET,... [--resolve --workload=...]";
inline constexpr const char* kFleetDetails =
    "Calls every target (host:port or unix:/path) at once, at most --concurrency at a time, each\n"
    "with the --timeout deadline, and prints one row per target in the order given, whatever order\n"
    "the answers come in. --targets is a comma list or a file with one target per line (`#` starts a\n"
    "comment; blank lines are skipped).\n"
    "Without --resolve (GetInventory) a row has the hostname and, for each accelerator row with\n"
    "devices, its state, usable/total devices, models and memory per device.\n"
    "With --resolve (ResolveDevice, taking the request flags of `devplace resolve`) a row says what the\n"
    "job would get on that node: device, backend, devices and warnings, or the error (e.g.\n"
    "FAILED_PRECONDITION: the node cannot satisfy the request). Only the flags describe the job:\n"
    "this process's environment and /dev are not sent (--no_environment is implied).\n"
    "A target that fails (unreachable: UNAVAILABLE; too slow: DEADLINE_EXCEEDED; or the daemon's\n"
    "refusal) is one error row; the other rows still come. --json prints a devplace.cli.FleetReport\n"
    "(client/cli/fleet.proto) in the protobuf JSON mapping instead, with each node's whole inventory\n"
    "or ResolveDeviceResponse.\n"
    "--timeout=0 sets no deadline (a target that accepts connections but never answers then holds\n"
    "its row until gRPC gives up connecting).\n"
    "Exit status: 0 every target answered; 1 at least one row is an error (all rows are still\n"
    "printed); 2 usage error (no targets, unreadable targets file, a malformed target: the message\n"
    "names its line or position; request flags without --resolve). --address does not apply: use\n"
    "--targets.";

// The flags `fleet` accepts besides the global ones (--timeout, --json).
std::vector<const char*> FleetFlags();

// Runs `devplace fleet` with the parsed flags; returns the exit status.
int RunFleet();

// The targets --targets=VALUE names, in order: VALUE is the path of an existing file (one target
// per line, `#` comments, blank lines skipped) or else a comma list. Each target is
// "unix:PATH" (PATH non-empty) or "HOST:PORT" / "[V6]:PORT" with PORT in 1..65535.
// INVALID_ARGUMENT (a usage error) naming the file and line, or the list position, of a malformed
// target; also for an empty VALUE, a file that names no target, a directory, a file that cannot
// be read, and a VALUE without ':' that is no file.
absl::StatusOr<std::vector<std::string>> ParseFleetTargets(const std::string& value);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_FLEET_H_
