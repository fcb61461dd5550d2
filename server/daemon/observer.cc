#include "server/daemon/observer.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "spdlog/spdlog.h"

namespace devplace::daemon {

DaemonObserver::DaemonObserver(std::string lease_state_file)
    : lease_state_file_(std::move(lease_state_file)), registry_(std::make_shared<prometheus::Registry>()) {
  // The order /metrics lists the families in.
  probe_ = std::make_unique<metrics::ProbeMetrics>(*registry_);
  metrics::RegisterBuildInfo(*registry_);
  rpc_ = std::make_unique<service::RpcMetrics>(*registry_);
  version_skew_ = std::make_unique<metrics::VersionSkewMetrics>(*registry_);
  shared_host_ = std::make_unique<service::SharedHostMetrics>(*registry_);
}

void DaemonObserver::ObserveStore(inventory::StoreOptions& options) {
  options.on_probe = [this](const inventory::ProbeOutcome& outcome) { OnProbe(outcome); };
  options.on_usage = [this](const inventory::ProbeOutcome& outcome) { OnUsageRefresh(outcome); };
}

void DaemonObserver::OnProbe(const inventory::ProbeOutcome& o) {
  probe_->ObserveRun(o.status.ok(), o.duration);
  if (o.status.ok()) {
    spdlog::info("event=probe result=ok duration_ms={} revision={} changed={}", absl::ToInt64Milliseconds(o.duration),
                 o.revision, o.changed);
  } else {
    spdlog::warn("event=probe result=error duration_ms={} code={} error=\"{}\" serving_revision={}",
                 absl::ToInt64Milliseconds(o.duration), absl::StatusCodeToString(o.status.code()),
                 absl::CHexEscape(o.status.message()), o.revision);  // the child's stderr is quoted in it
  }
}

void DaemonObserver::OnProbeReports(const v1::Inventory& fresh) { probe_->ObserveReports(fresh); }

void DaemonObserver::OnUsageRefresh(const inventory::ProbeOutcome& o) {
  shared_host_->ObserveUsageRefresh(o.status.ok(), o.duration);
  if (o.status.ok()) {
    if (usage_failing_.exchange(false)) spdlog::info("event=usage_refresh result=ok (recovered)");
    spdlog::debug("event=usage_refresh result=ok duration_ms={} revision={} changed={}",
                  absl::ToInt64Milliseconds(o.duration), o.revision, o.changed);
  } else if (!usage_failing_.exchange(true)) {  // once per failing spell, not every --usage_interval
    spdlog::warn("event=usage_refresh result=error duration_ms={} code={} error=\"{}\" (logged again after it "
                 "recovers)",
                 absl::ToInt64Milliseconds(o.duration), absl::StatusCodeToString(o.status.code()),
                 absl::CHexEscape(o.status.message()));
  }
}

void DaemonObserver::OnNewerLibrary(const placement::NewerLibrary& newer) { version_skew_->Count(newer); }

void DaemonObserver::OnPick(const std::string& outcome, absl::Duration latency) {
  shared_host_->ObservePick(outcome, latency);
}

void DaemonObserver::OnLeasesHeld(size_t held) { shared_host_->SetLeasesHeld(held); }

void DaemonObserver::OnPicksWaiting(size_t waiting) { shared_host_->SetPicksWaiting(waiting); }

void DaemonObserver::OnLeaseCall(const std::string& call, const std::string& outcome) {
  shared_host_->ObserveLeaseCall(call, outcome);
}

void DaemonObserver::OnLeaseWriteError(const absl::Status& error) {
  spdlog::warn("event=lease_state_write_failed file={} error=\"{}\" (picks are refused until the file can be "
               "written; a release or a lease's end stands in memory, and a restart checks the older table again)",
               lease_state_file_, std::string(error.message()));
}

}  // namespace devplace::daemon
