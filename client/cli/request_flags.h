// The request flags of `devplace resolve` (request_flags.cc): what describes the job (its workload,
// convention, device_map, rank, variables, device nodes, packages and library versions) and
// --fallback; the one list of which of them `fleet --resolve`, `pick` and `run` take; and
// OptionsFromFlags(), which turns them into ResolveOptions.
#ifndef DEVPLACE_CLIENT_CLI_REQUEST_FLAGS_H_
#define DEVPLACE_CLIENT_CLI_REQUEST_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devplace/client.h"

namespace devplace::cli {

// The commands that take request flags, each a subset of resolve's.
enum class RequestFlagUser {
  kResolve,  // devplace resolve: every flag that describes the job (--fallback is resolve's, after its own)
  kFleet,    // devplace fleet --resolve: the job on other nodes, so not --no_environment (implied) and not
             // --dra_metadata_dir (this host's DRA claims)
  kPick,     // devplace pick and run: what bounds the choice: the job's workload, backends, variables
             // (--env, --no_environment), /dev nodes and DRA devices
};

// The names (without "--") of the request flags `user` takes that describe the job, in the order of
// `devplace resolve --help`; each command's Command::flags and help list them in this order.
std::vector<const char*> RequestFlagNames(RequestFlagUser user);

// Every --env value in command-line order (absl keeps only the last value of a flag): the
// command-line parser appends each one, OptionsFromFlags() reads them.
extern std::vector<std::string> g_env_values;

// The ResolveOptions the request flags (--workload, --convention, --device_map, --env, ...)
// describe, on top of this process's placement variables and /dev nodes
// (ResolveOptions::FromEnvironment) unless --no_environment or `use_environment` is false; the
// flags win over the environment. `offline`: the job is resolved against a saved inventory, so
// this /dev says nothing (job_device_nodes stays unknown unless --job_device_nodes). Errors:
// INVALID_ARGUMENT with a usage message naming the flag (missing or bad --workload, bad
// --convention, unsupported --transformers_version / --accelerate_version, an --env piece that is
// not K=V). Without `workload_required` a missing --workload leaves it UNSPECIFIED (pick, run).
absl::StatusOr<ResolveOptions> OptionsFromFlags(bool offline, bool use_environment = true,
                                                bool workload_required = true);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_REQUEST_FLAGS_H_
