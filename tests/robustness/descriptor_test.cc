// A flood of connections that exhausts the daemon's descriptors must not leave it
// alive but deaf. The daemon checks its own listeners (--liveness_interval); after the flood it
// serves again within seconds, or, when gRPC's accept loop gave up for good, exits 1 with
// event=listener_dead for its supervisor to restart it (the documented recovery). A descriptor
// limit lowered by root while the daemon runs, above what it holds, is followed: the connection
// caps shrink to fit it, so a later flood is refused at accept and never meets EMFILE.
#include <arpa/inet.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/robustness/peer_commands.h"

namespace devplace::testing {
namespace {

// One Health/Check over a connection of its own.
bool Serves(const std::string& target) { return HealthServes(target, absl::Seconds(1)); }

// Lowers the running daemon's descriptor limit, floods `port` on 127.0.0.1 with connections held
// until the daemon meets EMFILE, then expects, within 20 s of the flood's end, `serving()` again or exit status 1 with
// event=listener_dead naming `dead_address`.
void FloodAndExpectRecoveryOrExit(DaemonProcess& d, int port, const std::function<bool()>& serving,
                                  const std::string& dead_address) {
  // A descriptor limit so small that a small flood exhausts it: the connection caps follow the
  // limit, so it must be below what the daemon holds plus root's reserve (32) for root's flood to
  // reach EMFILE.
  ASSERT_EQ(RunCommand(absl::StrCat("prlimit --pid ", d.pid(), " --nofile=32:32")).exit_code, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> flood;
  for (int i = 0; i < 120; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      break;  // the backlog is full: flooded enough
    }
    flood.push_back(fd);
  }
  ASSERT_GT(flood.size(), 64u);
  // Held until the daemon has met EMFILE accepting them (it logs gRPC's "Too many open files"):
  // on a loaded machine its accept loop may not run at all within a fixed hold.
  const bool exhausted = d.WaitForLog("Too many open files", absl::Seconds(60));
  for (int fd : flood) close(fd);
  const absl::Time ended = absl::Now();

  // Within 20 s: serving on every listener again, or exited 1 with event=listener_dead.
  bool served = false;
  int exit_status = -1;
  while (absl::Now() - ended < absl::Seconds(20)) {
    exit_status = d.WaitExit(absl::Milliseconds(200));
    if (exit_status != -1) break;
    if (serving()) {
      served = true;
      break;
    }
  }
  const absl::Duration took = absl::Now() - ended;
  fprintf(stderr, "after the flood: %s after %s\n", served ? "serving" : absl::StrCat("exit ", exit_status).c_str(),
          absl::FormatDuration(took).c_str());
  EXPECT_TRUE(exhausted) << "the flood did not exhaust descriptors within 60 s:\n" << d.Log();
  if (!served) {
    EXPECT_EQ(exit_status, 1) << d.Log();
    EXPECT_THAT(d.Log(), ::testing::HasSubstr("event=listener_dead address=")) << d.Log();
    // The flooded listener was among those found dead (another may have died first: it too can
    // meet EMFILE while the flood holds every descriptor).
    EXPECT_THAT(d.Log(), ::testing::HasSubstr("event=liveness_check_failed address=" + dead_address)) << d.Log();
  }
}

int PortOf(const std::string& target) { return std::stoi(target.substr(target.rfind(':') + 1)); }

TEST(Descriptors, TheDaemonRecoversOrExitsForItsSupervisorAfterAFlood) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--liveness_interval=1s", "--liveness_failures=3"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  EXPECT_THAT(d.Log(), ::testing::HasSubstr("event=rlimit_nofile"));
  FloodAndExpectRecoveryOrExit(
      d, PortOf(d.tcp_target()), [&d] { return Serves(d.tcp_target()) && Serves(d.unix_target()); },
      d.tcp_target());
}

// The same flood on a mutual-TLS listener, which the daemon cannot health-check without a client
// certificate: its liveness check is a connection the listener must read and close.
TEST(Descriptors, AFloodedTlsListenerIsDetectedToo) {
  TempDir dir;
  const CertFiles ca = MakeCa(dir.path(), "ca");
  const CertFiles server = MakeLeaf(dir.path(), ca, "server", "IP:127.0.0.1", false);
  const CertFiles client = MakeLeaf(dir.path(), ca, "client", "", true);
  DaemonProcess d(dir.path(), {"--listen=unix:" + dir.File("d.sock") + ",127.0.0.1:0,tls:127.0.0.1:0",
                               "--host_root=" + FixtureHost("cpu-only"), "--tls_cert=" + server.cert,
                               "--tls_key=" + server.key, "--tls_client_ca=" + ca.cert, "--liveness_interval=1s",
                               "--liveness_failures=3"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const std::string log = d.Log();
  const std::string needle = "event=listening address=tls:127.0.0.1:";
  ASSERT_NE(log.find(needle), std::string::npos) << log;
  const int tls_port = std::stoi(log.substr(log.find(needle) + needle.size()));
  // Healthy: three rounds of checks pass the TLS listener.
  absl::SleepFor(absl::Seconds(3.5));
  EXPECT_THAT(d.Log(), ::testing::Not(::testing::HasSubstr("event=liveness_check_failed"))) << d.Log();
  // Serving again: a mutual-TLS health check with a client certificate, and the other listeners.
  const std::string tls_target = absl::StrCat("127.0.0.1:", tls_port);
  auto serves_tls = [&] {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ReadFile(ca.cert);
    tls.pem_private_key = ReadFile(client.key);
    tls.pem_cert_chain = ReadFile(client.cert);
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(tls_target, grpc::SslCredentials(tls), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&ctx, {}, &response).ok();
  };
  ASSERT_TRUE(serves_tls());
  FloodAndExpectRecoveryOrExit(
      d, tls_port, [&] { return serves_tls() && Serves(d.tcp_target()) && Serves(d.unix_target()); },
      "tls:" + tls_target);
}

// prlimit lowers the running daemon's soft limit to 300 descriptors: within a second the total cap
// is 300 - 32 (reserve) - 128 (the daemon's own) = 140 and logged. Three users then hold 100
// connections each (each under its per-peer cap of 128): at most 140 are admitted, the rest closed
// at accept, no accept meets EMFILE, root's health calls are served throughout (the reserve), and
// the daemon does not exit. Raised again, the cap returns to --max_connections.
TEST(Descriptors, ALimitLoweredAfterStartIsFollowedAndAFloodIsRefusedAtAccept) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--socket_mode=0666", "--liveness_interval=1s",
                               "--liveness_failures=3"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const double original = NumberAfter(d.Log(), "event=rlimit_nofile soft=");
  ASSERT_GT(original, 300) << d.Log();
  ASSERT_EQ(RunCommand(absl::StrCat("prlimit --pid ", d.pid(), " --nofile=300:")).exit_code, 0);
  ASSERT_TRUE(d.WaitForLog("event=max_connections_lowered max_connections=4096 to=140 rlimit_nofile=300",
                           absl::Seconds(5)))
      << d.Log();

  std::vector<std::string> commands;
  for (uid_t user : {kFlooder, uid_t{5001}, uid_t{5002}}) {
    commands.push_back(AsUser(user, absl::StrCat("hold ", d.tcp_target(), " 100 6")));
  }
  int root_ok = 0, root_failed = 0;
  const std::vector<std::string> reports = RunTogetherWhileProbing(
      commands, [&] { return Serves(d.tcp_target()) && Serves(d.unix_target()); }, &root_ok, &root_failed);
  double held = 0;
  for (const std::string& r : reports) {
    fprintf(stderr, "%s", r.c_str());
    EXPECT_EQ(Field(r, "opened"), 100) << r;
    held += Field(r, "open_at_end");
  }
  fprintf(stderr, "held %.0f; root: %d rounds served, %d failed\n", held, root_ok, root_failed);
  EXPECT_LE(held, 140) << "more connections were held than the lowered limit leaves room for";
  EXPECT_GE(held, 100) << "the flood was not admitted up to the cap";
  EXPECT_EQ(root_failed, 0);
  EXPECT_GT(root_ok, 5);
  const std::string log = d.Log();
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("Too many open files"))) << log;
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("event=listener_dead"))) << log;
  EXPECT_EQ(d.WaitExit(absl::ZeroDuration()), -1) << log;

  ASSERT_EQ(RunCommand(absl::StrCat("prlimit --pid ", d.pid(), " --nofile=", static_cast<int64_t>(original), ":"))
                .exit_code,
            0);
  EXPECT_TRUE(d.WaitForLog("event=max_connections_restored max_connections=4096", absl::Seconds(5))) << d.Log();
}

}  // namespace
}  // namespace devplace::testing
