// The lease table with real parts: real files (written and read back as devplaced does at start),
// real child processes as lease holders, the watcher's sweep of ended holders, and the owners' and
// the caps' refusals (kMaxLeases, the per-user device cap). The file's own checks (a corrupt,
// foreign, cut or oversized file) are in lease_file_test.cc, the holders' in lease_holder_test.cc.
#include "server/service/lease_table.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/lease_state.pb.h"
#include "tests/common/temp_dir.h"
#include "tests/placement/inventory_builder.h"
#include "tests/service/lease_testing.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using service::LeaseCaller;
using service::LeaseHolderSpec;
using service::LeaseTable;
using service::RestoreReport;

TEST(LeaseTableFile, LiveLeasesSurviveARestartAndTheRestAreDroppedWithTheirReason) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  Sleeper alive, dies;
  std::string kept_process, kept_ttl;
  {
    LeaseTable table;
    const RestoreReport first = table.Restore(file);
    EXPECT_FALSE(first.found);
    EXPECT_EQ(first.warning, "");
    kept_process = PickOne(table, ProcessHolder(alive.pid(), getuid()));
    PickOne(table, ProcessHolder(dies.pid(), getuid()));
    // Both GPUs are leased: a third pick finds none free.
    EXPECT_TRUE(table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5))).no_free_device);
    struct stat st {};
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_uid, geteuid());
  }  // the daemon is gone (as after kill -9: the file is all that is left)
  const pid_t dead = dies.pid();
  dies.Kill();
  LeaseTable restarted;
  const RestoreReport report = restarted.Restore(file);
  EXPECT_EQ(report.warning, "");
  EXPECT_TRUE(report.found);
  EXPECT_EQ(report.kept, 1u);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], HasSubstr(absl::StrCat("its holder, pid ", dead, ", has exited")));
  ASSERT_EQ(restarted.List().size(), 1u);
  EXPECT_EQ(restarted.List()[0].lease_id(), kept_process);
  EXPECT_EQ(restarted.List()[0].pid(), static_cast<uint32_t>(alive.pid()));
  // The kept lease still holds its GPU: of two, one is free, and then none.
  kept_ttl = PickOne(restarted, TtlHolder(absl::Minutes(5)));
  EXPECT_TRUE(restarted.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5))).no_free_device);
  // The kept process lease still ends with its process.
  alive.Kill();
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (restarted.size() > 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(restarted.size(), 1u);  // the TTL lease
}

// A pick whose lease cannot be written is refused and leases nothing (its devices stay free, the
// writer's error is reported); once the file can be written again picks are written as before.
TEST(LeaseTableFile, APickWhoseLeaseCannotBeWrittenIsRefusedAndItsDevicesStayFree) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  std::vector<std::string> errors;
  absl::Mutex mu;
  service::LeaseTableOptions options;
  options.on_write_error = [&](const absl::Status& error) {
    absl::MutexLock lock(&mu);
    errors.emplace_back(error.message());
  };
  LeaseTable table(options);
  table.Restore(file);
  PickOne(table, TtlHolder(absl::Minutes(5)));
  ASSERT_EQ(unlink(file.c_str()), 0);
  dir.Write("leases.state/in-the-way", "x");  // even root cannot rename a file over it
  const uint64_t ended = table.ended();
  const placement::PickOutcome refused = table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5)));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kFailedPrecondition) << refused.status;
  EXPECT_TRUE(refused.status.GetPayload(service::kLeaseNotDurablePayload).has_value());
  EXPECT_FALSE(refused.no_free_device);
  EXPECT_THAT(refused.status.message(), HasSubstr(absl::StrCat("devplaced cannot write its lease file ", file, " (")));
  EXPECT_THAT(refused.status.message(), HasSubstr("Is a directory"));
  EXPECT_FALSE(refused.response.has_lease());
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.granted(), 1u);
  EXPECT_GT(table.ended(), ended);  // waiting picks try again: its device is free
  {
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(errors.empty());
    EXPECT_THAT(errors[0], HasSubstr("Is a directory"));
  }
  std::filesystem::remove_all(file);
  PickOne(table, TtlHolder(absl::Minutes(5)));  // the device the refused pick did not get
  LeaseTable restarted;
  const RestoreReport report = restarted.Restore(file);
  EXPECT_EQ(report.kept, 2u);
  EXPECT_EQ(report.warning, "");
}

