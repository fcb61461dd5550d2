// Lease holders (lease_holder.h) with real child processes: ReadProcess of a child, a zombie and a
// reaped pid; a process holder that ends (its pidfd says so before it is reaped); a pid whose start
// time is not the holder's (a reused pid); a process group that outlives its leader; what a call's
// check (pidfds only) sees and leaves to the full one; and what a lease read back from the file
// keeps or why it is dropped.
#include "server/service/lease_holder.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/time_util.h"
#include "tests/common/pid_reuse.h"
#include "tests/service/lease_testing.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using service::LeaseHolder;
using service::LeaseHolderSpec;
using service::ProcessIdentity;
using service::ReadProcess;

bool HasPidfd() {
#ifdef SYS_pidfd_open
  const long fd = syscall(SYS_pidfd_open, getpid(), 0);
  if (fd < 0) return false;
  close(static_cast<int>(fd));
  return true;
#else
  return false;
#endif
}

// A lease as the file holds it: `kind`, `pid`, created now.
v1::LeaseInfo Info(v1::LeaseHolder kind, pid_t pid) {
  v1::LeaseInfo info;
  info.set_lease_id("0123456789abcdef0123456789abcdef");
  info.set_holder(kind);
  info.set_pid(static_cast<uint32_t>(pid));
  info.add_devices()->set_pci_bus_id("0000:01:00.0");
  return info;
}

TEST(LeaseHolderProcess, ReadProcessDescribesAChildAZombieAndNothingOnceReaped) {
  EXPECT_FALSE(ReadProcess(0).has_value());
  EXPECT_FALSE(ReadProcess(-1).has_value());
  Sleeper child;
  const std::optional<ProcessIdentity> seen = ReadProcess(child.pid());
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->pid, child.pid());
  EXPECT_EQ(seen->ppid, getpid());
  EXPECT_EQ(seen->pgid, getpgrp());
  EXPECT_EQ(seen->uid, geteuid());
  EXPECT_GT(seen->start_time, 0u);
  EXPECT_GE(seen->start_time, ReadProcess(getpid())->start_time);
  EXPECT_EQ(ReadProcess(child.pid())->start_time, seen->start_time);
  child.KillWithoutReaping();
  EXPECT_TRUE(Eventually([&] {
    const std::optional<ProcessIdentity> zombie = ReadProcess(child.pid());
    return zombie.has_value() && zombie->state == 'Z';
  }));
  const pid_t pid = child.pid();
  child.Kill();
  EXPECT_FALSE(ReadProcess(pid).has_value());
}

TEST(LeaseHolderProcess, AProcessHolderEndsWithItsProcessItsPidfdBeforeItIsReaped) {
  Sleeper child;
  const LeaseHolderSpec spec = ProcessHolder(child.pid(), getuid());
  absl::StatusOr<LeaseHolder> holder = LeaseHolder::ForNewLease(spec);
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_TRUE(holder->is_process());
  EXPECT_EQ(holder->expires(), absl::InfiniteFuture());
  EXPECT_EQ(holder->process().pid, child.pid());
  EXPECT_FALSE(holder->Ended(absl::Now()));
  EXPECT_EQ(holder->Description(), "a process's lease");
  if (HasPidfd()) {
    EXPECT_GE(holder->pidfd(), 0);
    // A zombie still has its /proc entry and start time: only the pidfd tells that it ended.
    child.KillWithoutReaping();
    EXPECT_TRUE(Eventually([&] { return holder->Ended(absl::Now()); }));
  }
  child.Kill();
  EXPECT_TRUE(holder->Ended(absl::Now()));
  // A holder that has already ended is refused for a new lease.
  const absl::StatusOr<LeaseHolder> refused = LeaseHolder::ForNewLease(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("the process that would hold the lease (pid ", spec.process.pid, ") has exited"));
}

