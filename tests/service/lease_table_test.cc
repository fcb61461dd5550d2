// The lease table with real parts: real files (written and read back as devplaced does at start),
// real child processes as lease holders, and the owners' and the per-user cap's refusals.
#include "server/service/lease_table.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/lease_state.pb.h"
#include "tests/common/temp_dir.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using service::LeaseCaller;
using service::LeaseHolderSpec;
using service::LeaseTable;
using service::RestoreReport;

v1::PickDevicesRequest Request(int count) {
  v1::PickDevicesRequest r;
  r.set_count(count);
  r.mutable_job()->set_workload(v1::WORKLOAD_TRAINING);
  return r;
}

v1::Inventory TwoGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  return b.Build();
}

// A child that sleeps until killed: a lease holder whose life the test controls.
class Sleeper {
 public:
  Sleeper() {
    pid_ = fork();
    if (pid_ == 0) {
      for (;;) pause();
    }
  }
  ~Sleeper() { Kill(); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

LeaseHolderSpec ProcessHolder(pid_t pid, uid_t uid) {
  LeaseHolderSpec h;
  h.kind = v1::LEASE_HOLDER_PROCESS;
  h.process = *service::ReadProcess(pid);
  h.caller_uid = uid;
  return h;
}

LeaseHolderSpec TtlHolder(absl::Duration ttl, std::optional<uid_t> uid = std::nullopt) {
  LeaseHolderSpec h;
  h.kind = v1::LEASE_HOLDER_TTL;
  h.ttl = ttl;
  h.caller_uid = uid;
  return h;
}

std::string PickOne(LeaseTable& table, const LeaseHolderSpec& holder) {
  const placement::PickOutcome out = table.PickAndHold(TwoGpus(), Request(1), holder);
  EXPECT_TRUE(out.status.ok()) << out.status;
  return out.response.lease().lease_id();
}

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

// A file that is not the daemon's own lease table is a warning and an empty table, never a crash,
// and is replaced by the daemon's own.
TEST(LeaseTableFile, ACorruptOrForeignFileIsAWarningAndAnEmptyTable) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  const auto restore = [&]() {
    LeaseTable table;
    RestoreReport report = table.Restore(file);
    EXPECT_EQ(table.size(), 0u);
    const placement::PickOutcome both = table.PickAndHold(TwoGpus(), Request(2), TtlHolder(absl::Minutes(1)));
    EXPECT_TRUE(both.status.ok()) << both.status;  // both devices free: nothing of the file was kept
    EXPECT_TRUE(table.Release(both.response.lease().lease_id()).ok());
    return report;
  };
  dir.Write("leases.state", std::string("\xff\xff\xff\xff garbage", 13));
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("is not a lease table (corrupt or another format); starting with no leases"));
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);  // rewritten: the daemon's own now
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(restore().warning, "");

  chmod(file.c_str(), 0622);
  EXPECT_THAT(restore().warning, HasSubstr("is writable by group or others (mode 0622)"));

  service::state::LeaseState newer;
  newer.set_version(2);
  dir.Write("leases.state", newer.SerializeAsString());
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("has lease table version 2, this devplaced reads version 1"));

  unlink(file.c_str());
  ASSERT_EQ(symlink(dir.File("elsewhere").c_str(), file.c_str()), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is a symbolic link"));

  unlink(file.c_str());
  ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is not a regular file"));

  unlink(file.c_str());
  dir.Write("leases.state", std::string((size_t{16} << 20) + 1, 'x'));
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("is larger than"));

  if (geteuid() != 0) GTEST_SKIP() << "a file of another user needs root to make (chown)";
  dir.Write("leases.state", "");
  chmod(file.c_str(), 0600);
  ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is owned by uid 65534, not by devplaced's uid 0"));
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
}

}  // namespace
}  // namespace devplace::testing
