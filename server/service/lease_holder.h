// Who holds a lease of PickDevices (shared hosts; rule P-PICK, docs/SEMANTICS.md section 14) and
// how devplaced knows that the holder ended. No gRPC, no lock: a LeaseHolder belongs to one lease
// of the LeaseTable (lease_table.h), which calls it under its own lock.
//
// A lease is held for a process (PROCESS: the picking process; PARENT: its parent, the shell that
// ran `devplace pick`; PROCESS_GROUP: a group's leader, for `devplace run`) or for a time to live
// (TTL). A process is named by its pid and its start time (field 22 of /proc/<pid>/stat): what the
// kernel keeps for the process's whole life, so that a reused pid is never taken for the holder and
// a holder that changes its uid by exec (gosu, su-exec, `setpriv --reuid`, os.setuid) stays the
// holder. Its end shows as:
//   - its pidfd (pidfd_open(2), Linux 5.3) becoming readable, at once;
//   - where pidfd_open is missing or fails, its /proc start time no longer matching, the pid gone
//     or a zombie, which the table's watcher (lease_watcher.h) checks at least once a second;
//   - a process group lives while any process of the group that is not a zombie runs (Linux gives
//     no new process the id of a group that still has members), so its leader's end is not the
//     group's. Once the leader ended, one running member of the group (a witness: the oldest one)
//     is watched instead, by its pidfd and start time like a holder; when the witness ends or
//     leaves the group, the table looks for another in one pass over /proc outside its lock
//     (FindGroupMembers; the lease is kept meanwhile) and the group has ended when none is left.
//     So a sweep reads a few /proc files per lease, however many processes the host runs. A leader
//     pid that runs as another process means the group ended (the kernel reused the id only once
//     no process of the group was left), also when that happened while the daemon was down.
// A TTL holder ends when its expiry passes (LeaseKeepAlive moves it: ExpireAt).
#ifndef DEVPLACE_SERVER_SERVICE_LEASE_HOLDER_H_
#define DEVPLACE_SERVER_SERVICE_LEASE_HOLDER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/pick.h"

namespace devplace::service {

// A process as /proc (this process's pid namespace) describes it.
struct ProcessIdentity {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;           // its process group
  char state = '?';         // field 3: R, S, D, Z (a zombie: ended, not yet reaped), ...
  uid_t uid = 0;            // effective uid (the "Uid:" line's second field); 0 from FindGroupMembers
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat, clock ticks since boot
};

// `pid`'s identity, or nullopt when it does not exist, `pid` is not positive, or /proc cannot be
// read (read through ReadHostFile, at most 64 KiB of /proc/<pid>/stat and /proc/<pid>/status).
std::optional<ProcessIdentity> ReadProcess(pid_t pid);

// The oldest running process (not a zombie; smallest start time) of each process group in `pgids`,
// from one pass over /proc reading /proc/<pid>/stat only (uid left 0); a group with no such process
// is absent. Cost: one small read per process of the host, so the LeaseTable calls it outside its
// lock, only for groups whose witness ended (LeaseHolder::GroupToFind).
std::map<pid_t, ProcessIdentity> FindGroupMembers(const std::set<pid_t>& pgids);

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

// One lease's holder and the means to see it end: for a process holder its identity and pidfd
// (owned: closed when the holder goes away), for a TTL holder its expiry. Move-only.
class LeaseHolder {
 public:
  // The holder of a lease about to be picked. A process holder's pidfd is opened first, then its
  // /proc start time compared with spec.process's, so that a pid reused in between is caught:
  // FAILED_PRECONDITION "the process that would hold the lease (pid N) has exited" when it no
  // longer runs or is another process. A TTL holder has no expiry until ExpireAt.
  static absl::StatusOr<LeaseHolder> ForNewLease(const LeaseHolderSpec& spec);
  // The holder of a lease read back from the lease file (lease_file.h) at `now`: `start_time` and
  // `process_uid` are what the file recorded of a process holder when the lease was granted. The
  // lease is kept only while its pid runs with that start time, whatever its uid now (a holder may
  // have changed uid by exec; the lease's owner stays LeaseInfo.uid, the user that picked); a
  // PROCESS_GROUP lease whose leader pid no longer runs is kept with its group to be looked for
  // (GroupToFind: the table drops it when FindGroupMembers finds no process of it); a TTL lease
  // only until its expires_at. Otherwise FAILED_PRECONDITION whose message says why, for
  // RestoreReport.dropped: "its holder, pid N, has exited", "pid N is another process now
  // (started at tick T, the holder at S)" (for a group: its group has ended too), "its time to live
  // passed at <UTC time>", "malformed (holder <kind>)" (a TTL lease without expires_at, or a kind
  // the file cannot hold).
  static absl::StatusOr<LeaseHolder> ForRestoredLease(const v1::LeaseInfo& info, uint64_t start_time,
                                                      uint32_t process_uid, absl::Time now);
  LeaseHolder(LeaseHolder&& other) noexcept;
  LeaseHolder& operator=(LeaseHolder&& other) noexcept;
  LeaseHolder(const LeaseHolder&) = delete;
  LeaseHolder& operator=(const LeaseHolder&) = delete;
  ~LeaseHolder();

