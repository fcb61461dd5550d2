// devplaced's XID watcher (server/inventory/xid_watcher.h) with real children: shell scripts that
// write the watcher's lines, exit, or never end. The table's bounds, the restart with backoff, the
// "unknown" said once, Stop() ending a child that never exits; and its report, which changes no
// revision (SameContent).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/inventory/store.h"
#include "server/inventory/xid_watcher.h"

namespace devplace::testing {
namespace {

using inventory::SameContent;
using inventory::XidWatcher;
using inventory::XidWatcherState;

// A watcher of `script` (sh -c) that records its log lines and is told of each change.
class Watched {
 public:
  explicit Watched(const std::string& script, absl::Duration max_backoff = absl::Milliseconds(40)) {
    inventory::XidWatcherOptions options;
    options.argv = {"/bin/sh", "-c", script};
    options.min_backoff = absl::Milliseconds(10);
    options.max_backoff = max_backoff;
    options.on_change = [this] {
      absl::MutexLock lock(&mu_);
      ++changes_;
    };
    options.log = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      log_.push_back(line);
    };
    watcher_ = std::make_unique<XidWatcher>(options);
    watcher_->Start();
  }

  // Waits until `done` holds for the watcher's state: re-checked at each call of on_change or log,
  // and every 20 ms (a child's quiet restart calls neither), for at most 60 s.
  bool WaitFor(const std::function<bool(const XidWatcherState&)>& done) {
    absl::MutexLock lock(&mu_);
    const auto check = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done(watcher_->State()); };
    for (const absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
      if (mu_.AwaitWithTimeout(absl::Condition(&check), absl::Milliseconds(20))) return true;
    }
    return false;
  }

  // Waits until a log line starts with `prefix`.
  bool WaitForLog(const std::string& prefix) {
    absl::MutexLock lock(&mu_);
    const auto logged = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const std::string& line : log_) {
        if (line.rfind(prefix, 0) == 0) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&logged), absl::Seconds(60));
  }

  int LogLines(const std::string& prefix) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const std::string& line : log_) n += line.rfind(prefix, 0) == 0;
    return n;
  }

  int changes() {
    absl::MutexLock lock(&mu_);
    return changes_;
  }

  XidWatcher& watcher() { return *watcher_; }

 private:
  absl::Mutex mu_;
  int changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<XidWatcher> watcher_;
};

TEST(XidWatcherTest, TheTableIsBoundedAndALineTooLongIsDroppedAlone) {
  // 70 GPUs with XID 79, then 40 distinct XIDs on the first, a line of 300 bytes, and XID 79 on the
  // first again.
  Watched w(
      "echo watching 70 70; i=1; while [ $i -le 70 ]; do printf 'xid 0000:%02x:00.0 79 5\\n' $i; i=$((i+1)); done; "
      "i=100; while [ $i -lt 140 ]; do echo xid 0000:01:00.0 $i 5; i=$((i+1)); done; "
      "printf 'x%.0s' $(seq 300); echo; echo xid 0000:01:00.0 79 7; echo end; exec sleep 1000");
  ASSERT_TRUE(w.WaitFor([](const XidWatcherState& s) {
    const auto gpu = s.xids.find("0000:01:00.0");
    return gpu != s.xids.end() && gpu->second.count(79) > 0 && gpu->second.at(79).count == 2;
  }));
  // "end", the last line, is not a watcher line: logged (the long line before it is not).
  ASSERT_TRUE(w.WaitForLog("event=xid_watcher_output line=\"end\""));
  const XidWatcherState s = w.watcher().State();
  EXPECT_EQ(s.xids.size(), inventory::kXidMaxGpus);
  EXPECT_EQ(s.xids.at("0000:01:00.0").size(), inventory::kXidMaxPerGpu);
  EXPECT_EQ(s.xids.at("0000:01:00.0").at(79).last, absl::FromUnixSeconds(7));
  EXPECT_EQ(s.dropped, (70 - inventory::kXidMaxGpus) + (40 + 1 - inventory::kXidMaxPerGpu));
  EXPECT_EQ(s.phase, XidWatcherState::Phase::kWatching);
  EXPECT_THAT(s.status, ::testing::StartsWith("watching 70 of 70 GPUs (devplace-probe --watch_xid pid "));
  EXPECT_EQ(w.LogLines("event=xid_watcher_output"), 1);
}

