#include "server/inventory/xid_watcher.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/common/xid_lines.h"
#include "server/inventory/probe_runner.h"

namespace devplace::inventory {
namespace {

// How often the reading thread looks at stopping_ while the child is quiet.
constexpr int kPollMs = 200;
// Lines of a child that are not watcher lines (its stderr) logged per child; the rest are dropped.
constexpr int kMaxOtherLines = 10;

std::string HowItEnded(const std::optional<int>& status) {
  if (!status.has_value()) return "not reaped";
  if (WIFEXITED(*status)) return absl::StrCat("exit status ", WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return absl::StrCat("killed by signal ", WTERMSIG(*status));
  return "ended";
}

}  // namespace

XidWatcher::XidWatcher(XidWatcherOptions options) : options_(std::move(options)) {}

XidWatcher::~XidWatcher() { Stop(); }

void XidWatcher::Start() {
  absl::MutexLock lock(&thread_mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void XidWatcher::Stop() {
  absl::MutexLock lock(&thread_mu_);
  {
    absl::MutexLock state_lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

XidWatcherState XidWatcher::State() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void XidWatcher::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void XidWatcher::Loop() {
  absl::Duration backoff = options_.min_backoff;
  for (int started = 0;; ++started) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      state_.restarts = started;
    }
    const absl::Time start = absl::Now();
    bool untold = false;  // a new count the child's end cut off before on_change told it
    const std::string ended = RunChild(untold);
    absl::Duration wait;
    bool unknown = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (absl::Now() - start >= options_.max_backoff) backoff = options_.min_backoff;
      unknown = state_.phase == XidWatcherState::Phase::kUnknown;
      wait = unknown ? options_.max_backoff : backoff;
      if (!unknown) {
        backoff = std::min(backoff * 2, options_.max_backoff);
        state_.phase = XidWatcherState::Phase::kRestarting;
        state_.status = absl::StrCat("exited (", ended, "): starting again in ", absl::FormatDuration(wait));
      }
      state_.pid = -1;
    }
    // A child that said "unknown" ends at once and is tried again every max_backoff: its end is no
    // news (the "unknown" was logged once) and is not logged each time.
    if (!unknown) {
      Log(absl::StrCat("event=xid_watcher_exited how=\"", ended, "\" restart_in_ms=", absl::ToInt64Milliseconds(wait)));
    }
    if (untold && options_.on_change) options_.on_change();
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
  }
}

std::string XidWatcher::RunChild(bool& untold) {
  absl::StatusOr<StreamingChild> started = StartStreamingChild(options_.argv);
  if (!started.ok()) return std::string(started.status().message());
  StreamingChild child = *started;
  int restarts = 0;
  bool unknown = false;
  {
    absl::MutexLock lock(&mu_);
    state_.pid = child.pid;
    if (state_.phase != XidWatcherState::Phase::kUnknown) {
      state_.phase = XidWatcherState::Phase::kStarting;
      state_.status = absl::StrCat("starting (pid ", child.pid, ")");
    }
    restarts = state_.restarts;
    unknown = state_.phase == XidWatcherState::Phase::kUnknown;
  }
  if (restarts > 0 && !unknown) Log(absl::StrCat("event=xid_watcher_restarted pid=", child.pid, " restarts=", restarts));
  std::string pending;
  bool discarding = false;  // inside a line longer than kXidLineMaxBytes
  int other_lines = 0;
  char buffer[4096];
  bool changed = false;  // a new count since on_change was last called
  absl::Time told = absl::InfinitePast();  // when the last on_change returned
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    const absl::Time now = absl::Now();
    if (changed && now - told >= options_.min_change_interval) {
      changed = false;
      if (options_.on_change) options_.on_change();
      told = absl::Now();
      continue;
    }
    const int wait_ms = changed ? static_cast<int>(std::clamp<int64_t>(
                                      absl::ToInt64Milliseconds(told + options_.min_change_interval - now) + 1, 0, kPollMs))
                                : kPollMs;
    pollfd fd = {child.output, POLLIN, 0};
    const int ready = poll(&fd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(child.output, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // end of file: the child (and anything it started) is gone; Loop tells
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t newline; (newline = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      // The tail of a line cut by the bound, or a line past it: dropped, never parsed.
      if (std::exchange(discarding, false) || line.size() >= kXidLineMaxBytes) continue;
      if (!Handle(line, changed) && ++other_lines <= kMaxOtherLines) {
        Log(absl::StrCat("event=xid_watcher_output line=\"", absl::CHexEscape(line.substr(0, kXidLineMaxBytes)), "\""));
      }
    }
    if (pending.size() >= kXidLineMaxBytes) {
      pending.clear();
      discarding = true;
    }
  }
  untold = changed;
  return HowItEnded(EndStreamingChild(child));
}

bool XidWatcher::Handle(absl::string_view text, bool& changed) {
  const std::optional<XidLine> line = ParseXidLine(text);
  if (!line.has_value()) return false;
  std::string log;
  changed |= Apply(*line, log);
  if (!log.empty()) Log(log);  // outside the lock: the log may take locks of its own
  return true;
}

bool XidWatcher::Apply(const XidLine& line, std::string& log) {
  absl::MutexLock lock(&mu_);
  switch (line.kind) {
    case XidLine::Kind::kWatching:
      state_.phase = XidWatcherState::Phase::kWatching;
      state_.status = absl::StrCat("watching ", line.gpus, " of ", line.gpus_total,
                                   " GPUs (devplace-probe --watch_xid pid ", state_.pid, ", started ", state_.restarts,
                                   " time(s) again)");
      unknown_said_.clear();
      log = absl::StrCat("event=xid_watcher_watching gpus=", line.gpus, " of=", line.gpus_total, " pid=", state_.pid);
      return false;
    case XidLine::Kind::kXid: {
      log = absl::StrCat("event=xid pci_bus_id=", line.bus_id, " xid=", line.xid);
      auto gpu = state_.xids.find(line.bus_id);
      if (gpu == state_.xids.end() && state_.xids.size() < kXidMaxGpus) {
        gpu = state_.xids.emplace(line.bus_id, std::map<uint64_t, XidCount>()).first;
      }
      if (gpu == state_.xids.end() || (gpu->second.count(line.xid) == 0 && gpu->second.size() >= kXidMaxPerGpu)) {
        ++state_.dropped;
        return false;  // counted in the report only: no counter changed
      }
      XidCount& count = gpu->second[line.xid];
      ++count.count;
      count.last = absl::FromUnixSeconds(line.unix_seconds);
      return true;
    }
    case XidLine::Kind::kUnknown:
      state_.phase = XidWatcherState::Phase::kUnknown;
      state_.status = absl::StrCat("unknown: ", line.text, " (tried again every ",
                                   absl::FormatDuration(options_.max_backoff), ")");
      if (unknown_said_ != line.text) {  // said once, not at every try
        unknown_said_ = line.text;
        log = absl::StrCat("event=xid_watcher_unknown why=\"", absl::CHexEscape(line.text), "\"");
      }
      return false;
    case XidLine::Kind::kError:
      log = absl::StrCat("event=xid_watcher_error error=\"", absl::CHexEscape(line.text), "\"");
      return false;
  }
  return false;
}

}  // namespace devplace::inventory
