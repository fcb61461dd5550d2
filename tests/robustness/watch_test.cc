// Watches are capped per daemon and per peer (RESOURCE_EXHAUSTED past the cap; a
// peer is a local client's user on every transport, as for the connection caps), and a client frozen with SIGSTOP on the unix socket is dropped by keepalive, which frees its
// watch.
#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <sys/wait.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/robustness/peer_commands.h"

extern char** environ;

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// One open watch on `target`; `Opened()` reads its first message (false: the stream ended, e.g.
// RESOURCE_EXHAUSTED, see `Finish()`).
struct Watch {
  explicit Watch(const std::string& target)
      : stub(Stub(target)) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    reader = stub->WatchInventory(&ctx, {});
  }
  ~Watch() {
    if (finished) return;
    ctx.TryCancel();
    (void)reader->Finish();
  }
  bool Opened() {
    v1::Inventory inv;
    return reader->Read(&inv);
  }
  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }

  std::unique_ptr<v1::DevicePlacement::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::Inventory>> reader;
  bool finished = false;
};

TEST(Watches, CappedPerDaemon) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--max_watches=2"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  Watch unix1(d.unix_target()), tcp1(d.tcp_target());
  ASSERT_TRUE(unix1.Opened());
  ASSERT_TRUE(tcp1.Opened());
  Watch tcp2(d.tcp_target());  // the daemon's cap
  EXPECT_FALSE(tcp2.Opened());
  const grpc::Status s = tcp2.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("--max_watches"));
}

// A peer is what the connection caps count by: a local user over the unix socket and over TCP
// alike (TCP watches used to count by address, so every local TCP client was one peer).
TEST(Watches, CappedPerPeerALocalUserOverTheUnixSocketAndTcpAlike) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--max_watches=10", "--max_watches_per_peer=2"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  Watch unix1(d.unix_target()), unix2(d.unix_target());
  ASSERT_TRUE(unix1.Opened());
  ASSERT_TRUE(unix2.Opened());
  for (const std::string& target : {d.unix_target(), d.tcp_target()}) {
    Watch third(target);  // this process's user holds its two
    EXPECT_FALSE(third.Opened()) << target;
    const grpc::Status s = third.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << target << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("--max_watches_per_peer"));
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("peer uid:", geteuid(), " ")));
  }
}

// Two local users over loopback TCP are two peers: one holding its cap does not lock the other out.
TEST(Watches, TwoLocalUsersOverTcpAreTwoPeers) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--max_watches=10", "--max_watches_per_peer=2"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  Watch mine1(d.tcp_target()), mine2(d.tcp_target());
  ASSERT_TRUE(mine1.Opened());
  ASSERT_TRUE(mine2.Opened());
  const std::string other = RunCommand(AsUser(kOtherUser, absl::StrCat("watch ", d.tcp_target(), " 3"))).out;
  EXPECT_EQ(Field(other, "opened"), 2) << other;
  EXPECT_THAT(other, HasSubstr(absl::StrCat("peer uid:", kOtherUser, " already has 2 watches"))) << other;
}

TEST(Watches, AFrozenUnixSocketClientIsDroppedByKeepalive) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--max_watches=1", "--keepalive_time=1s",
                               "--keepalive_timeout=1s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  // The frozen client: the devplace CLI watching over the unix socket.
  std::vector<std::string> args = {DEVPLACE_CLI_BINARY, "watch", "--address=" + d.unix_target()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string out = dir.File("watch.out");
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t client = -1;
  ASSERT_EQ(posix_spawn(&client, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Once the CLI printed the first snapshot its watch holds the only slot: another is refused.
  for (int i = 0; i < 100 && ReadFile(out).empty(); ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(ReadFile(out).empty()) << d.Log();
  {
    Watch probe(d.unix_target());
    EXPECT_FALSE(probe.Opened());
    EXPECT_EQ(probe.Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  ASSERT_EQ(kill(client, SIGSTOP), 0);
  const absl::Time frozen = absl::Now();
  // Keepalive (1 s + 1 s) drops the frozen client; its slot is free again well within 20 s.
  bool freed = false;
  while (!freed && absl::Now() - frozen < absl::Seconds(20)) {
    Watch probe(d.unix_target());
    freed = probe.Opened();
    if (!freed) absl::SleepFor(absl::Milliseconds(200));
  }
  const absl::Duration took = absl::Now() - frozen;
  kill(client, SIGKILL);
  kill(client, SIGCONT);
  waitpid(client, nullptr, 0);
  EXPECT_TRUE(freed) << "the frozen client's watch was still held after " << took << "\n" << d.Log();
  fprintf(stderr, "frozen client dropped after %s\n", absl::FormatDuration(took).c_str());
}

}  // namespace
}  // namespace devplace::testing
