// Lease holders (lease_holder.h) with real child processes: ReadProcess of a child, a zombie and a
// reaped pid; a process holder that ends (its pidfd says so before it is reaped); a pid whose start
// time is not the holder's (a reused pid); a process group that outlives its leader; and what a
// lease read back from the file keeps or why it is dropped.
#include "server/service/lease_holder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/time_util.h"
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
  // Restored: another start time, or another uid, is another process.
  const uint64_t start = reused.process.start_time - 1;
  const absl::StatusOr<LeaseHolder> other_start =
      LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS, child.pid()), start + 1, geteuid(), absl::Now());
  EXPECT_EQ(other_start.status().message(),
            absl::StrCat("pid ", child.pid(), " is another process now (started at tick ", start, ", the holder at ",
                         start + 1, ")"));
  const absl::StatusOr<LeaseHolder> other_uid =
      LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS, child.pid()), start, geteuid() + 1, absl::Now());
  EXPECT_THAT(other_uid.status().message(), HasSubstr("is another process now"));
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

// devplace run's holder: a process group lives while any process of it runs, its leader or not,
// also when the daemon restarts after the leader ended.
TEST(LeaseHolderGroup, AProcessGroupOutlivesItsLeaderUntilItsLastProcess) {
  Sleeper leader(0);
  Sleeper member(leader.pid());
  ASSERT_EQ(ReadProcess(member.pid())->pgid, leader.pid());
  LeaseHolderSpec spec = ProcessHolder(leader.pid(), getuid());
  spec.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  absl::StatusOr<LeaseHolder> holder = LeaseHolder::ForNewLease(spec);
  ASSERT_TRUE(holder.ok()) << holder.status();
  EXPECT_EQ(holder->Description(), "a process group's lease (devplace run)");
  const uint64_t leader_start = spec.process.start_time;
  leader.Kill();
  EXPECT_FALSE(holder->Ended(absl::Now()));
  EXPECT_EQ(holder->pidfd(), -1);  // the leader's pidfd, readable from now on, is closed
  EXPECT_FALSE(holder->Ended(absl::Now()));
  // Read back after a restart: the leader is gone, its group is not.
  absl::StatusOr<LeaseHolder> restored = LeaseHolder::ForRestoredLease(
      Info(v1::LEASE_HOLDER_PROCESS_GROUP, spec.process.pid), leader_start, geteuid(), absl::Now());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->pidfd(), -1);
  EXPECT_EQ(restored->process().pgid, spec.process.pid);
  member.KillWithoutReaping();  // a zombie runs on no device
  EXPECT_TRUE(Eventually([&] { return holder->Ended(absl::Now()); }));
  EXPECT_TRUE(restored->Ended(absl::Now()));
  member.Kill();
  EXPECT_EQ(LeaseHolder::ForRestoredLease(Info(v1::LEASE_HOLDER_PROCESS_GROUP, spec.process.pid), leader_start,
                                          geteuid(), absl::Now())
                .status()
                .message(),
            absl::StrCat("its holder, pid ", spec.process.pid, ", has exited"));
}

}  // namespace
}  // namespace devplace::testing
