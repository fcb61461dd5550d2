// XidWatcher: devplaced's XID watcher (docs/PROBE.md "XID critical errors"). It runs
// `devplace-probe --watch_xid` as a long-lived child (StartStreamingChild: NVML never runs in the
// daemon, so a crash or a hang inside it costs only the child), reads its lines
// (server/common/xid_lines.h) on a thread of its own, and keeps, per GPU, how often each XID was
// reported since the daemon started. A child that exits is started again after a backoff: 1 s,
// doubling to 60 s, back to 1 s after a child that ran 60 s; 60 s at once after a child that said
// nothing can be watched ("unknown": the library lacks the calls, no driver, no GPU offers the
// event), so a driver loaded later is found. Each start after the first is counted, and logged
// unless the last child said "unknown" (the reason is logged once, not every 60 s).
#ifndef DEVPLACE_SERVER_INVENTORY_XID_WATCHER_H_
#define DEVPLACE_SERVER_INVENTORY_XID_WATCHER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/common/xid_lines.h"

namespace devplace::inventory {

// The table's bounds: XIDs of at most kXidMaxGpus GPUs, at most kXidMaxPerGpu distinct XIDs each
// (NVIDIA's catalogue has about 150); an event past them is counted in `dropped` only.
inline constexpr size_t kXidMaxGpus = 64;
inline constexpr size_t kXidMaxPerGpu = 32;

struct XidCount {
  uint64_t count = 0;
  absl::Time last;  // when the watcher saw the latest
};

struct XidWatcherState {
  enum class Phase { kStarting, kWatching, kUnknown, kRestarting };
  Phase phase = Phase::kStarting;
  // The phase in words: "watching 2 of 2 GPUs (devplace-probe --watch_xid pid 123, started 1
  // time(s) again)", "unknown: <why>", "exited (<how>): starting again in 2s".
  std::string status;
  pid_t pid = -1;    // the running child, -1 when none
  int restarts = 0;  // children started after the first
  // By canonical PCI bus id, then XID.
  std::map<std::string, std::map<uint64_t, XidCount>> xids;
  uint64_t dropped = 0;
};

struct XidWatcherOptions {
  // The child, e.g. {"/usr/lib/devplace/devplace-probe", "--watch_xid", "--nvml_library=..."}.
  std::vector<std::string> argv;
  // Called after a new XID count (a counter of `xids` rose: the inventory's content changes), on
  // the watcher's thread, outside its lock; lines that arrive meanwhile wait in the pipe. devplaced
  // republishes the inventory from it (a probe run). The phase (starting, watching, unknown, gone)
  // and `dropped` are not told: they are telemetry, which the next probe run's inventory shows.
  // New counts while the child runs are told at most once per
  // min_change_interval, counted from the end of the previous call: those that arrive meanwhile
  // are read into the state at once and told together by the next call, at the latest when the
  // interval has passed (or, when the child ends first, by the call that its end makes), so an XID
  // storm costs at most one call per interval and no count is lost.
  std::function<void()> on_change;
  absl::Duration min_change_interval = absl::Seconds(1);
  // One log line ("event=xid_watcher_... ..."), on the watcher's thread.
  std::function<void(const std::string&)> log;
  absl::Duration min_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(60);
};

// Thread-safe.
class XidWatcher {
 public:
  explicit XidWatcher(XidWatcherOptions options);
  ~XidWatcher();  // Stop()
  XidWatcher(const XidWatcher&) = delete;
  XidWatcher& operator=(const XidWatcher&) = delete;

  // Starts the thread (once).
  void Start();
  // Kills the child and joins the thread; returns within about 200 ms plus an on_change in progress.
  void Stop();
  XidWatcherState State() const;

 private:
  void Loop();
  // Runs one child until it ends or Stop(); how it ended, in words. `untold`: whether a new count
  // came after the last on_change (Loop tells it).
  std::string RunChild(bool& untold);
  // Applies one line of the child: false when it is not a watcher line; sets `changed` on a new
  // count.
  bool Handle(absl::string_view line, bool& changed);
  // Handle's update of the state, under the lock; the line to log, if any, in `log`. True when a
  // count rose.
  bool Apply(const XidLine& line, std::string& log);
  void Log(const std::string& line) const;

  const XidWatcherOptions options_;
  mutable absl::Mutex mu_;
  XidWatcherState state_ ABSL_GUARDED_BY(mu_);
  std::string unknown_said_ ABSL_GUARDED_BY(mu_);  // the last "unknown" logged
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex thread_mu_;
  std::thread thread_ ABSL_GUARDED_BY(thread_mu_);
};

}  // namespace devplace::inventory

#endif  // DEVPLACE_SERVER_INVENTORY_XID_WATCHER_H_
