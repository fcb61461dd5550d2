// The lease table of PickDevices (shared hosts; rule P-PICK, docs/SEMANTICS.md section 14): which
// devices each lease holds and for whom, so that concurrent picks never hand out the same device,
// and its caps (kMaxLeases leases; LeaseTableOptions::max_devices_per_user devices per user).
// The pick itself is placement::Pick (pure); the table runs it under its own lock with the units
// already leased and adds the new lease before the lock is released. No gRPC here.
//
// A lease is held for a process or for a time to live (lease_holder.h: who holds it and how its
// end is seen); a LeaseWatcher thread (lease_watcher.h) sweeps the table when a holder's pidfd
// becomes readable, when a TTL passes, and at least once a second.
//
// Durable (Restore): the table is kept in a file (lease_file.h) rewritten atomically after every
// change, before the change is answered, and read back when the daemon starts, so that a restart,
// a crash or a package upgrade loses no live lease. A pick whose lease cannot be written is
// refused (PickAndHold); a release, an end or a KeepAlive that cannot be written stands in memory
// (on_write_error; the file keeps the older table: after a restart an ended lease is checked again
// and dropped, a kept-alive TTL lease ends at its older expiry).
//
// Owners: a lease picked by a known user (LeaseInfo.uid) is released and kept alive only by that
// user or root; a lease without a uid (picked over TCP) by whoever holds its id.
//
// Locks: write_mu_ (the file; taken first), mu_ (the leases); on_write_error runs under write_mu_.
#ifndef DEVPLACE_SERVER_SERVICE_LEASE_TABLE_H_
#define DEVPLACE_SERVER_SERVICE_LEASE_TABLE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/pick.h"
#include "server/service/lease_file.h"
#include "server/service/lease_holder.h"
#include "server/service/lease_watcher.h"