  v1::LeaseHolder kind() const { return spec_.kind; }
  // PROCESS, PARENT or PROCESS_GROUP: the lease carries the holder's pid and has no expiry.
  bool is_process() const;
  // The holding process (the group's leader); all zero for a TTL holder.
  const ProcessIdentity& process() const { return spec_.process; }
  // The pidfd to poll (readable when the process exits: the holder, or a group's witness once its
  // leader ended); -1 for a TTL holder, where pidfd_open is missing, and while a group's witness is
  // being looked for.
  int pidfd() const { return pidfd_; }
  // When a TTL lease ends (absl::InfiniteFuture() for a process holder).
  absl::Time expires() const { return expires_; }
  void ExpireAt(absl::Time expires) { expires_ = expires; }
  // How much Ended reads. kPidfd: a holder (or witness) with a pidfd is polled only, no /proc file
  // read (the calls' path: an inventory or a pick sweeps every lease, and a /proc/<pid>/stat read
  // costs about as much as the rest of a small call); /proc is read only for a holder without a
  // pidfd. kFull also reads /proc/<pid>/stat: a witness that left its group, and a group leader's
  // pid that runs as another process (the group has ended), which no pidfd shows. The table's
  // watcher sweeps with kFull at least once a second (lease_watcher.h), so those two ends are seen
  // within a second; until then the lease is only held longer, never given away early.
  enum class Check { kPidfd, kFull };
  // Whether the holder has ended at `now`: a TTL passed; a process exited (its pidfd readable), is
  // a zombie or is another process now; a process group whose leader pid runs as another process,
  // or in which TakeGroupMember found no running process. Reads at most two /proc/<pid>/stat (none
  // with kPidfd where pidfds are open), never all of /proc: when a group's leader or witness ends,
  // the group is to be looked for (GroupToFind) and Ended answers false until TakeGroupMember.
  bool Ended(absl::Time now, Check check = Check::kFull);
  // A PROCESS_GROUP holder whose leader ended and whose witness is to be found: its group id, for
  // FindGroupMembers; nullopt otherwise.
  std::optional<pid_t> GroupToFind() const;
  // What FindGroupMembers found of GroupToFind()'s group: a running member, watched from now on
  // (its pidfd, then its start time and group), or nullopt: no process of the group is left, and
  // Ended is true from now on. A member that ended or left the group meanwhile leaves the group to
  // be looked for again. Ignored when no group is to be found.
  void TakeGroupMember(const std::optional<ProcessIdentity>& member);
  // The holder as any caller may read it (no pid: pids are only for privileged callers), for a
  // refused pick's reasons: "a process's lease", "a shell's lease", "a process group's lease
  // (devplace run, or a job's pick)" (Python's devplace.pick(), libdevplace's Client::Pick), "a lease
  // until 2025-01-02 03:04:05Z".
  std::string Description() const;

 private:
  explicit LeaseHolder(LeaseHolderSpec spec) : spec_(std::move(spec)) {}
  void ClosePidfd();
  // A group's leader ended: its witness is to be found.
  void LeaderEnded();
  // Whether the group's leader pid runs as another process now (the group has ended).
  bool LeaderPidReused() const;

  LeaseHolderSpec spec_;
  int pidfd_ = -1;  // the holder's, or the group witness's
  absl::Time expires_ = absl::InfiniteFuture();
  // PROCESS_GROUP only, once its leader ended.
  bool leader_ended_ = false;
  bool group_to_find_ = false;  // no witness: FindGroupMembers is due
  bool group_ended_ = false;    // FindGroupMembers found no process of the group
  ProcessIdentity witness_;     // a running member of the group (when leader_ended_ && !group_to_find_)
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LEASE_HOLDER_H_
