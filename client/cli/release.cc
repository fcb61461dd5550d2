// `devplace release --lease_id=ID`: ends a lease now (LeaseRelease), such as the time-limited
// lease a pick over TCP holds, which otherwise lasts until its TTL passes.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

ABSL_FLAG(std::string, lease_id, "", "The lease to end: the id `devplace pick` printed (1 to 64 bytes)");

namespace devplace::cli {
namespace {

int RunRelease() {
  const std::string id = absl::GetFlag(FLAGS_lease_id);
  if (id.empty() || id.size() > 64) {
    return UsageError("release", absl::StrCat("--lease_id='", id.substr(0, 80),
                                              "': want the lease's id as `devplace pick` printed it (1 to 64 bytes)"));
  }
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::LeaseInfo> lease = client.ReleaseLease(id);
    if (!lease.ok()) return Fail(lease.status());
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*lease);
    std::printf("released lease %s (%d device(s))\n", lease->lease_id().c_str(), lease->devices_size());
    return 0;
  });
}

}  // namespace

Command ReleaseCommand() {
  return {"release", "Shared hosts: end a lease now, so its devices can be picked again.",
          "devplace release --lease_id=ID",
          "Calls LeaseRelease. A lease held for a process ends by itself when the process exits; a lease with a\n"
          "time to live (a pick over TCP, or with --ttl) lasts until it passes unless it is released. NOT_FOUND\n"
          "when no lease has that id (released already, or expired). --json prints the lease as it was.",
          {"lease_id"}, &RunRelease};
}

}  // namespace devplace::cli
