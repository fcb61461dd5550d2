// `devplace release --lease_id=ID`: ends a lease now (LeaseRelease), such as the time-limited
// lease a pick over TCP holds, which otherwise lasts until its TTL passes. `devplace renew
// --lease_id=ID [--ttl=D]`: gives a TTL lease a new time to live from now (LeaseKeepAlive).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

ABSL_FLAG(std::string, lease_id, "",
          "The lease: the id `devplace pick` printed, or `devplace inventory` shows on your own leases (1 to 64 bytes)");

namespace devplace::cli {
namespace {

// --lease_id, or "" after a usage error for `command`.
bool LeaseIdFlag(const char* command, std::string& id) {
  id = absl::GetFlag(FLAGS_lease_id);
  if (!id.empty() && id.size() <= 64) return true;
  UsageError(command, absl::StrCat("--lease_id='", id.substr(0, 80),
                                   "': want the lease's id as `devplace pick` printed it or `devplace inventory` shows it "
                                   "on your own leases (1 to 64 bytes)"));
  return false;
}

int RunRelease() {
  std::string id;
  if (!LeaseIdFlag("release", id)) return kExitUsage;
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::LeaseInfo> lease = client.ReleaseLease(id);
    if (!lease.ok()) return Fail(lease.status());
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*lease);
    std::printf("released lease %s (%d device(s))\n", lease->lease_id().c_str(), lease->devices_size());
    return 0;
  });
}

int RunRenew() {
  std::string id;
  if (!LeaseIdFlag("renew", id)) return kExitUsage;
  const absl::Duration ttl = absl::GetFlag(FLAGS_ttl);
  if (const std::string error = LeaseTtlFlagError(ttl, "0: the default, 5m"); !error.empty()) {
    return UsageError("renew", error);
  }
  return WithClient([&](Client& client) {
    absl::StatusOr<v1::LeaseInfo> lease = client.KeepLeaseAlive(id, ttl);
    if (!lease.ok()) return Fail(lease.status());
    if (absl::GetFlag(FLAGS_json)) return PrintJson(*lease);
    std::printf("renewed lease %s (%d device(s)) until %s\n", lease->lease_id().c_str(), lease->devices_size(),
                absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixSeconds(lease->expires_at().seconds()),
                                 absl::UTCTimeZone())
                    .c_str());
    return 0;
  });
}

}  // namespace

Command RenewCommand() {
  return {"renew", "Shared hosts: give a lease with a time to live a new one, from now.",
          "devplace renew --lease_id=ID [--ttl=D]",
          "Calls LeaseKeepAlive: the lease (one with a time to live: a pick over TCP, or with --ttl) now ends D\n"
          "from now (--ttl, 1s to 24h; default 5m). Only the user who picked it (or root) may renew it; your own\n"
          "leases' ids are in `devplace inventory`. NOT_FOUND when no lease has that id (released already, or\n"
          "expired); FAILED_PRECONDITION for a lease held for a process, which lasts as long as the process.\n"
          "--json prints the lease as it is now.",
          {"lease_id", "ttl"}, &RunRenew};
}

Command ReleaseCommand() {
  return {"release", "Shared hosts: end a lease now, so its devices can be picked again.",
          "devplace release --lease_id=ID",
          "Calls LeaseRelease. A lease held for a process ends by itself when the process exits; a lease with a\n"
          "time to live (a pick over TCP, or with --ttl) lasts until it passes unless it is released (or renewed:\n"
          "`devplace renew`). NOT_FOUND\n"
          "when no lease has that id (released already, or expired). --json prints the lease as it was.",
          {"lease_id"}, &RunRelease};
}

}  // namespace devplace::cli
