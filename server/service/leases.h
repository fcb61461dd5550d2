// The lease table of PickDevices (shared hosts; rule P-PICK, docs/SEMANTICS.md section 14): which
// devices each lease holds and for whom, so that concurrent picks never hand out the same device.
// The pick itself is placement::Pick (pure); the table runs it under its own lock with the units
// already leased and adds the new lease before the lock is released.
//
// A lease is held for a process (released when it exits: a pidfd that becomes readable, or, where
// pidfd_open is missing, its /proc start time no longer matching, checked every second, which also
// guards against a reused pid) or for a time to live (released when it passes without a
// LeaseKeepAlive). No gRPC here.
#ifndef DEVPLACE_SERVER_SERVICE_LEASES_H_
#define DEVPLACE_SERVER_SERVICE_LEASES_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/pick.h"

namespace devplace::service {

// The most leases held at once; a pick past it is RESOURCE_EXHAUSTED.
inline constexpr size_t kMaxLeases = 1024;

// A process as /proc (this process's pid namespace) describes it.
struct ProcessIdentity {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;           // its process group
  char state = '?';         // field 3: R, S, D, Z (a zombie: ended, not yet reaped), ...
  uid_t uid = 0;            // effective uid (the "Uid:" line's second field)
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat, clock ticks since boot
};

// `pid`'s identity, or nullopt when it does not exist (or /proc cannot be read).
std::optional<ProcessIdentity> ReadProcess(pid_t pid);

// Who holds a new lease.
struct LeaseHolderSpec {
  v1::LeaseHolder kind = v1::LEASE_HOLDER_TTL;  // PROCESS, PARENT, PROCESS_GROUP or TTL (never UNSPECIFIED)
  // PROCESS and PARENT: the holding process, as ReadProcess saw it when the pick was asked;
  // PROCESS_GROUP: the group's leader (the lease lasts while any process of its group lives).
  ProcessIdentity process;
  // TTL: how long the lease lives without a LeaseKeepAlive.
  absl::Duration ttl = absl::Milliseconds(placement::kDefaultLeaseTtlMs);
  // The picking caller's uid, when known (unix socket).
  std::optional<uid_t> caller_uid;
};

class LeaseTable {
 public:
  // `on_release` is called (outside the table's lock, on the table's own thread or the caller's)
  // after leases ended, so that waiting picks can try again.
  explicit LeaseTable(std::function<void()> on_release = nullptr);
  // Stops the watcher thread.
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // placement::Pick against `inventory` with every unit now leased set aside; when it succeeds,
  // the picked units are leased to `holder` before any other pick runs, and the response's lease
  // is filled (id, holder, pid, uid, devices, times). RESOURCE_EXHAUSTED past kMaxLeases;
  // FAILED_PRECONDITION when the holding process is gone or is not the one `holder` names any more.
  placement::PickOutcome PickAndHold(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                                     const LeaseHolderSpec& holder);
  // Ends the lease now: its description, or NOT_FOUND.
  absl::StatusOr<v1::LeaseInfo> Release(const std::string& lease_id);
  // A TTL lease lives `ttl` from now: its description; NOT_FOUND for an unknown or ended lease,
  // FAILED_PRECONDITION for a process lease.
  absl::StatusOr<v1::LeaseInfo> KeepAlive(const std::string& lease_id, absl::Duration ttl);
  // Every lease now, oldest first.
  std::vector<v1::LeaseInfo> List();
  size_t size() const;
  // Ends the leases whose process exited (or is another process now) or whose TTL passed; returns
  // how many. The watcher thread calls it on every pidfd event and at least once a second.
  int Sweep();
  // Total leases granted and ended so far (for metrics).
  uint64_t granted() const;

 private:
  struct Lease {
    v1::LeaseInfo info;  // full: id, pid, uid
    LeaseHolderSpec holder;
    absl::Time expires = absl::InfiniteFuture();
    int pidfd = -1;
    uint64_t order = 0;
  };
  void Watch();
  int SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(Lease& lease);

  const std::function<void()> on_release_;
  mutable absl::Mutex mu_;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int wake_fd_ = -1;  // an eventfd: the watcher re-reads the pidfds
  std::thread watcher_;
};

// The leases as a caller who may not see them gets them: lease_id empty, pid 0.
void RedactLease(v1::LeaseInfo& lease);
// Removes what only privileged callers see from an inventory: every DeviceUsageProcess's pid and
// uid (devices and MIG instances) and the leases' ids and pids.
void RedactInventory(v1::Inventory& inventory);
// Whether `inventory` holds anything RedactInventory would remove.
bool HasPrivateUsage(const v1::Inventory& inventory);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LEASES_H_
