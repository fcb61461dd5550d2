// The daemon's edges: configuration mistakes are refused before anything starts, a second daemon
// cannot take over the first one's addresses, refresh storms do not multiply threads, and SIGTERM
// stops accepting at once.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

CommandResult Daemon(const std::string& flags) {
  return RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " ", flags));
}

int Threads(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(Robustness, BadConfigurationIsAUsageErrorNamingTheFlag) {
  TempDir dir;
  const std::string ok_listen = "--listen=unix:" + dir.File("s.sock") + " --host_root=" + ShellQuote(FixtureHost("cpu-only"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--listen=, --host_root=" + ShellQuote(FixtureHost("cpu-only")), "--listen names no address"},
      {"--listen=127.0.0.1:99999 --host_root=" + ShellQuote(FixtureHost("cpu-only")), "--listen: '127.0.0.1:99999'"},
      {"--listen=garbage --host_root=" + ShellQuote(FixtureHost("cpu-only")), "--listen: 'garbage'"},
      {ok_listen + " --probe_timeout=0s", "--probe_timeout must be at least 200ms"},
      {ok_listen + " --probe_timeout=100ms", "--probe_timeout must be at least 200ms"},
      {ok_listen + " --refresh_interval=-5s", "--refresh_interval"},
      {ok_listen + " --socket_mode=999", "--socket_mode"},
      {ok_listen + " --socket_group=no-such-group-here", "--socket_group"},
      {"--listen=unix:" + dir.File("s.sock") + " --host_root=/no/such/dir", "--host_root=/no/such/dir"},
      {ok_listen + " --probe_command=/no/such/probe", "--probe_command"},
      {ok_listen + " stray", "unexpected argument 'stray'"},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    const CommandResult r = Daemon(flags);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.out + r.err, HasSubstr(words));
  }
}

TEST(Robustness, ASecondDaemonCannotTakeOverTheAddresses) {
  TempDir dir;
  DaemonProcess first(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
  // Same unix socket: refused while the first daemon accepts on it; with the same flags it would
  // share the first one's lease file (beside the socket), whose lock refuses it first, naming the
  // first one's pid.
  CommandResult second = Daemon("--listen=" + first.unix_target() + " --host_root=" + ShellQuote(FixtureHost("cpu-only")));
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_THAT(second.err, HasSubstr(absl::StrCat("is in use by another devplaced (pid ", first.pid(), ", ")));
  second = Daemon("--listen=" + first.unix_target() + " --lease_state_file=none --host_root=" +
                  ShellQuote(FixtureHost("cpu-only")));
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_THAT(second.out + second.err, HasSubstr("another process is serving on this socket"));
  // Same TCP port: refused (no SO_REUSEPORT sharing).
  second = Daemon("--listen=" + first.tcp_target() + " --host_root=" + ShellQuote(FixtureHost("cpu-only")));
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_THAT(second.out + second.err, HasSubstr("event=listen_failed"));
  // The first daemon still has its socket and answers on it.
  auto stub = Stub(first.unix_target());
  grpc::ClientContext ctx;
  v1::ListBackendsResponse backends;
  EXPECT_TRUE(stub->ListBackends(&ctx, {}, &backends).ok());
  first.Signal(SIGTERM);
  EXPECT_EQ(first.WaitExit(absl::Seconds(10)), 0);
}

TEST(Robustness, ARefreshStormIsServedByOneWorkerThread) {
  TempDir dir;
  const std::string slow = dir.Script("slow-probe", absl::StrCat("sleep 0.3\nexec ", ShellQuote(DEVPLACE_PROBE_BINARY), " \"$@\"")).back();
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--probe_command=" + slow, "--refresh_interval=0s",
                               "--refresh_min_interval=0"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  const int before = Threads(d.pid());
  auto channel = grpc::CreateChannel(d.unix_target(), grpc::InsecureChannelCredentials());
  auto stub = v1::DevicePlacement::NewStub(channel);
  constexpr int kCalls = 60;
  std::vector<std::thread> callers;
  std::vector<grpc::Status> statuses(kCalls);
  int peak = before;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::Inventory inv;
      statuses[i] = stub->RefreshInventory(&ctx, {}, &inv);
    });
  }
  for (int i = 0; i < 20; ++i) {
    peak = std::max(peak, Threads(d.pid()));
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (std::thread& t : callers) t.join();
  for (const grpc::Status& s : statuses) EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_LT(peak, before + 10) << "threads before " << before << ", peak " << peak;
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(Robustness, SigtermStopsAcceptingWhileAProbeIsStillRunning) {
  TempDir dir;
  const std::string probe = dir.Script(
      "slow-second-probe", absl::StrCat(OtherRunsExec(DEVPLACE_PROBE_BINARY), "if [ -e ", dir.File("ran"), " ]; then sleep 3; fi\ntouch ", dir.File("ran"),
                                        "\nexec ", ShellQuote(DEVPLACE_PROBE_BINARY), " \"$@\"")).back();
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--probe_command=" + probe,
                               "--refresh_interval=0s", "--shutdown_grace=5s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  auto stub = Stub(d.unix_target());
  grpc::Status refresh;
  std::thread slow([&] {
    grpc::ClientContext ctx;
    v1::Inventory inv;
    refresh = stub->RefreshInventory(&ctx, {}, &inv);
  });
  absl::SleepFor(absl::Milliseconds(300));
  d.Signal(SIGTERM);
  ASSERT_TRUE(d.WaitForLog("event=shutdown", absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(300));
  // A new connection is refused while the refresh in flight still waits on its probe.
  auto fresh = Stub(d.tcp_target());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::ListBackendsResponse backends;
  const grpc::Status late = fresh->ListBackends(&ctx, {}, &backends);
  EXPECT_FALSE(late.ok()) << "a call accepted after SIGTERM";
  slow.join();
  EXPECT_TRUE(refresh.ok()) << "the call in flight finishes: " << refresh.error_message();
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(Robustness, AHungTorchProbeNeitherBlocksServingNorShutdown) {
  TempDir dir;
  const std::string hang = dir.Script("torch-hang", "sleep 1000").back();
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--torch_probe_command=" + hang,
                               "--probe_timeout=30s", "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());  // serving while the libtorch probe hangs
  EXPECT_FALSE(inv.torch().probed());
  grpc::Status queued;
  std::thread refresh([&] {  // queued behind the hung full refresh
    grpc::ClientContext rctx;
    v1::Inventory out;
    queued = stub->RefreshInventory(&rctx, {}, &out);
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the hung libtorch probe is killed, not waited for";
  refresh.join();
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::UNAVAILABLE) << queued.error_message();
  const std::string log = d.Log();
  EXPECT_EQ(log.find("event=probe", log.find("event=stopped")), std::string::npos) << "no probe after stopping";
}

TEST(Robustness, ResolveAgainstAFileThatIsNotAnInventoryIsRefusedOnOneLine) {
  TempDir dir;
  for (const auto& [content, words] : std::vector<std::pair<std::string, std::string>>{
           {"{}", "not a devplace inventory (no cpu row)"},
           {"\x01\x02", "not an inventory"},
           {"{\"backends\": [\n oops", "not an inventory"}}) {
    const std::string file = dir.Write("inv", content);
    const CommandResult r =
        RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " resolve --workload=training --inventory=", file));
    EXPECT_EQ(r.exit_code, 2) << r.err;  // the caller's input: a usage error
    EXPECT_THAT(r.err, HasSubstr(words));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const CommandResult d = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " resolve --workload=training --inventory=", dir.path()));
  EXPECT_THAT(d.err, HasSubstr("is a directory"));
}

}  // namespace
}  // namespace devplace::testing
