// The Daemon's XID watcher (docs/PROBE.md "XID critical errors"): devplace-probe --watch_xid as a
// long-lived child when NVML is read (--nvml_library not empty), its counts added to every
// inventory the store publishes, and a republish when they change.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/daemon/daemon.h"
#include "server/placement/xid_health.h"
#include "spdlog/spdlog.h"

namespace devplace::daemon {

void Daemon::BuildXidWatcher(const std::string& probe_program) {
  const std::string& nvml = config_.config.vendor_libraries.nvml_library;
  if (nvml.empty()) return;
  inventory::XidWatcherOptions options;
  options.argv = {probe_program, "--watch_xid", absl::StrCat("--nvml_library=", nvml)};
  // A new XID count: the next inventory says so (a probe run, at most one per second: counts that
  // arrive meanwhile come with the next; XidWatcherOptions). The watcher watching, unknown or gone
  // runs no probe: its report is telemetry and shows in the next inventory a probe run publishes.
  options.on_change = [this] {
    if (stopping_.load() || store_ == nullptr) return;
    spdlog::info("event=refresh kind=xid");
    const absl::StatusOr<inventory::Snapshot> published = store_->Refresh();
    if (!published.ok()) spdlog::warn("event=xid_refresh_failed error=\"{}\"", std::string(published.status().message()));
  };
  options.log = [](const std::string& line) { spdlog::info("{}", line); };
  xid_ = std::make_unique<inventory::XidWatcher>(std::move(options));
}

void Daemon::AddXidWatch(const inventory::XidWatcher& watcher, v1::Inventory& fresh) {
  const inventory::XidWatcherState state = watcher.State();
  std::vector<placement::XidReading> readings;
  for (const auto& [bus_id, xids] : state.xids) {
    for (const auto& [xid, count] : xids) readings.push_back({bus_id, xid, count.count, count.last});
  }
  placement::ApplyXidReadings(readings, fresh);
  v1::ProbeReport& report = *fresh.add_probe_reports();
  report.set_name(inventory::kXidWatcherReport);
  using Phase = inventory::XidWatcherState::Phase;
  report.set_status(state.phase == Phase::kWatching  ? v1::PROBE_STATUS_OK
                    : state.phase == Phase::kUnknown ? v1::PROBE_STATUS_SKIPPED
                    : state.phase == Phase::kStarting ? v1::PROBE_STATUS_OK
                                                      : v1::PROBE_STATUS_ERROR);
  report.set_message(absl::StrCat(
      state.status, state.dropped > 0 ? absl::StrCat("; ", state.dropped, " XID event(s) past the table's bound") : ""));
}

}  // namespace devplace::daemon