TEST(XidWatcherTest, AChildThatExitsIsStartedAgainAndTheCountsStay) {
  Watched w("echo watching 1 1; echo xid 0000:9a:00.0 79 5; exit 3");
  ASSERT_TRUE(w.WaitFor([](const XidWatcherState& s) { return s.restarts >= 3; }));
  EXPECT_GE(w.LogLines("event=xid_watcher_exited how=\"exit status 3\""), 2);
  EXPECT_GE(w.LogLines("event=xid_watcher_restarted pid="), 2);
  // Every child reported the XID again: the table counts each report, and each new count is told.
  EXPECT_GE(w.watcher().State().xids.at("0000:9a:00.0").at(79).count, 3u);
  EXPECT_GE(w.changes(), 1);
}

// Watching, unknown, an error line, an exit: the phase only, which the next probe run shows; no
// count rose, so on_change (devplaced's probe run) is never called.
TEST(XidWatcherTest, OnlyANewCountIsToldThePhaseIsNot) {
  Watched w("echo watching 1 1; echo error nvmlEventSetWait_v2 failed; exit 3");
  ASSERT_TRUE(w.WaitFor([](const XidWatcherState& s) { return s.restarts >= 3; }));
  ASSERT_TRUE(w.WaitForLog("event=xid_watcher_exited how=\"exit status 3\""));
  EXPECT_EQ(w.changes(), 0);
  Watched unknown("echo unknown nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED; exit 0", absl::Milliseconds(20));
  ASSERT_TRUE(unknown.WaitFor([](const XidWatcherState& s) { return s.restarts >= 3; }));
  EXPECT_EQ(unknown.changes(), 0);
  // A child that said unknown is tried again without an exit or restart line each time.
  EXPECT_EQ(unknown.LogLines("event=xid_watcher_exited"), 0);
  EXPECT_EQ(unknown.LogLines("event=xid_watcher_restarted"), 0);
}

TEST(XidWatcherTest, UnknownIsSaidOnceAndTriedAgainAtTheLongestBackoff) {
  Watched w("echo unknown the library lacks nvmlEventSetWait_v2; exit 0", absl::Milliseconds(20));
  ASSERT_TRUE(w.WaitFor([](const XidWatcherState& s) { return s.restarts >= 3; }));
  EXPECT_EQ(w.LogLines("event=xid_watcher_unknown"), 1);
  const XidWatcherState s = w.watcher().State();
  EXPECT_EQ(s.phase, XidWatcherState::Phase::kUnknown);
  EXPECT_THAT(s.status, ::testing::StartsWith("unknown: the library lacks nvmlEventSetWait_v2 (tried again every"));
  EXPECT_TRUE(s.xids.empty());
}

TEST(XidWatcherTest, StopEndsAChildThatNeverExits) {
  Watched w("echo watching 1 1; exec sleep 1000");
  ASSERT_TRUE(w.WaitFor([](const XidWatcherState& s) { return s.phase == XidWatcherState::Phase::kWatching; }));
  const pid_t pid = w.watcher().State().pid;
  ASSERT_GT(pid, 0);
  w.watcher().Stop();
  EXPECT_EQ(kill(pid, 0), -1);  // killed and reaped
}

TEST(SameContentTest, TheXidWatchersReportIsTelemetryItsCountersAreContent) {
  v1::Inventory a;
  v1::ProbeReport& report = *a.add_probe_reports();
  report.set_name(inventory::kXidWatcherReport);
  report.set_status(v1::PROBE_STATUS_OK);
  report.set_message("starting (pid 10)");
  a.add_backends()->add_devices()->set_pci_bus_id("0000:9a:00.0");
  v1::Inventory b = a;
  b.mutable_probe_reports(0)->set_status(v1::PROBE_STATUS_SKIPPED);
  b.mutable_probe_reports(0)->set_message("unknown: nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)");
  EXPECT_TRUE(SameContent(a, b));
  b.mutable_backends(0)->mutable_devices(0)->add_health_counters()->set_name("xid.79");
  EXPECT_FALSE(SameContent(a, b));
  b = a;
  b.mutable_probe_reports(0)->set_name("nvml");  // another report's message stays content
  a.mutable_probe_reports(0)->set_name("nvml");
  b.mutable_probe_reports(0)->set_message("watching");
  EXPECT_FALSE(SameContent(a, b));
}

}  // namespace
}  // namespace devplace::testing