namespace devplace::service {

// The most leases held at once; a pick past it is RESOURCE_EXHAUSTED.
inline constexpr size_t kMaxLeases = 1024;

// Who asks to release or keep alive a lease: the caller's uid when known (unix socket).
struct LeaseCaller {
  std::optional<uid_t> uid;
};

struct LeaseTableOptions {
  // Called (outside the table's lock, on the table's own thread or the caller's) after leases
  // ended, so that waiting picks can try again, and once Restore has read the table back.
  std::function<void()> on_release;
  // Most devices one user (LeaseInfo.uid, never root) holds leased at once, all its leases
  // together: 0 = no cap. A pick past it is RESOURCE_EXHAUSTED, however many devices are free.
  int max_devices_per_user = 0;
  // Called when the table could not be written to its file (Restore's path): the change stands
  // in memory; the file keeps the previous table until a later write succeeds.
  std::function<void(const absl::Status&)> on_write_error;
  // Called (outside the table's lock, before on_release) for each lease that ended by itself:
  // `expired` when its time to live passed, else its holder exited.
  std::function<void(const v1::LeaseInfo& lease, bool expired)> on_end;
};

// The payload (absl::Status::GetPayload) on PickAndHold's RESOURCE_EXHAUSTED when the caller's
// max_devices_per_user is the reason (metrics tell it from the table's kMaxLeases).
inline constexpr char kOverUserCapPayload[] = "devplace.dev/over_user_device_cap";

// The payload on PickAndHold's FAILED_PRECONDITION when the new lease could not be written to the
// lease file (metrics count it apart: outcome "lease_not_durable").
inline constexpr char kLeaseNotDurablePayload[] = "devplace.dev/lease_not_durable";

class LeaseTable {
 public:
  // `on_release` is called (outside the table's lock, on the table's own thread or the caller's)
  // after leases ended, so that waiting picks can try again.
  explicit LeaseTable(std::function<void()> on_release = nullptr);
  explicit LeaseTable(LeaseTableOptions options);
  // Stops the watcher thread.
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // placement::Pick against `inventory` with every unit now leased set aside; when it succeeds,
  // the picked units are leased to `holder` before any other pick runs, and the response's lease
  // is filled (id, holder, pid, uid, devices, times) and written to the file (Restore) before
  // this returns. RESOURCE_EXHAUSTED past kMaxLeases or past the caller's
  // max_devices_per_user; FAILED_PRECONDITION when the holding process is gone or is not the one
  // `holder` names any more, and when the new lease could not be written to the file (a full
  // filesystem, leases.state not a file, its directory not the daemon's own: NotDurable's message
  // names the file, the error and the operator's fix; kLeaseNotDurablePayload): the lease is
  // then ended at once, as though never granted, so that no OK answer is forgotten by a restart.
  // With `only_if_ended` (a waiting pick, tried in arrival order): ABORTED without picking when
  // leases ended since ended() returned that value, so that a device released while later waiters
  // are tried goes to the earliest waiter (the caller starts again from it). `held_back`: units no
  // lease holds that older waiting picks keep free (placement::LeasedUnit::held_back), set aside as
  // leased ones are. A pick too few devices are free for is RESOURCE_EXHAUSTED all the same when
  // its count is past the caller's max_devices_per_user, so that it never waits for what the cap
  // would refuse.
  placement::PickOutcome PickAndHold(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                                     const LeaseHolderSpec& holder,
                                     std::optional<uint64_t> only_if_ended = std::nullopt,
                                     const std::vector<placement::LeasedUnit>& held_back = {});
  // How many leases ended so far (released, or their process or TTL ended).
  uint64_t ended() const;
  // Ends the lease now: its description, or NOT_FOUND; PERMISSION_DENIED when the lease has an
  // owner (LeaseInfo.uid) and `caller` is neither that user nor root.
  absl::StatusOr<v1::LeaseInfo> Release(const std::string& lease_id, const LeaseCaller& caller = {});
  // A TTL lease lives `ttl` from now: its description; NOT_FOUND for an unknown or ended lease,
  // PERMISSION_DENIED as Release, FAILED_PRECONDITION for a process lease.
  absl::StatusOr<v1::LeaseInfo> KeepAlive(const std::string& lease_id, absl::Duration ttl,
                                          const LeaseCaller& caller = {});
  // Reads the table back from `path` (call once, before the first pick) and keeps it there from
  // now on. Each lease is checked again: a process lease only while its pid runs with the start
  // time it had (whatever its uid now), a group lease whose leader ended only while a process of
  // its group runs (one pass over /proc for them all), a TTL lease only until its expires_at
  // (LeaseHolder::ForRestoredLease), and no process lease from a file written in another boot of
  // the host (LeaseState.boot_id); the others
  // are dropped, as are leases without an id or a device, repeated, or past kMaxLeases
  // (RestoreReport says which and why). A file that is missing starts an empty table; one that
  // cannot be used (ReadLeaseFile: a symbolic link, not a regular file, not owned by this
  // process's uid, writable by group or others, larger than kMaxLeaseFileBytes, not a LeaseState,
  // a newer version) is a warning and an empty table, never an error. The file is then rewritten
  // (mode 0600) with what was kept.
  RestoreReport Restore(const std::string& path);
  // The picks waiting now (WaitingPicks::Waiters), kept in the file beside the leases so that a
  // restart gives them their places back; written at once (best effort: a write error is
  // on_write_error's, the file keeps the older list). Restore keeps the file's list (the report's
  // waiters; none from another boot of the host) until the first call.
  void SetWaiters(std::vector<state::Waiter> waiters) ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // Ends the table's writes, for a clean stop: waits for a write in flight (its rename included),
  // and no later change is written (it stands in memory; the next daemon checks every lease
  // again). So a daemon that exits right after leaves no temporary file beside the lease file.
  void CloseFile() ABSL_LOCKS_EXCLUDED(write_mu_);
  // Devices leased now to `uid` (all its leases).
  size_t DevicesOf(uid_t uid) const;
  // Every lease now, oldest first.
  std::vector<v1::LeaseInfo> List();
  size_t size() const;
  // Ends the leases whose process exited (or is another process now) or whose TTL passed, and the
  // group leases whose group has no process left; returns how many. The watcher thread calls it on
  // every pidfd event, when a group is to be found, and at least once a second. Its cost does not
  // grow with the processes the host runs, except for one pass over /proc, outside the lock, when
  // a group lease's watched process ends (LeaseHolder::GroupToFind). Unlike the calls' own sweeps,
  // it reads /proc/<pid>/stat for every process holder (LeaseHolder::Check::kFull).
  int Sweep();
  // Total leases granted and ended so far (for metrics).
  uint64_t granted() const;