// A pid that runs with another start time is another process (the holder's pid was reused).
TEST(LeaseHolderProcess, APidWithAnotherStartTimeIsNotTheHolder) {
  Sleeper child;
  LeaseHolderSpec reused = ProcessHolder(child.pid(), getuid());
  reused.process.start_time += 1;
  const absl::StatusOr<LeaseHolder> refused = LeaseHolder::ForNewLease(reused);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("has exited"));
  // A holder created while it was the holder ends once the start time differs.
  absl::StatusOr<LeaseHolder> holder = LeaseHolder::ForRestoredLease(
      Info(v1::LEASE_HOLDER_PARENT, child.pid()), reused.process.start_time - 1, geteuid(), absl::Now());
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(holder->Description(), "a shell's lease");
  // Restored: another start time is another process.
  const uint64_t start = reused.process.start_time - 1;
  const absl::StatusOr<LeaseHolder> other_start =
      LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS, child.pid()), start + 1, geteuid(), absl::Now());
  EXPECT_EQ(other_start.status().message(),
            absl::StrCat("pid ", child.pid(), " is another process now (started at tick ", start, ", the holder at ",
                         start + 1, ")"));
}

// The gosu / su-exec / `setpriv --reuid` entrypoint, or Python's os.setuid after pick(): the holder
// changed its uid by exec after the lease was granted. The kernel keeps its pid and start time, so a
// restart keeps the lease.
TEST(LeaseHolderRestored, AHolderThatChangedItsUidIsStillTheHolder) {
  Sleeper child;
  const uint64_t start = ReadProcess(child.pid())->start_time;
  for (const v1::LeaseHolder kind : {v1::LEASE_HOLDER_PROCESS, v1::LEASE_HOLDER_PARENT, v1::LEASE_HOLDER_PROCESS_GROUP}) {
    absl::StatusOr<LeaseHolder> kept =
        LeaseHolder::ForRestoredLease(Info(kind, child.pid()), start, geteuid() + 12345, absl::Now());
    ASSERT_TRUE(kept.ok()) << v1::LeaseHolder_Name(kind) << ": " << kept.status();
    EXPECT_FALSE(kept->Ended(absl::Now()));
  }
}

TEST(LeaseHolderRestored, AnExitedHolderOrAPassedTimeIsDroppedWithItsReason) {
  Sleeper child;
  const pid_t pid = child.pid();
  const uint64_t start = ReadProcess(pid)->start_time;
  child.Kill();
  const absl::StatusOr<LeaseHolder> exited =
      LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS, pid), start, geteuid(), absl::Now());
  EXPECT_EQ(exited.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exited.status().message(), absl::StrCat("its holder, pid ", pid, ", has exited"));

  const absl::Time now = absl::FromUnixSeconds(1700000000);
  v1::LeaseInfo ttl = Info(v1::LEASE_HOLDER_TTL, 0);
  *ttl.mutable_expires_at() = google::protobuf::util::TimeUtil::SecondsToTimestamp(1700000000);
  EXPECT_EQ(LeaseHolder::ForRestoredLease(ttl, 0, 0, now).status().message(),
            "its time to live passed at 2023-11-14T22:13:20Z");
  ttl.mutable_expires_at()->set_seconds(1700000060);
  absl::StatusOr<LeaseHolder> kept = LeaseHolder::ForRestoredLease(ttl, 0, 0, now);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->is_process());
  EXPECT_EQ(kept->pidfd(), -1);
  EXPECT_EQ(kept->expires(), absl::FromUnixSeconds(1700000060));
  EXPECT_EQ(kept->Description(), "a lease until 2023-11-14 22:14:20Z");
  EXPECT_FALSE(kept->Ended(now + absl::Seconds(59)));
  EXPECT_TRUE(kept->Ended(now + absl::Seconds(60)));
  kept->ExpireAt(now + absl::Hours(1));  // LeaseKeepAlive
  EXPECT_FALSE(kept->Ended(now + absl::Seconds(60)));

  ttl.clear_expires_at();
  EXPECT_EQ(LeaseHolder::ForRestoredLease(ttl, 0, 0, now).status().message(), "malformed (holder LEASE_HOLDER_TTL)");
  EXPECT_EQ(LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_UNSPECIFIED, 0), 0, 0, now).status().message(),
            "malformed (holder LEASE_HOLDER_UNSPECIFIED)");
}

// What the table does for a group holder: one pass over /proc when its watched process ended.
void FindGroupFor(LeaseHolder& holder) {
  const std::optional<pid_t> pgid = holder.GroupToFind();
  ASSERT_TRUE(pgid.has_value());
  const std::map<pid_t, ProcessIdentity> found = service::FindGroupMembers({*pgid});
  auto it = found.find(*pgid);
  holder.TakeGroupMember(it == found.end() ? std::nullopt : std::optional<ProcessIdentity>(it->second));
}

