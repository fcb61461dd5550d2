// Leases outlive the daemon: the real devplaced picks for real callers, is killed with SIGKILL (no
// chance to save anything then) and started again in the same runtime directory; the devices it
// leased stay leased, and a lease file that is corrupt is a warning and an empty table.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// devplaced on the two-GPU fixture, its socket and lease file (the default: leases.state beside
// the first unix socket) in `dir`.
std::unique_ptr<DaemonProcess> Start(const std::string& dir) {
  auto d = std::make_unique<DaemonProcess>(
      dir, std::vector<std::string>{std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/nvidia-2x-h100"});
  EXPECT_TRUE(d->WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d->Log();
  return d;
}

grpc::Status Pick(v1::DevicePlacement::Stub& stub, v1::LeaseHolder holder, v1::PickDevicesResponse* out) {
  v1::PickDevicesRequest request;
  request.set_holder(holder);
  if (holder == v1::LEASE_HOLDER_TTL) request.set_ttl_ms(600'000);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return stub.PickDevices(&ctx, request, out);
}

void Kill9(DaemonProcess& d) {
  d.Signal(SIGKILL);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 128 + SIGKILL);
}

TEST(LeaseRestart, LiveLeasesSurviveSigkillAndRestartASecondPickDoesNotGetTheirDevices) {
  TempDir dir;
  auto daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("event=lease_state file=", dir.path(), "/leases.state found=false")));
  // A process lease for this test process (over the unix socket) and a TTL lease (over TCP):
  // both GPUs.
  v1::PickDevicesResponse process, ttl;
  ASSERT_TRUE(Pick(*Stub(daemon->unix_target()), v1::LEASE_HOLDER_PROCESS, &process).ok());
  ASSERT_TRUE(Pick(*Stub(daemon->tcp_target()), v1::LEASE_HOLDER_TTL, &ttl).ok());
  EXPECT_EQ(process.lease().pid(), static_cast<uint32_t>(getpid()));
  struct stat st {};
  ASSERT_EQ(stat((dir.path() + "/leases.state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  Kill9(*daemon);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=2 dropped=0"));
  v1::PickDevicesResponse third;
  const grpc::Status refused = Pick(*Stub(daemon->unix_target()), v1::LEASE_HOLDER_PROCESS, &third);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("0 free for this job now"));
  grpc::ClientContext ctx;
  v1::Inventory inventory;
  ASSERT_TRUE(Stub(daemon->unix_target())->GetInventory(&ctx, {}, &inventory).ok());
  ASSERT_EQ(inventory.leases_size(), 2);
  EXPECT_EQ(inventory.leases(0).lease_id(), process.lease().lease_id());
  EXPECT_EQ(inventory.leases(1).lease_id(), ttl.lease().lease_id());
  EXPECT_EQ(inventory.leases(1).expires_at().seconds(), ttl.lease().expires_at().seconds());

  // Released after the restart, by its owner, the device is picked again.
  v1::LeaseReleaseRequest release;
  release.set_lease_id(process.lease().lease_id());
  grpc::ClientContext rctx;
  v1::LeaseReleaseResponse released;
  ASSERT_TRUE(Stub(daemon->unix_target())->LeaseRelease(&rctx, release, &released).ok());
  v1::PickDevicesResponse again;
  ASSERT_TRUE(Pick(*Stub(daemon->unix_target()), v1::LEASE_HOLDER_PROCESS, &again).ok());
  EXPECT_EQ(again.lease().devices(0).pci_bus_id(), process.lease().devices(0).pci_bus_id());
  Kill9(*daemon);
}

TEST(LeaseRestart, ALeaseWhoseProcessEndedWhileTheDaemonWasDownIsDroppedWithALogLine) {
  TempDir dir;
  auto daemon = Start(dir.path());
  v1::PickDevicesResponse ttl;  // one GPU for ten minutes
  ASSERT_TRUE(Pick(*Stub(daemon->tcp_target()), v1::LEASE_HOLDER_TTL, &ttl).ok());
  // The other GPU is leased to a shell (the CLI's parent), started with fork and exec at once.
  const std::string script =
      absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(daemon->unix_target()),
                   " pick --no_environment --json > ", ShellQuote(dir.File("pick.json")), " && exec sleep 600");
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(child, 0);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  v1::Inventory inventory;
  while (absl::Now() < give_up) {
    grpc::ClientContext ctx;
    inventory.Clear();
    if (Stub(daemon->unix_target())->GetInventory(&ctx, {}, &inventory).ok() && inventory.leases_size() == 2) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(inventory.leases_size(), 2);
  // The CLI has its answer (the shell runs sleep now) before the daemon goes.
  while (ReadFile(dir.File("pick.json")).find("leaseId") == std::string::npos && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(ReadFile(dir.File("pick.json")), HasSubstr("leaseId"));
  Kill9(*daemon);
  kill(child, SIGKILL);  // the job (the shell, now sleep) ends while no daemon runs
  waitpid(child, nullptr, 0);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=1 dropped=1"));
  EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("event=lease_dropped")));
  EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("its holder, pid ", child, ", has exited")));
  v1::PickDevicesResponse freed;
  ASSERT_TRUE(Pick(*Stub(daemon->unix_target()), v1::LEASE_HOLDER_PROCESS, &freed).ok());
  EXPECT_NE(freed.lease().devices(0).pci_bus_id(), ttl.lease().devices(0).pci_bus_id());
  Kill9(*daemon);
}

TEST(LeaseRestart, ACorruptLeaseFileIsAWarningAndAnEmptyTable) {
  TempDir dir;
  dir.Write("leases.state", std::string("\x0a\xff\xff\xff\xff\xff not a lease table"));
  chmod((dir.path() + "/leases.state").c_str(), 0600);
  auto daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state_ignored"));
  EXPECT_THAT(daemon->Log(), HasSubstr("is not a lease table (corrupt or another format); starting with no leases"));
  v1::PickDevicesResponse picked;
  ASSERT_TRUE(Pick(*Stub(daemon->unix_target()), v1::LEASE_HOLDER_PROCESS, &picked).ok());
  Kill9(*daemon);
  // A file another user may write is not trusted either.
  chmod((dir.path() + "/leases.state").c_str(), 0666);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("is writable by group or others (mode 0666)"));
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=0 dropped=0"));
  Kill9(*daemon);
}

}  // namespace
}  // namespace devplace::testing
