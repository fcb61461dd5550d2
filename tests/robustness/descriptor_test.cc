// Issue 8 item 1: a flood of connections that exhausts the daemon's descriptors must not leave it
// alive but deaf. The daemon checks its own listeners (--liveness_interval); after the flood it
// serves again within seconds, or, when gRPC's accept loop gave up for good, exits 1 with
// event=listener_dead for its supervisor to restart it (the documented recovery).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

std::string Host(const std::string& name) { return std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/" + name; }

// One Health/Check over a connection of its own.
bool Serves(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, {}, &response).ok();
}

TEST(Descriptors, TheDaemonRecoversOrExitsForItsSupervisorAfterAFlood) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + Host("cpu-only"), "--liveness_interval=1s", "--liveness_failures=3"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  EXPECT_THAT(d.Log(), ::testing::HasSubstr("event=rlimit_nofile"));
  // A small descriptor limit, so that a small flood exhausts it.
  ASSERT_EQ(RunCommand(absl::StrCat("prlimit --pid ", d.pid(), " --nofile=64:64")).exit_code, 0);
  const int port = std::stoi(d.tcp_target().substr(d.tcp_target().rfind(':') + 1));
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
  absl::SleepFor(absl::Seconds(2));
  for (int fd : flood) close(fd);
  const absl::Time ended = absl::Now();

  // Within 20 s: serving on both listeners again, or exited 1 with event=listener_dead.
  bool serving = false;
  int exit_status = -1;
  while (absl::Now() - ended < absl::Seconds(20)) {
    exit_status = d.WaitExit(absl::Milliseconds(200));
    if (exit_status != -1) break;
    if (Serves(d.tcp_target()) && Serves(d.unix_target())) {
      serving = true;
      break;
    }
  }
  const absl::Duration took = absl::Now() - ended;
  fprintf(stderr, "after the flood: %s after %s\n", serving ? "serving" : absl::StrCat("exit ", exit_status).c_str(),
          absl::FormatDuration(took).c_str());
  EXPECT_THAT(d.Log(), ::testing::HasSubstr("Too many open files")) << "the flood did not exhaust descriptors";
  if (!serving) {
    EXPECT_EQ(exit_status, 1) << d.Log();
    EXPECT_THAT(d.Log(), ::testing::HasSubstr("event=listener_dead")) << d.Log();
  }
}

}  // namespace
}  // namespace devplace::testing