TEST(LeaseHolderGroup, FindGroupMembersNamesTheOldestRunningProcessOfEachGroup) {
  Sleeper leader(0);
  const pid_t pgid = leader.pid();
  Sleeper older(pgid);
  Sleeper younger(pgid);
  Sleeper elsewhere;  // the test's own group
  std::map<pid_t, ProcessIdentity> found = service::FindGroupMembers({pgid, getpgrp()});
  ASSERT_EQ(found.count(pgid), 1u);
  EXPECT_EQ(found[pgid].pid, pgid);  // the leader started first
  EXPECT_EQ(found[pgid].pgid, pgid);
  EXPECT_EQ(found.count(getpgrp()), 1u);
  leader.Kill();
  found = service::FindGroupMembers({pgid});
  ASSERT_EQ(found.count(pgid), 1u);
  const ProcessIdentity oldest = found[pgid];
  EXPECT_NE(oldest.pid, pgid);
  EXPECT_LE(oldest.start_time, ReadProcess(older.pid())->start_time);
  EXPECT_LE(oldest.start_time, ReadProcess(younger.pid())->start_time);
  older.KillWithoutReaping();  // a zombie is no member
  younger.KillWithoutReaping();
  EXPECT_TRUE(Eventually([&] { return service::FindGroupMembers({pgid}).empty(); }));
  EXPECT_TRUE(service::FindGroupMembers({}).empty());
}

// devplace run's holder: a process group lives while any process of it runs, its leader or not,
// also when the daemon restarts after the leader ended; the group is looked for in /proc only when
// the process watched for it ends.
TEST(LeaseHolderGroup, AProcessGroupOutlivesItsLeaderUntilItsLastProcess) {
  Sleeper leader(0);
  Sleeper member(leader.pid());
  Sleeper second(leader.pid());
  ASSERT_EQ(ReadProcess(member.pid())->pgid, leader.pid());
  LeaseHolderSpec spec = ProcessHolder(leader.pid(), getuid());
  spec.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  absl::StatusOr<LeaseHolder> holder = LeaseHolder::ForNewLease(spec);
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(holder->Description(), "a process group's lease (devplace run, or a job's pick)");
  EXPECT_FALSE(holder->GroupToFind().has_value());
  const uint64_t leader_start = spec.process.start_time;
  leader.Kill();
  EXPECT_FALSE(holder->Ended(absl::Now()));
  EXPECT_EQ(holder->GroupToFind(), spec.process.pid);  // kept until the group is looked for
  EXPECT_EQ(holder->pidfd(), -1);                  // the leader's pidfd, readable from now on, is closed
  FindGroupFor(*holder);
  EXPECT_FALSE(holder->GroupToFind().has_value());  // a member is watched
  if (HasPidfd()) {
    EXPECT_GE(holder->pidfd(), 0);
  }
  EXPECT_FALSE(holder->Ended(absl::Now()));
  // Read back after a restart: the leader is gone, its group is not.
  absl::StatusOr<LeaseHolder> restored = LeaseHolder::ForRestoredLease(
      Info(v1::LEASE_HOLDER_PROCESS_GROUP, spec.process.pid), leader_start, geteuid(), absl::Now());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->GroupToFind(), spec.process.pid);
  EXPECT_EQ(restored->process().pgid, spec.process.pid);
  FindGroupFor(*restored);
  EXPECT_FALSE(restored->Ended(absl::Now()));
  // The watched member ends: another is found; the last one ends: the group has ended.
  member.KillWithoutReaping();  // a zombie runs on no device
  second.KillWithoutReaping();
  EXPECT_TRUE(Eventually([&] {
    if (holder->GroupToFind()) FindGroupFor(*holder);
    return holder->Ended(absl::Now());
  }));
  EXPECT_TRUE(Eventually([&] {
    if (restored->GroupToFind()) FindGroupFor(*restored);
    return restored->Ended(absl::Now());
  }));
  member.Kill();
  second.Kill();
  EXPECT_EQ(LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS, spec.process.pid), leader_start, geteuid(),
                                          absl::Now())
                .status()
                .message(),
            absl::StrCat("its holder, pid ", spec.process.pid, ", has exited"));
}