TEST(LeaseTableFile, ATtlLeaseIsKeptUntilItsTimeAndAReusedPidIsNotTheHolder) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  Sleeper holder;
  {
    LeaseTable table;
    table.Restore(file);
    PickOne(table, TtlHolder(absl::Minutes(5)));
    PickOne(table, TtlHolder(absl::Minutes(5)));
  }
  // One lease's time passes while the daemon is down: the file as the table wrote it, with that
  // lease's times moved six minutes into the past (no wait on the clock, however slow the machine).
  {
    service::state::LeaseState written;
    ASSERT_TRUE(written.ParseFromString(ReadFile(file)));
    ASSERT_EQ(written.leases_size(), 2);
    v1::LeaseInfo& past = *written.mutable_leases(1)->mutable_info();
    past.mutable_created_at()->set_seconds(past.created_at().seconds() - 360);
    past.mutable_expires_at()->set_seconds(past.expires_at().seconds() - 360);
    dir.Write("leases.state", written.SerializeAsString());
    chmod(file.c_str(), 0600);
  }
  {
    LeaseTable table;
    const RestoreReport report = table.Restore(file);
    EXPECT_EQ(report.kept, 1u);
    ASSERT_EQ(report.dropped.size(), 1u);
    EXPECT_THAT(report.dropped[0], HasSubstr("its time to live passed at "));
  }
  // A file naming a live pid with another start time (the pid was reused) keeps nothing.
  service::state::LeaseState state;
  state.set_version(1);
  service::state::HeldLease& held = *state.add_leases();
  held.mutable_info()->set_lease_id("0123456789abcdef0123456789abcdef");
  held.mutable_info()->set_holder(v1::LEASE_HOLDER_PROCESS);
  held.mutable_info()->set_pid(static_cast<uint32_t>(holder.pid()));
  held.mutable_info()->add_devices()->set_pci_bus_id("0000:01:00.0");
  held.set_start_time(service::ReadProcess(holder.pid())->start_time + 1);
  held.set_process_uid(geteuid());
  dir.Write("leases.state", state.SerializeAsString());
  chmod(file.c_str(), 0600);
  LeaseTable table;
  const RestoreReport report = table.Restore(file);
  EXPECT_EQ(report.kept, 0u);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], HasSubstr(absl::StrCat("pid ", holder.pid(), " is another process now")));
}

TEST(LeaseTableOwners, OnlyTheOwnerOrRootReleasesOrKeepsALeaseAlive) {
  LeaseTable table;
  const std::string owned = PickOne(table, TtlHolder(absl::Minutes(5), 1000));
  for (const LeaseCaller& other : {LeaseCaller{1001}, LeaseCaller{}}) {
    const absl::StatusOr<v1::LeaseInfo> denied = table.Release(owned, other);
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(denied.status().message(), HasSubstr("belongs to uid 1000; only that user or root may release it"));
    EXPECT_EQ(table.KeepAlive(owned, absl::Minutes(1), other).status().code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_TRUE(table.KeepAlive(owned, absl::Minutes(1), LeaseCaller{1000}).ok());
  EXPECT_TRUE(table.KeepAlive(owned, absl::Minutes(1), LeaseCaller{0}).ok());
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.Release(owned, LeaseCaller{0}).ok());  // root
  const std::string mine = PickOne(table, TtlHolder(absl::Minutes(5), 1000));
  EXPECT_TRUE(table.Release(mine, LeaseCaller{1000}).ok());
  // A lease picked without a known user (TCP) is released by whoever holds its id.
  const std::string anonymous = PickOne(table, TtlHolder(absl::Minutes(5)));
  EXPECT_TRUE(table.Release(anonymous, LeaseCaller{1001}).ok());
}

TEST(LeaseTableOwners, AUserHoldsAtMostTheCapOfDevicesRootIsNotCapped) {
  service::LeaseTableOptions options;
  options.max_devices_per_user = 1;
  LeaseTable table(options);
  PickOne(table, TtlHolder(absl::Minutes(5), 1000));
  const placement::PickOutcome second = table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5), 1000));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status.message(), HasSubstr("uid 1000 holds 1 leased device(s) and asked for 1 more; each user "
                                                 "may hold at most 1 at once (devplaced --max_leased_devices_per_user)"));
  EXPECT_FALSE(second.no_free_device);
  EXPECT_EQ(table.DevicesOf(1000), 1u);
  // Another user and root still get the free one.
  PickOne(table, TtlHolder(absl::Minutes(5), 0));
  EXPECT_EQ(table.size(), 2u);
  // None is free now: a pick past the cap is refused all the same, never left to wait for a device
  // the cap would refuse it.
  const placement::PickOutcome third = table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5), 1000));
  EXPECT_EQ(third.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(third.no_free_device);
  // A pick past the cap by itself: no release or wait can help, and the message says so.
  const placement::PickOutcome both = table.PickAndHold(TwoGpus(), Request(2), TtlHolder(absl::Minutes(5), 1001));
  EXPECT_EQ(both.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(both.status.message(), HasSubstr("asked for 2 devices; each user may hold at most 1 at once on this host "
                                               "(devplaced --max_leased_devices_per_user), so no release or wait makes "
                                               "room for it: ask for at most 1"));
}

// kMaxLeases, from a file (1024 picks of a 1025-GPU host would take a minute in a debug build): a
// file holding one lease more than the limit keeps 1024, and a pick is then refused although its
// devices are free; a release makes room.
TEST(LeaseTableCaps, NoMoreThanMaxLeasesAreHeldAtOnce) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  service::state::LeaseState state;
  state.set_version(1);
  for (size_t i = 0; i <= service::kMaxLeases; ++i) {
    v1::LeaseInfo& info = *state.add_leases()->mutable_info();
    info.set_lease_id(absl::StrCat("lease-", i));
    info.set_holder(v1::LEASE_HOLDER_TTL);
    info.add_devices()->set_pci_bus_id(absl::StrFormat("0001:%02x:%02x.0", i / 32, i % 32));  // not TwoGpus()'
    info.mutable_created_at()->set_seconds(absl::ToUnixSeconds(absl::Now()) + static_cast<int64_t>(i));
    info.mutable_expires_at()->set_seconds(absl::ToUnixSeconds(absl::Now() + absl::Hours(1)));
  }
  dir.Write("leases.state", state.SerializeAsString());
  chmod(file.c_str(), 0600);
  LeaseTable table;
  const RestoreReport report = table.Restore(file);
  EXPECT_EQ(report.kept, service::kMaxLeases);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_EQ(report.dropped[0], "lease lease-1024: malformed, repeated or past the limit of 1024");
  const placement::PickOutcome past = table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5)));
  EXPECT_EQ(past.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(past.status.message(), HasSubstr("devplaced holds 1024 leases, its limit"));
  EXPECT_FALSE(past.status.GetPayload(service::kOverUserCapPayload).has_value());  // not the user cap
  EXPECT_FALSE(past.no_free_device);
  ASSERT_TRUE(table.Release("lease-0").ok());
  PickOne(table, TtlHolder(absl::Minutes(5)));
  EXPECT_EQ(table.size(), service::kMaxLeases);
}

