// The lease trail: every pick, release, renewal, end, expiry and refusal is one info line in
// devplaced's log (event=lease), and the leases kept across a restart are logged and counted by
// /metrics at once. A real daemon, real callers (the CLI in a shell, gRPC over the unix socket and
// TCP), a real SIGKILL and start.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<DaemonProcess> Start(const std::string& dir) {
  auto d = std::make_unique<DaemonProcess>(
      dir, std::vector<std::string>{std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/nvidia-2x-h100",
                                    "--metrics_listen=127.0.0.1:0"});
  EXPECT_TRUE(d->WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d->Log();
  return d;
}

grpc::Status Pick(const std::string& target, v1::LeaseHolder holder, uint32_t ttl_ms, uint32_t count,
                  v1::PickDevicesResponse* out) {
  v1::PickDevicesRequest request;
  request.set_holder(holder);
  request.set_ttl_ms(ttl_ms);
  request.set_count(count);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return Stub(target)->PickDevices(&ctx, request, out);
}

std::string Scrape(DaemonProcess& d) {
  std::smatch m;
  const std::string log = d.Log();
  if (!std::regex_search(log, m, std::regex("event=metrics_listening url=(http://[0-9.:]+/metrics)"))) return "";
  return RunCommand("curl -sS --max-time 10 " + m[1].str()).out;
}

// Whether d's log shows a line matching `pattern` within 20 s (the daemon's stderr is read as it
// comes: a line may arrive a moment after the call it tells of was answered).
bool Logged(DaemonProcess& d, const std::string& pattern) {
  const std::regex re(pattern);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(20); absl::Now() < give_up;) {
    if (std::regex_search(d.Log(), re)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::regex_search(d.Log(), re);
}

TEST(LeaseTrail, EveryStepOfALeaseIsALogLineNamingWhoWhichDevicesAndWhy) {
  TempDir dir;
  auto d = Start(dir.path());
  const std::string uid = absl::StrCat(getuid());
  // A shell picks with the CLI and exits: granted, then ended with its holder.
  const CommandResult shell = RunCommand(absl::StrCat(
      "DEVPLACE_ADDRESS=", ShellQuote(d->unix_target()), " bash -c 'eval \"$(", ShellQuote(DEVPLACE_CLI_BINARY),
      " pick --no_environment 2>/dev/null)\" && echo shell=$$'"));
  ASSERT_EQ(shell.exit_code, 0) << shell.out << shell.err;
  const std::string pid = std::regex_replace(shell.out, std::regex("(?:.|\n)*shell=([0-9]+)(?:.|\n)*"), "$1");
  ASSERT_TRUE(d->WaitForLog(absl::StrCat("holder=parent pid=", pid, " uid=", uid, " devices=0000:"), absl::Seconds(20)))
      << d->Log();
  EXPECT_TRUE(d->WaitForLog("event=lease action=ended lease=", absl::Seconds(20))) << d->Log();
  EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=granted user=uid:", uid, " lease=[0-9a-f]{8} holder=parent pid=",
                                      pid)))
      << d->Log();
  EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=ended lease=[0-9a-f]{8} holder=parent pid=", pid, " uid=", uid,
                                      " devices=0000:[0-9a-f:.]+\n")))
      << d->Log();

  // Over TCP: a TTL lease renewed and released by its owner; one that expires.
  v1::PickDevicesResponse ttl, short_lived;
  ASSERT_TRUE(Pick(d->tcp_target(), v1::LEASE_HOLDER_TTL, 600'000, 1, &ttl).ok());
  const std::string id8 = ttl.lease().lease_id().substr(0, 8);
  grpc::ClientContext keep_ctx, release_ctx;
  v1::LeaseKeepAliveRequest keep;
  keep.set_lease_id(ttl.lease().lease_id());
  v1::LeaseKeepAliveResponse kept;
  ASSERT_TRUE(Stub(d->tcp_target())->LeaseKeepAlive(&keep_ctx, keep, &kept).ok());
  v1::LeaseReleaseRequest release;
  release.set_lease_id(ttl.lease().lease_id());
  v1::LeaseReleaseResponse released;
  ASSERT_TRUE(Stub(d->unix_target())->LeaseRelease(&release_ctx, release, &released).ok());
  for (const char* action : {"granted", "renewed", "released"}) {
    EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=", action, " user=uid:", uid, " lease=", id8,
                                        " holder=ttl uid=", uid, " devices=0000:[0-9a-f:.]+ expires_at=")))
        << action << d->Log();
  }
  ASSERT_TRUE(Pick(d->tcp_target(), v1::LEASE_HOLDER_TTL, 1'000, 1, &short_lived).ok());
  EXPECT_TRUE(d->WaitForLog(absl::StrCat("event=lease action=expired lease=", short_lived.lease().lease_id().substr(0, 8),
                                         " holder=ttl"),
                            absl::Seconds(20)))
      << d->Log();

  // A refusal: three GPUs on a two-GPU host.
  v1::PickDevicesResponse none;
  EXPECT_EQ(Pick(d->unix_target(), v1::LEASE_HOLDER_PROCESS, 0, 3, &none).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=refused user=uid:", uid,
                                      " outcome=[a-z_]+ error=\"[^\"\n]*3[^\"\n]*\"")))
      << d->Log();
  // The whole id, the capability to release a lease, is never logged.
  EXPECT_THAT(d->Log(), Not(HasSubstr(ttl.lease().lease_id())));
}

TEST(LeaseTrail, LeasesKeptAcrossARestartAreLoggedAndCountedAtOnce) {
  TempDir dir;
  auto d = Start(dir.path());
  v1::PickDevicesResponse process, ttl;
  ASSERT_TRUE(Pick(d->unix_target(), v1::LEASE_HOLDER_PROCESS, 0, 1, &process).ok());
  ASSERT_TRUE(Pick(d->tcp_target(), v1::LEASE_HOLDER_TTL, 600'000, 1, &ttl).ok());
  d->Signal(SIGKILL);
  EXPECT_EQ(d->WaitExit(absl::Seconds(10)), 128 + SIGKILL);
  d = Start(dir.path());
  ASSERT_TRUE(d->WaitForLog("event=metrics_listening", absl::Seconds(20))) << d->Log();
  EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=restored lease=", process.lease().lease_id().substr(0, 8),
                                      " holder=process pid=", getpid())))
      << d->Log();
  EXPECT_TRUE(Logged(*d, absl::StrCat("event=lease action=restored lease=", ttl.lease().lease_id().substr(0, 8),
                                      " holder=ttl")))
      << d->Log();
  // Before any pick or release: the gauge counts the kept leases.
  EXPECT_THAT(Scrape(*d), ContainsRegex("devplace_leases_held 2(\\.0*)?\n"));
}

}  // namespace
}  // namespace devplace::testing
