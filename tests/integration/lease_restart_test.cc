// Leases outlive the daemon: the real devplaced picks for real callers, is killed with SIGKILL (no
// chance to save anything then) and started again in the same runtime directory; the devices it
// leased stay leased (also for a holder that changed its uid by exec), a lease whose holder ended
// or whose group leader's pid a stranger was given meanwhile is dropped, and a lease file that is
// corrupt is a warning and an empty table.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/pid_reuse.h"
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


// Starts `script` under /bin/sh as a child (fork and exec at once) and returns its pid.
pid_t StartShell(const std::string& script) {
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}

// Waits (at most 20 s) for `file` to hold `text`.
bool WaitForFileText(const std::string& file, const std::string& text) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (ReadFile(file).find(text) == std::string::npos) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// The gosu / su-exec entrypoint: `eval "$(devplace pick)" && exec setpriv --reuid=N job`. The holder
// (the shell) becomes another user by exec while it holds the lease; the kernel keeps its pid and
// start time, so a restart keeps the lease, and it still ends with the job.
TEST(LeaseRestart, AHolderThatChangedItsUidByExecKeepsItsLeaseAcrossARestart) {
  TempDir dir;
  auto daemon = Start(dir.path());
  const std::string script = absl::StrCat(
      ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(daemon->unix_target()), " pick --no_environment --json > ",
      ShellQuote(dir.File("pick.json")), " && exec setpriv --reuid=12345 --regid=12345 --clear-groups sleep 600");
  const pid_t child = StartShell(script);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(WaitForFileText(dir.File("pick.json"), "leaseId")) << daemon->Log();
  // The job runs as uid 12345 now.
  ASSERT_TRUE(WaitForFileText(absl::StrCat("/proc/", child, "/status"), "Uid:\t12345"));
  Kill9(*daemon);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=1 dropped=0"));
  v1::PickDevicesRequest both;
  both.set_count(2);
  both.set_holder(v1::LEASE_HOLDER_TTL);
  both.set_ttl_ms(60'000);
  v1::PickDevicesResponse refused;
  grpc::ClientContext ctx;
  EXPECT_EQ(Stub(daemon->tcp_target())->PickDevices(&ctx, both, &refused).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  kill(child, SIGKILL);  // the job ends: so does its lease
  waitpid(child, nullptr, 0);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  grpc::Status picked;
  do {
    v1::PickDevicesResponse response;
    grpc::ClientContext again;
    picked = Stub(daemon->tcp_target())->PickDevices(&again, both, &response);
  } while (!picked.ok() && absl::Now() < give_up && (absl::SleepFor(absl::Milliseconds(20)), true));
  EXPECT_TRUE(picked.ok()) << picked.error_message();
  Kill9(*daemon);
}

// `devplace run` holds its lease for its process group; its command leaves a job running in the
// group and ends, and the run with it (the leader). The first restart keeps the lease. Then, while
// the daemon is down, the job ends and the kernel gives the leader's pid to a stranger who leads a
// group of its own with that id (here on purpose: clone3 with set_tid, as root): the second restart
// drops the lease rather than keep it for the stranger.
TEST(LeaseRestart, AGroupLeaseIsNotKeptForAStrangerGivenItsLeadersPidWhileTheDaemonWasDown) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // the job, orphaned when the run ends, is this test's to reap
  TempDir dir;
  auto daemon = Start(dir.path());
  const std::string address = "--address=" + daemon->unix_target();
  const std::string job = absl::StrCat("sleep 600 & echo $! > ", ShellQuote(dir.File("job.pid")));
  const pid_t run = fork();
  if (run == 0) {
    execl(DEVPLACE_CLI_BINARY, "devplace", address.c_str(), "run", "--no_environment", "--", "/bin/sh", "-c",
          job.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(run, 0);
  int status = 0;
  ASSERT_EQ(waitpid(run, &status, 0), run);  // the run ends with its command; the job runs on
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << daemon->Log();
  const pid_t sleeper = std::stoi(ReadFile(dir.File("job.pid")));
  Kill9(*daemon);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=1 dropped=0"));
  Kill9(*daemon);
  kill(sleeper, SIGKILL);  // the group's last process: the leader's pid is free
  waitpid(sleeper, nullptr, 0);
  const pid_t stranger = SpawnGroupLeaderAtPid(run);
  if (stranger < 0) GTEST_SKIP() << "cannot start a process at a chosen pid here (" << strerror(errno) << "; needs root)";
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=0 dropped=1"));
  EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("pid ", run, " is another process now")));
  Kill9(*daemon);
  kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
}

}  // namespace
}  // namespace devplace::testing