 private:
  struct Lease {
    v1::LeaseInfo info;  // full: id, pid, uid
    LeaseHolder holder;
    uint64_t order = 0;
  };
  // What the watcher waits for: the holders' pidfds and the earliest TTL expiry.
  LeaseWatcher::Waits WatcherWaits() const ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the leases whose holder Ended; with `wake_for_groups`, wakes the watcher when a group is
  // to be found (the watcher's own sweep looks for it at once instead). The calls' sweeps (a pick,
  // an inventory, a renewal) check with LeaseHolder::Check::kPidfd, a poll per lease; the watcher's
  // (Sweep) with kFull, which also reads each group's /proc/<pid>/stat files.
  int SweepLocked(absl::Time now, bool wake_for_groups = true,
                  LeaseHolder::Check check = LeaseHolder::Check::kPidfd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After `ended` leases ended: on_end for each SweepLocked ended since the last call, then
  // on_release when `ended` > 0.
  void AfterEnding(int ended) ABSL_LOCKS_EXCLUDED(mu_);
  // For every lease whose process group is to be found (LeaseHolder::GroupToFind): one pass over
  // /proc (FindGroupMembers) outside mu_, then each holder is given what it found. Returns how many
  // leases were looked for.
  int FindGroups() ABSL_LOCKS_EXCLUDED(mu_);
  // OK, or RESOURCE_EXHAUSTED (with kOverUserCapPayload) when `caller_uid` would hold more than
  // max_devices_per_user devices with `wanted` more.
  absl::Status CheckUserCap(std::optional<uid_t> caller_uid, size_t wanted) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PERMISSION_DENIED unless `caller` may release or keep alive `lease`.
  static absl::Status CheckOwner(const v1::LeaseInfo& lease, const LeaseCaller& caller);
  // Writes the table as it is now to file_ (when set). Every writer takes write_mu_ first and
  // reads the table after it, so the last write holds the newest table. OK when there is no file
  // or the table as it is now is on disk (written here or by a later writer); else the writer's
  // error (after on_write_error, which reports it: callers other than PickAndHold, whose change
  // stands in memory either way, ignore it).
  absl::Status Persist() ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // Ends a lease PickAndHold just added whose write failed, as though it had never been granted.
  void Unlease(const std::string& lease_id) ABSL_LOCKS_EXCLUDED(mu_, write_mu_);
  // PickAndHold's FAILED_PRECONDITION (with kLeaseNotDurablePayload) for a lease that `error`
  // kept off the file: the file, the error and the operator's fix.
  absl::Status NotDurable(const absl::Status& error) ABSL_LOCKS_EXCLUDED(write_mu_);

  const LeaseTableOptions options_;
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<LeaseFileWriter> file_ ABSL_GUARDED_BY(write_mu_);  // none: memory only
  mutable absl::Mutex mu_;
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<state::Waiter> waiters_ ABSL_GUARDED_BY(mu_);  // SetWaiters
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ended_ ABSL_GUARDED_BY(mu_) = 0;
  // The leases SweepLocked ended that on_end has not been told of, and whether each expired.
  std::vector<std::pair<v1::LeaseInfo, bool>> just_ended_ ABSL_GUARDED_BY(mu_);
  // Bumped on every change; Persist skips a write when the file already holds this generation.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_generation_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Last: its thread calls WatcherWaits() and Sweep(), so it starts after the members above and is
  // stopped (destroyed) before them.
  LeaseWatcher watcher_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LEASE_TABLE_H_
