// Bursts of valid costly calls from one local user on a loaded host (a CPU hog beside the daemon):
// the daemon's liveness self-checks may answer late, but a daemon that keeps answering calls is
// busy, not dead, so it stays up, and another user's ResolveDevice, PickDevices and LeaseRelease
// are answered throughout. The costly calls run each user's in turn with at most
// --max_queued_calls_per_peer queued or running per user: past it the burst's calls are refused;
// PickDevices calls share that queue until their first attempt (then a waiting pick leaves it).
// Real unprivileged users (setpriv) run tests/robustness/peer.py: needs root, skipped otherwise.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/robustness/peer_commands.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Two busy shell loops (one per core of the CI machine) until `stopfile` exists.
std::string CpuHogUntil(const std::string& stopfile) {
  return absl::StrCat("sh -c 'while :; do :; done' & a=$!; sh -c 'while :; do :; done' & b=$!; ",
                      "while [ ! -e ", ShellQuote(stopfile), " ]; do sleep 0.1; done; kill $a $b; wait");
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// devplaced on the 2-GPU fixture host with a liveness check every 500 ms (three failures in a row end it).
std::vector<std::string> BurstDaemonFlags(std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--socket_mode=0666",
                                    "--liveness_interval=500ms", "--liveness_failures=3"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// `nobody` sends 3 rounds of 100 ResolveDevice calls of ~748 KiB at once while the other user runs
// pick cycles and two busy loops take both cores, until the rounds end; each report printed.
std::vector<std::string> BurstsBesideAHog(const DaemonProcess& d, const TempDir& dir) {
  const std::string stopfile = dir.path() + "/bursts-done";
  std::vector<std::string> reports = RunTogether({
      AsUser(kFlooder, absl::StrCat("burst ", d.unix_target(), " 3 100 748")) + "; touch " + ShellQuote(stopfile),
      AsUser(kOtherUser, absl::StrCat("served ", d.unix_target(), " ", ShellQuote(stopfile))),
      CpuHogUntil(stopfile),
  });
  for (const std::string& r : reports) fprintf(stderr, "%s", r.c_str());
  return reports;
}

// One user sends rounds of 100 ResolveDevice calls at once, each with about 748 KiB of job
// environment, on a host whose two cores a CPU hog keeps busy, with a liveness check every 500 ms
// (500 ms to answer, three failures in a row end the daemon). The check's own call waits behind
// the burst and may time out; the daemon answers the burst's calls meanwhile, so such a check is
// busy and never counts. Another user's pick cycle (ResolveDevice, PickDevices, LeaseRelease, each
// on a fresh connection) runs until the bursts end: every call of it is answered OK.
TEST(Bursts, CostlyCallBurstsFromOneUserOnALoadedHostLeaveTheDaemonAliveAndAnotherUserServed) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // the socket's directory, for the unprivileged peers
  DaemonProcess d(dir.path(), BurstDaemonFlags({}));
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();

  const std::vector<std::string> reports = BurstsBesideAHog(d, dir);
  const std::string log = d.Log();
  fprintf(stderr, "liveness checks failed: %d (busy: %d)\n", Count(log, "event=liveness_check_failed"),
          Count(log, "error=\"busy: "));

  EXPECT_EQ(d.WaitExit(absl::ZeroDuration()), -1) << "devplaced exited: " << Tail(log);
  EXPECT_THAT(log, Not(HasSubstr("event=listener_dead"))) << Tail(log);
  // The bursts were served, not refused: 3 rounds of 100.
  EXPECT_EQ(Field(reports[0], "ok"), 300) << reports[0];
  // The other user: at least one whole cycle during the bursts, and no call of it failed.
  EXPECT_GT(Field(reports[1], "ok"), 0) << reports[1];
  EXPECT_EQ(Field(reports[1], "failed"), 0) << reports[1];
  EXPECT_TRUE(HealthServes(d.unix_target(), absl::Seconds(2)) && HealthServes(d.tcp_target(), absl::Seconds(2)));
}

// The same bursts against a daemon that lets one user have 2 costly calls queued or running: most
// of each round of 100 is refused at once with RESOURCE_EXHAUSTED naming the flag (before its
// request is parsed), the rest is answered, and the other user's cycles, one call at a time, are
// never refused and all answered.
TEST(Bursts, AUserPastItsQueuedCallsIsRefusedWhileAnotherUserIsServed) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  DaemonProcess d(dir.path(), BurstDaemonFlags({"--max_queued_calls_per_peer=2"}));
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();

  const std::vector<std::string> reports = BurstsBesideAHog(d, dir);

  EXPECT_EQ(d.WaitExit(absl::ZeroDuration()), -1) << "devplaced exited: " << Tail(d.Log());
  EXPECT_EQ(Field(reports[0], "ok") + Field(reports[0], "failed"), 300) << reports[0];
  EXPECT_GT(Field(reports[0], "ok"), 0) << reports[0];
  EXPECT_GT(Field(reports[0], "failed"), 0) << "no call of the burst was refused: " << reports[0];
  EXPECT_THAT(reports[0], HasSubstr("RESOURCE_EXHAUSTED: devplaced: 2 ResolveDevice and PickDevices calls of this peer "
                                    "(uid:65534) are queued or running, the most --max_queued_calls_per_peer allows"))
      << reports[0];
  EXPECT_THAT(reports[0], Not(HasSubstr("StatusCode.DEADLINE"))) << reports[0];
  EXPECT_GT(Field(reports[1], "ok"), 0) << reports[1];
  EXPECT_EQ(Field(reports[1], "failed"), 0) << reports[1];
}

