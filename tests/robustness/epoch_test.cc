// Revisions are numbered per daemon instance (Inventory.epoch), so a watcher that
// comes back with a revision from another instance, or one the daemon has not reached, gets the
// current snapshot at once; only an exact (epoch, revision) match skips it.
#include <signal.h>

#include <string>

#include "devplace/v1/devplace.grpc.pb.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

v1::Inventory Get(v1::DevicePlacement::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Inventory inv;
  EXPECT_TRUE(stub.GetInventory(&ctx, {}, &inv).ok());
  return inv;
}

// The first message of a watch started with (known_epoch, known_revision); fails the test when
// none arrives within 10 s.
v1::Inventory FirstWatched(v1::DevicePlacement::Stub& stub, uint64_t known_epoch, uint64_t known_revision,
                           const std::function<void()>& after_start = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WatchInventoryRequest request;
  request.set_known_epoch(known_epoch);
  request.set_known_revision(known_revision);
  auto reader = stub.WatchInventory(&ctx, request);
  if (after_start) after_start();
  v1::Inventory inv;
  EXPECT_TRUE(reader->Read(&inv)) << "no snapshot for known_epoch=" << known_epoch
                                  << " known_revision=" << known_revision;
  ctx.TryCancel();
  (void)reader->Finish();
  return inv;
}

TEST(Epoch, EverySnapshotCarriesTheInstanceEpochAndAWatcherAheadGetsIt) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  const v1::Inventory inv = Get(*stub);
  EXPECT_NE(inv.epoch(), 0u);
  EXPECT_EQ(inv.revision(), 1u);
  // A refresh keeps the epoch.
  grpc::ClientContext ctx;
  v1::Inventory refreshed;
  ASSERT_TRUE(stub->RefreshInventory(&ctx, {}, &refreshed).ok());
  EXPECT_EQ(refreshed.epoch(), inv.epoch());
  const v1::Inventory& current = refreshed;

  // A watcher ahead of the daemon gets the current snapshot: revision 1000 from an instance the client remembers (or knows nothing about).
  for (uint64_t epoch : {uint64_t{0}, current.epoch() + 1, current.epoch()}) {
    SCOPED_TRACE(epoch);
    const v1::Inventory first = FirstWatched(*stub, epoch, 1000);
    EXPECT_EQ(first.revision(), 1u);
    EXPECT_EQ(first.epoch(), current.epoch());
  }
}

TEST(Epoch, AWatcherFromBeforeARestartGetsTheCurrentSnapshot) {
  TempDir dir;
  uint64_t old_epoch = 0;
  {
    DaemonProcess before(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
    ASSERT_TRUE(before.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << before.Log();
    old_epoch = Get(*Stub(before.unix_target())).epoch();
    before.Signal(SIGTERM);
    ASSERT_EQ(before.WaitExit(absl::Seconds(10)), 0) << before.Log();
  }
  DaemonProcess after(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
  ASSERT_TRUE(after.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << after.Log();
  auto stub = Stub(after.unix_target());
  const v1::Inventory current = Get(*stub);
  ASSERT_NE(current.epoch(), old_epoch);
  // The same revision number from the old instance is not the same snapshot.
  const v1::Inventory first = FirstWatched(*stub, old_epoch, current.revision());
  EXPECT_EQ(first.epoch(), current.epoch());
  EXPECT_EQ(first.revision(), current.revision());
}

TEST(Epoch, AnExactMatchSkipsOnlyThatSnapshot) {
  TempDir dir;
  const std::string host = dir.File("host");
  ASSERT_EQ(RunCommand("cp -r " + ShellQuote(FixtureHost("cpu-only")) + " " + host).exit_code, 0);
  DaemonProcess d(dir.path(), {"--host_root=" + host, "--refresh_interval=0"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  const v1::Inventory current = Get(*stub);
  // The watcher has revision 1 of this instance: the first message it gets is revision 2, made by
  // changing the host after the watch started.
  const v1::Inventory first = FirstWatched(*stub, current.epoch(), current.revision(), [&] {
    ASSERT_EQ(RunCommand("echo renamed-host > " + host + "/proc/sys/kernel/hostname").exit_code, 0);
    grpc::ClientContext ctx;
    v1::Inventory refreshed;
    ASSERT_TRUE(stub->RefreshInventory(&ctx, {}, &refreshed).ok());
    ASSERT_EQ(refreshed.revision(), 2u);
  });
  EXPECT_EQ(first.revision(), 2u);
  EXPECT_EQ(first.host().hostname(), "renamed-host");
}

}  // namespace
}  // namespace devplace::testing
