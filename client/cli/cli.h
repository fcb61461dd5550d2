// What the files of the devplace CLI share (besides output.h, the tables and JSON, connect_flags.h,
// the connection flags and WithClient, and request_flags.h, the request flags and which commands take
// them): the Command entry every command file defines, exit statuses and error lines (devplace.cc),
// the flags of `pick` and `run` (pick.cc) and saved inventories (inventory_file.cc).
#ifndef DEVPLACE_CLIENT_CLI_CLI_H_
#define DEVPLACE_CLIENT_CLI_CLI_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/client.h"

ABSL_DECLARE_FLAG(bool, json);                 // devplace.cc: a global flag, every command honours it
ABSL_DECLARE_FLAG(std::string, inventory);     // inventory_file.cc: resolve and labels
ABSL_DECLARE_FLAG(absl::Duration, ttl);         // pick.cc: pick, run and renew

namespace devplace::cli {

// ---- the commands ----

// One `devplace <name>` command. The parser accepts the global flags and `flags`, refuses any
// other with a usage error, parses them, and then calls `run`, whose result is the exit status.
struct Command {
  const char* name;
  const char* summary;             // one line, for `devplace --help`
  const char* usage;               // "devplace <name> ...", first line of `devplace <name> --help`
  const char* details;             // the rest of `devplace <name> --help`, lines ending in \n but the last
  std::vector<const char*> flags;  // besides the global ones, in help order
  int (*run)();
  // Whether the command takes arguments after `--` (`devplace run -- COMMAND ...`): g_arguments.
  bool trailing_arguments = false;
};

// Each command's entry, defined in the file of the same name (resolve.cc, inventory.cc, ...);
// devplace.cc lists them in this order.
Command ResolveCommand();
Command InventoryCommand();
Command LabelsCommand();
Command BackendsCommand();
Command WatchCommand();
Command HealthCommand();
Command RefreshCommand();
Command ProbeCommand();
Command FleetCommand();
Command SlurmGresCommand();        // slurm.cc: "slurm gres"
Command SlurmTaskPrologCommand();  // slurm.cc: "slurm task-prolog"
Command SlurmHealthCheckCommand();  // slurm.cc: "slurm health-check"
Command VersionCommand();
Command PickCommand();             // pick.cc
Command RunCommand();              // run.cc
Command ReleaseCommand();          // release.cc
Command RenewCommand();            // release.cc

// ---- devplace.cc: exit statuses and error lines ----

// Exit statuses: 0 success, kExitError an error from the daemon or the work, kExitUsage a usage error.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// The name of the command being run ("" until the parser knows it), for error lines.
extern const char* g_command;
// The arguments after `--`, for a command with trailing_arguments.
extern std::vector<std::string> g_arguments;
// The command line as given (argv[1] on), for advice that spells it (SpellWaitCommand).
extern std::vector<std::string> g_command_line;

// ---- pick.cc: the flags of `pick` and `run` ----

// The pick's order by health, in both commands' --help (docs/PROBE.md "Device health").
#define DEVPLACE_PICK_HEALTH_HELP                                                                     \
  "FAULT and LOST devices are never picked; a DEGRADED one comes after the OK ones with as many\n"    \
  "processes (docs/PROBE.md \"Device health\"; `devplace inventory` shows each device's HEALTH).\n"

// Their names, for both commands' entries: --count, --min_free, --shared, --row, --ttl, --wait, then
// the request flags that bound the choice (RequestFlagNames(RequestFlagUser::kPick), request_flags.h).
const std::vector<const char*>& PickFlagNames();
// PickOptions from --count, --min_free, --shared, --row, --ttl, --wait and this process's
// environment (ResolveOptions::FromEnvironment): the holder is `process_holder` (pick: the parent
// shell; run: this process) unless --ttl asks for a TTL lease. INVALID_ARGUMENT naming the flag.
absl::StatusOr<PickOptions> PickOptionsFromFlags(v1::LeaseHolder process_holder);
// "" when --ttl=`ttl` is 0 or within the daemon's lease bounds (1s to 24h, placement/pick.h), else
// the error naming the flag, the value, a duration's range and what 0 means (`zero`).
std::string LeaseTtlFlagError(absl::Duration ttl, absl::string_view zero);
// `status` with the daemon's generic commands of a refusal a wait may help (placement::kWaitCommands)
// replaced by this caller's own command line with --wait=D (its --wait dropped; at most 300
// characters, then " ..."); any other status as it is.
absl::Status SpellWaitCommand(const absl::Status& status);
// client.Pick(options); when the daemon says a process lease needs the unix socket (this is TCP),
// again with the holder left to the daemon (a TTL lease), which `options` then says.
absl::StatusOr<v1::PickDevicesResponse> PickOverAnyTransport(Client& client, PickOptions& options);
// ---- pick_holder.cc: who holds the lease of `devplace pick` ----

// The process that evaluates `devplace pick`'s output: the nearest ancestor that holds the pipe
// this process's stdout writes to open for reading (/proc/<pid>/fdinfo: the shell that runs
// `eval "$(devplace pick)"`, which runs the job), climbing only past processes that write to that
// same pipe (a subshell bash forks for `$(cmd 2>/dev/null)`, a wrapper such as `timeout` or `flock`
// that waits for its command) and past the subshell that runs the pipeline of `$(cmd | cat)` (same
// executable, command line and session as its parent, which reads its stdout); 16 steps at most.
// When no ancestor reads the output (a file, a terminal): this process's parent.
pid_t EvaluatingShell();
// EvaluatingShell(), or FAILED_PRECONDITION naming the program and the spellings that work when it
// is a wrapper that runs a command and ends with it (timeout, flock, nice, stdbuf, env, time,
// nohup, setsid, strace, script, xargs, watch, sudo, ...: /proc/<pid>/comm), whose lease would end
// with the pick.
absl::StatusOr<pid_t> PickHolder();
// What `devplace pick` prints on stdout when it fails (not with --json): the mask variables of the
// row the pick was for (every row's when RunPick did not learn it) set to show no device
// (placement::NoDeviceEnvironment, rule P-FAIL-CLOSED), `false` and a comment, so that
// `eval "$(devplace pick)"` fails and hides the devices.
void PrintPickFailClosed();

// Prints `devplace: <command>: <message> (see devplace <command> --help)` on stderr, or
// `devplace: <message> (see devplace --help)` when `command` is empty; returns kExitUsage.
int UsageError(absl::string_view command, absl::string_view message);

// Prints `devplace: <g_command>: <CODE>: <message>` on stderr (CODE the status code's name, the
// message on one line, control characters replaced; over 1000 characters, its first 600 and last
// 400, the end being where the advice is); returns kExitError.
int Fail(const absl::Status& status);

// ---- inventory_file.cc: --inventory=FILE, for `resolve` and `labels` offline ----

// The saved inventory in `path`: protobuf JSON (`devplace inventory --json`, `devplace probe
// --json`, `devplace-probe --json`; unknown fields ignored) or devplace-probe's binary output.
// Errors, each starting with `--inventory=PATH: `: NOT_FOUND when it cannot be read (with the OS
// error: "cannot read: No such file or directory"), INVALID_ARGUMENT for a directory, an
// unparsable file or one without the cpu row every probe reports first.
absl::StatusOr<v1::Inventory> ReadInventory(const std::string& path);

// Runs `body` on ReadInventory(path), or reports its error (Fail: exit 1, `devplace: <command>:
// NOT_FOUND: --inventory=PATH: cannot read: <OS error>`); else body's status.
int WithInventoryFile(const std::string& path, absl::FunctionRef<int(const v1::Inventory&)> body);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_CLI_H_