// The calls' sweeps (an inventory, a pick, a renewal) check with kPidfd: a holder's exit shows at
// once through its pidfd and no /proc file is read; what only /proc shows (a witness that left its
// group) waits for the watcher's kFull check, within a second, the lease held meanwhile.
TEST(LeaseHolderGroup, ACallsCheckSeesAnExitByItsPidfdAndLeavesAWitnessThatLeftItsGroupToTheFullCheck) {
  if (!HasPidfd()) GTEST_SKIP() << "no pidfd_open here: every check reads /proc";
  Sleeper leader(0);
  Sleeper member(leader.pid());
  LeaseHolderSpec spec = ProcessHolder(leader.pid(), getuid());
  spec.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  absl::StatusOr<LeaseHolder> group = LeaseHolder::ForNewLease(spec);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_FALSE(group->Ended(absl::Now(), LeaseHolder::Check::kPidfd));
  leader.Kill();
  EXPECT_FALSE(group->Ended(absl::Now(), LeaseHolder::Check::kPidfd));
  EXPECT_EQ(group->GroupToFind(), spec.process.pid);  // the leader's pidfd told: the group is looked for
  FindGroupFor(*group);
  ASSERT_GE(group->pidfd(), 0);  // the member is the witness
  // The witness leaves the group, still running: its pidfd stays quiet, and only /proc says so.
  ASSERT_EQ(setpgid(member.pid(), member.pid()), 0) << strerror(errno);
  EXPECT_FALSE(group->Ended(absl::Now(), LeaseHolder::Check::kPidfd));
  EXPECT_FALSE(group->GroupToFind().has_value());  // not seen: the lease is kept
  EXPECT_FALSE(group->Ended(absl::Now(), LeaseHolder::Check::kFull));
  EXPECT_EQ(group->GroupToFind(), spec.process.pid);  // seen: another member is looked for
  FindGroupFor(*group);                                // none is left
  EXPECT_TRUE(group->Ended(absl::Now(), LeaseHolder::Check::kPidfd));
  // A process holder: its exit, zombie included, by the poll alone.
  Sleeper job;
  absl::StatusOr<LeaseHolder> process = LeaseHolder::ForNewLease(ProcessHolder(job.pid(), getuid()));
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_FALSE(process->Ended(absl::Now(), LeaseHolder::Check::kPidfd));
  job.KillWithoutReaping();
  EXPECT_TRUE(Eventually([&] { return process->Ended(absl::Now(), LeaseHolder::Check::kPidfd); }));
}

// A dead group's leader pid that the kernel gives to a stranger (here on purpose: clone3 with
// set_tid, as root), who leads a group of its own with that id: the lease's group has ended, at run
// time and when read back after a restart; the stranger's group does not hold it.
TEST(LeaseHolderGroup, ALeaderPidReusedByAStrangerEndsTheGroup) {
  auto leader = std::make_unique<Sleeper>(0);
  auto member = std::make_unique<Sleeper>(leader->pid());
  const pid_t pgid = leader->pid();
  LeaseHolderSpec spec = ProcessHolder(pgid, getuid());
  spec.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  absl::StatusOr<LeaseHolder> holder = LeaseHolder::ForNewLease(spec);
  ASSERT_TRUE(holder.ok()) << holder.status();
  leader->Kill();
  EXPECT_FALSE(holder->Ended(absl::Now()));
  FindGroupFor(*holder);
  EXPECT_FALSE(holder->Ended(absl::Now()));
  member->Kill();  // the group's last process: its id is free for reuse
  const pid_t stranger = SpawnGroupLeaderAtPid(pgid);
  if (stranger < 0) GTEST_SKIP() << "cannot start a process at a chosen pid here (" << strerror(errno) << "; needs root)";
  Sleeper stranger_member(stranger);
  const uint64_t stranger_start = ReadProcess(stranger)->start_time;
  ASSERT_EQ(service::FindGroupMembers({pgid}).count(pgid), 1u);  // a group of that id runs again
  EXPECT_TRUE(Eventually([&] {
    if (holder->GroupToFind()) FindGroupFor(*holder);
    return holder->Ended(absl::Now());
  }));
  const absl::StatusOr<LeaseHolder> restored = LeaseHolder::ForRestoredLease(
      Info(v1::LEASE_HOLDER_PROCESS_GROUP, pgid), spec.process.start_time, geteuid(), absl::Now());
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(restored.status().message(),
            absl::StrCat("pid ", pgid, " is another process now (started at tick ", stranger_start, ", the holder at ",
                         spec.process.start_time, ")"));
  kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
}

}  // namespace
}  // namespace devplace::testing