// The per-user cap counts the devices of live holders only: when a user's process ends, its
// devices count no more.
TEST(LeaseTableCaps, AUsersCapFreesWhenItsHoldingProcessEnds) {
  service::LeaseTableOptions options;
  options.max_devices_per_user = 1;
  LeaseTable table(options);
  Sleeper job;
  PickOne(table, ProcessHolder(job.pid(), 1000));
  const placement::PickOutcome over = table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5), 1000));
  EXPECT_EQ(over.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(over.status.GetPayload(service::kOverUserCapPayload).has_value());
  job.Kill();
  EXPECT_TRUE(Eventually([&] { return table.DevicesOf(1000) == 0; }));
  EXPECT_TRUE(table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5), 1000)).status.ok());
}

// The watcher ends a process lease when its process exits, without a pick or a call to Sweep, and
// tells the waiting picks (on_release).
TEST(LeaseTableSweep, AProcessLeaseEndsWithItsProcessAndItsDevicesAreFreeAgain) {
  absl::Mutex mu;
  int released = 0;
  LeaseTable table([&] {
    absl::MutexLock lock(&mu);
    ++released;
  });
  Sleeper first, second;
  PickOne(table, ProcessHolder(first.pid(), getuid()));
  PickOne(table, ProcessHolder(second.pid(), getuid()));
  EXPECT_TRUE(table.PickAndHold(TwoGpus(), Request(1), TtlHolder(absl::Minutes(5))).no_free_device);
  first.Kill();
  ASSERT_TRUE(Eventually([&] { return table.size() == 1; }));
  EXPECT_EQ(table.ended(), 1u);
  EXPECT_EQ(table.granted(), 2u);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(released, 1);
  }
  ASSERT_EQ(table.List().size(), 1u);
  EXPECT_EQ(table.List()[0].pid(), static_cast<uint32_t>(second.pid()));
  PickOne(table, TtlHolder(absl::Minutes(5)));  // the first one's GPU
  // A zombie (exited, not yet reaped) holds nothing either: its pidfd says it ended.
  second.KillWithoutReaping();
  EXPECT_TRUE(Eventually([&] { return table.size() == 1; }));
  EXPECT_EQ(table.ended(), 2u);
}

