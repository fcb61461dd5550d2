// A refresh storm on a busy node: devplaced on the nvidia-2x-h100 fixture with
// --refresh_min_interval=0s, SIGHUP far faster than refreshes can run, and shell loops starting
// and reaping short-lived processes (8 x `sleep 0.01` in the background, then `wait`, over and
// over). After every probe the daemon sweeps /proc for escaped probe processes, reading
// /proc/<pid>/stat of every process; one that ends between open and read fails the read with
// ESRCH. Read through std::istreambuf_iterator, libstdc++ threw std::ios_base::failure and the
// daemon aborted (on a loaded 2-core machine: after 69 to 188 refreshes with the one loop,
// 18 to 67 in this test); through ReadHostFile (server/common/host_file.h) the process is skipped. The test asserts at least 500 refreshes
// with the daemon alive and every ResolveDevice call answered meanwhile.
//
// The probe command is a script that writes the real devplace-probe's inventory of the fixture
// (run once first): the sweep runs after every probe whatever the command, and a probe of
// milliseconds lets 500 refreshes fit in seconds rather than the minutes the real probe needs
// on a loaded machine.
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

extern char** environ;

namespace devplace::testing {
namespace {

constexpr int kRefreshes = 500;
// The test runs until the 500th refresh, however long the machine takes (about 10 s on an idle
// 2-core machine; 229 in 150 s were seen with the machine loaded eight times over): this is only
// the guard for a daemon that stops refreshing (its binary's ctest timeout is above it).
constexpr absl::Duration kBudget = absl::Seconds(600);

// `/bin/sh -c script` in a process group of its own, killed with everything it started when this
// goes away.
class Churn {
 public:
  explicit Churn(const std::string& script) {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, &attr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attr);
  }
  ~Churn() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Churn(const Churn&) = delete;
  Churn& operator=(const Churn&) = delete;
  bool ok() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

TEST(RefreshChurn, FiveHundredRefreshesUnderProcessChurnLeaveTheDaemonAliveAndAnswering) {
  TempDir dir;
  const std::string host = FixtureHost("nvidia-2x-h100");
  const std::string inventory = dir.File("inventory.pb");
  const CommandResult probed =
      RunCommand(absl::StrCat(ShellQuote(DEVPLACE_PROBE_BINARY), " --host_root=", ShellQuote(host), " > ",
                              ShellQuote(inventory)));
  ASSERT_EQ(probed.exit_code, 0) << probed.err;
  const std::string probe = dir.Script("probe", "exec cat " + ShellQuote(inventory)).back();
  DaemonProcess d(dir.path(), {"--host_root=" + host, "--probe_command=" + probe, "--refresh_min_interval=0s",
                               "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();

  // The loop, four at once, so the race comes sooner.
  std::vector<std::unique_ptr<Churn>> churn;
  for (int i = 0; i < 4; ++i) {
    churn.push_back(std::make_unique<Churn>("while :; do for i in 1 2 3 4 5 6 7 8; do sleep 0.01 & done; wait; done"));
    ASSERT_TRUE(churn.back()->ok());
  }

  // A caller throughout: every call must be answered (cuda:0 on this host), none may fail.
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::atomic<int64_t> slowest_ms{0};
  std::string first_failure;
  std::thread caller([&] {
    auto stub = Stub(d.unix_target());
    v1::ResolveDeviceRequest request;
    request.set_workload(v1::WORKLOAD_INFERENCE);
    request.set_device_map("auto");  // from_pretrained(device_map="auto"), every host device visible
    while (!stop) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::ResolveDeviceResponse response;
      const absl::Time start = absl::Now();
      const grpc::Status s = stub->ResolveDevice(&ctx, request, &response);
      slowest_ms = std::max<int64_t>(slowest_ms, absl::ToInt64Milliseconds(absl::Now() - start));
      if (s.ok() && response.device() == "cuda:0") {
        ++answered;
      } else if (++failed == 1) {
        first_failure = s.ok() ? "answered " + response.device() : s.error_message();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });

  // SIGHUP every 10 ms (pending ones coalesce, so a refresh is always waiting) until 500 more
  // probes have finished.
  const std::string probed_line = "event=probe result=ok";
  const int before = Count(d.Log(), probed_line);
  const absl::Time start = absl::Now();
  int refreshes = 0;
  bool alive = true;
  for (int i = 0; refreshes < kRefreshes && absl::Now() - start < kBudget; ++i) {
    d.Signal(SIGHUP);
    absl::SleepFor(absl::Milliseconds(10));
    if (i % 50 == 0) {
      if (d.WaitExit(absl::Milliseconds(1)) != -1) {
        alive = false;
        break;
      }
      refreshes = Count(d.Log(), probed_line) - before;
    }
  }
  const absl::Duration took = absl::Now() - start;
  churn.clear();
  stop = true;
  caller.join();
  if (alive) alive = d.WaitExit(absl::Milliseconds(1)) == -1;
  fprintf(stderr, "%d refreshes in %s under churn; %d calls answered (slowest %lld ms), %d failed; daemon %s\n",
          refreshes, absl::FormatDuration(took).c_str(), answered.load(), static_cast<long long>(slowest_ms.load()),
          failed.load(), alive ? "alive" : "dead");
  ASSERT_TRUE(alive) << "devplaced died after " << refreshes << " refreshes; log tail:\n" << Tail(d.Log());
  EXPECT_GE(refreshes, kRefreshes) << "only " << refreshes << " refreshes in " << kBudget;
  EXPECT_EQ(failed, 0) << "first failure: " << first_failure;
  EXPECT_GT(answered, 0);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(20)), 0) << Tail(d.Log());
}

}  // namespace
}  // namespace devplace::testing
