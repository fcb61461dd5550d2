#include "server/daemon/observer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
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

std::string FormatLeaseEvent(const service::LeaseEvent& e) {
  std::string line = absl::StrCat("event=lease action=", e.action);
  if (!e.user.empty()) absl::StrAppend(&line, " user=", e.user);
  if (e.action == "refused" || absl::StartsWith(e.action, "waiter_")) {
    // The message is the daemon's own, but quotes what the caller sent: escaped and bounded.
    const std::string error = absl::CHexEscape(e.error.substr(0, 400));
    absl::StrAppend(&line, " outcome=", e.outcome, " error=\"", error, e.error.size() > 400 ? "..." : "", "\"");
    return line;
  }
  const v1::LeaseInfo& l = e.lease;
  // The id's first 8 hex digits: enough to tell leases apart in the trail and find one in
  // `devplace inventory`, not the capability that releases it.
  absl::StrAppend(&line, " lease=", l.lease_id().substr(0, 8), " holder=",
                  absl::AsciiStrToLower(absl::StripPrefix(v1::LeaseHolder_Name(l.holder()), "LEASE_HOLDER_")));
  if (l.pid() != 0) absl::StrAppend(&line, " pid=", l.pid());
  if (l.has_uid()) absl::StrAppend(&line, " uid=", l.uid());
  std::vector<std::string> devices;
  for (const v1::LeaseDevice& d : l.devices()) {
    std::string device = d.pci_bus_id();
    if (!d.partition_uuid().empty()) absl::StrAppend(&device, "/", d.partition_uuid());
    if (d.sub_device() >= 0) absl::StrAppend(&device, "/", d.sub_device());
    devices.push_back(std::move(device));
  }
  absl::StrAppend(&line, " devices=", absl::StrJoin(devices, ","));
  if (l.has_expires_at()) {
    absl::StrAppend(&line, " expires_at=",
                    absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(l.expires_at().seconds()),
                                     absl::UTCTimeZone()));
  }
  return line;
}

void DaemonObserver::OnLeaseEvent(const service::LeaseEvent& event) { spdlog::info("{}", FormatLeaseEvent(event)); }

void DaemonObserver::OnLeaseWriteError(const absl::Status& error) {
  spdlog::warn("event=lease_state_write_failed file={} error=\"{}\" (picks are refused until the file can be "
               "written; a release or a lease's end stands in memory, and a restart checks the older table again)",
               lease_state_file_, std::string(error.message()));
}

}  // namespace devplace::daemon