TEST(LeaseTableSweep, ATtlLeaseEndsWhenItsTimePassesUnlessKeptAlive) {
  LeaseTable table;
  const std::string lapses = PickOne(table, TtlHolder(absl::Seconds(2)));
  const std::string kept = PickOne(table, TtlHolder(absl::Seconds(2)));
  const absl::StatusOr<v1::LeaseInfo> renewed = table.KeepAlive(kept, absl::Hours(1));
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_GT(renewed->expires_at().seconds(), absl::ToUnixSeconds(absl::Now() + absl::Minutes(59)));
  ASSERT_TRUE(Eventually([&] { return table.size() == 1; }));
  ASSERT_EQ(table.List().size(), 1u);
  EXPECT_EQ(table.List()[0].lease_id(), kept);
  EXPECT_EQ(table.Release(lapses).status().code(), absl::StatusCode::kNotFound);
}

// devplace run's lease: held by a process group, it lasts while any process of the group runs,
// not only its leader, and a sweep (a pick's, a listing's, the watcher's) does not look through
// /proc for it while the process it watches runs.
TEST(LeaseTableSweep, AProcessGroupLeaseLastsWhileAnyProcessOfTheGroupRuns) {
  LeaseTable table;
  Sleeper leader(0);
  Sleeper member(leader.pid());
  LeaseHolderSpec group = ProcessHolder(leader.pid(), getuid());
  group.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  PickOne(table, group);
  leader.Kill();
  EXPECT_EQ(table.Sweep(), 0);  // the leader's end: the watcher's sweep finds the member
  EXPECT_EQ(table.Sweep(), 0);
  EXPECT_EQ(table.List().size(), 1u);
  member.Kill();
  EXPECT_TRUE(Eventually([&] { return table.size() == 0; }));
}

// Start times count from boot: a file from another boot of the host keeps its TTL leases, not its
// process leases (their pids name other processes now, whatever their start times); a file without
// a boot id (an older daemon's) is read as before.
TEST(LeaseTableFile, ProcessLeasesFromAnotherBootOfTheHostAreDropped) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  Sleeper holder;
  {
    LeaseTable table;
    table.Restore(file);
    PickOne(table, ProcessHolder(holder.pid(), getuid()));
    PickOne(table, TtlHolder(absl::Minutes(10)));
  }
  service::state::LeaseState written;
  ASSERT_TRUE(written.ParseFromString(ReadFile(file)));
  EXPECT_EQ(written.boot_id(), service::CurrentBootId());
  EXPECT_EQ(written.boot_id().size(), 36u);  // a UUID
  for (const std::string& boot : {std::string("00000000-0000-4000-8000-000000000000"), std::string()}) {
    written.set_boot_id(boot);
    dir.Write("leases.state", written.SerializeAsString());
    chmod(file.c_str(), 0600);
    LeaseTable table;
    const RestoreReport report = table.Restore(file);
    if (boot.empty()) {
      EXPECT_EQ(report.kept, 2u);
      EXPECT_TRUE(report.dropped.empty());
      continue;
    }
    EXPECT_EQ(report.kept, 1u);
    ASSERT_EQ(report.dropped.size(), 1u);
    EXPECT_THAT(report.dropped[0], HasSubstr(absl::StrCat("the host has restarted since it was granted (boot id ", boot,
                                                          ", now ", service::CurrentBootId(), "): its holder, pid ",
                                                          holder.pid(), ", ended with it")));
    ASSERT_EQ(table.List().size(), 1u);
    EXPECT_EQ(table.List()[0].holder(), v1::LEASE_HOLDER_TTL);
  }
}

// Read back after a restart, a group lease whose leader ended is kept while a process of its group
// runs and dropped, with its reason, once none is left.
TEST(LeaseTableFile, AGroupLeaseIsKeptWhileItsGroupRunsWithoutItsLeader) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  Sleeper leader(0);
  auto member = std::make_unique<Sleeper>(leader.pid());
  LeaseHolderSpec group = ProcessHolder(leader.pid(), getuid());
  group.kind = v1::LEASE_HOLDER_PROCESS_GROUP;
  {
    LeaseTable table;
    table.Restore(file);
    PickOne(table, group);
  }
  leader.Kill();
  {
    LeaseTable table;
    const RestoreReport report = table.Restore(file);
    EXPECT_EQ(report.kept, 1u);
    EXPECT_TRUE(report.dropped.empty()) << report.dropped[0];
    EXPECT_EQ(table.size(), 1u);
  }
  member->Kill();
  LeaseTable table;
  const RestoreReport report = table.Restore(file);
  EXPECT_EQ(report.kept, 0u);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], HasSubstr(absl::StrCat("its holder, pid ", group.process.pid,
                                                        ", has exited, and no process of its group is left")));
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace devplace::testing