// Waiting picks in bursts: root holds the GPU a job masked to CUDA_VISIBLE_DEVICES=0 sees, and
// `nobody` sends 3 rounds of 100 PickDevices calls at once for such a job (about 748 KiB of job
// environment each, waiting up to 2 s) on a daemon that lets one user have 2 costly calls queued or
// running. A pick's parse and first attempt are costly calls: most of each round is refused at once
// with RESOURCE_EXHAUSTED naming the flag, the rest wait and are refused after their wait (the GPU
// stays held), none is dropped or times out; the other user's cycles (its picks get the other GPU)
// are all answered, beside a CPU hog, and the daemon stays up.
TEST(Bursts, WaitingPickBurstsQueueAsCostlyCallsWhileAnotherUserIsServed) {
  SKIP_UNLESS_ROOT();
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  DaemonProcess d(dir.path(), BurstDaemonFlags({"--max_queued_calls_per_peer=2", "--max_waiting_picks_per_user=128"}));
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  v1::PickDevicesRequest hold;
  (*hold.mutable_job()->mutable_env())["CUDA_VISIBLE_DEVICES"] = "0";
  hold.set_holder(v1::LEASE_HOLDER_TTL);
  hold.set_ttl_ms(600'000);
  v1::PickDevicesResponse held;
  ASSERT_TRUE(Stub(d.unix_target())->PickDevices(Ctx().get(), hold, &held).ok());

  const std::string stopfile = dir.path() + "/bursts-done";
  const std::vector<std::string> reports = RunTogether({
      AsUser(kFlooder, absl::StrCat("pickburst ", d.unix_target(), " 3 100 748 2000")) + "; touch " +
          ShellQuote(stopfile),
      AsUser(kOtherUser, absl::StrCat("served ", d.unix_target(), " ", ShellQuote(stopfile))),
      CpuHogUntil(stopfile),
  });
  for (const std::string& r : reports) fprintf(stderr, "%s", r.c_str());

  EXPECT_EQ(d.WaitExit(absl::ZeroDuration()), -1) << "devplaced exited: " << Tail(d.Log());
  const std::string& burst = reports[0];
  EXPECT_EQ(Field(burst, "ok"), 0) << burst;
  EXPECT_EQ(Field(burst, "RESOURCE_EXHAUSTED") + Field(burst, "FAILED_PRECONDITION"), 300) << burst;
  EXPECT_GT(Field(burst, "RESOURCE_EXHAUSTED"), 0) << "no pick of the burst was refused: " << burst;
  EXPECT_GT(Field(burst, "FAILED_PRECONDITION"), 0) << "no pick of the burst waited: " << burst;
  EXPECT_THAT(burst, HasSubstr("RESOURCE_EXHAUSTED: devplaced: 2 ResolveDevice and PickDevices calls of this peer "
                               "(uid:65534) are queued or running, the most --max_queued_calls_per_peer allows"));
  EXPECT_THAT(burst, HasSubstr("FAILED_PRECONDITION: waited ")) << burst;
  EXPECT_GT(Field(reports[1], "ok"), 0) << reports[1];
  EXPECT_EQ(Field(reports[1], "failed"), 0) << reports[1];
}

}  // namespace
}  // namespace devplace::testing
