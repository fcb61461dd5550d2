// DaemonObserver: devplaced's one metrics observer. Every event the inventory store and the
// DevicePlacement service report for metrics (probe runs and their reports, usage refreshes,
// answers to jobs newer than the rules, picks, leases held, lease calls, lease-file write errors)
// arrives here, and here become the Prometheus families /metrics serves and devplaced's log lines
// for them (docs/OPERATOR.md lists both). It owns the registry and every family in it.
#ifndef DEVPLACE_SERVER_DAEMON_OBSERVER_H_
#define DEVPLACE_SERVER_DAEMON_OBSERVER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "prometheus/registry.h"
#include "server/inventory/store.h"
#include "server/metrics/inventory_metrics.h"
#include "server/metrics/version_skew_metrics.h"
#include "server/service/rpc_metrics.h"
#include "server/service/service_observer.h"
#include "server/service/shared_host_metrics.h"

namespace devplace::daemon {

// Thread-safe: the store's threads, gRPC's and the service's workers call it at once.
// One line of the lease trail: `event=lease action=granted user=uid:1000 lease=3df5eed0
// holder=parent pid=4242 uid=1000 devices=0000:20:00.0 [expires_at=...]`, or for a refused pick
// `event=lease action=refused user=... outcome=no_free_device error="..."` (escaped, at most 400
// bytes of the message). The lease is named by its id's first 8 hex digits, never the whole id.
std::string FormatLeaseEvent(const service::LeaseEvent& event);

class DaemonObserver final : public service::ServiceObserver {
 public:
  // Registers, in this order, devplace_probe_* (metrics::ProbeMetrics), devplace_build_info, the
  // RPC families (service::RpcMetrics), devplace_version_skew_answers_total and the shared-host
  // families (service::SharedHostMetrics). `lease_state_file` (--lease_state_file) is named in
  // event=lease_state_write_failed.
  explicit DaemonObserver(std::string lease_state_file);
  DaemonObserver(const DaemonObserver&) = delete;
  DaemonObserver& operator=(const DaemonObserver&) = delete;

  // What /metrics serves, beside the collectors that read state when scraped.
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  // The gRPC interceptor's families (its factory goes to the server builder).
  service::RpcMetrics& rpc_metrics() { return *rpc_; }

  // Points `options`' on_probe and on_usage here; this observer must outlive the store.
  void ObserveStore(inventory::StoreOptions& options);
  // One probe run: counted and timed, logged as event=probe result=ok (info) or result=error
  // (warn, with the child's stderr quoted in its error).
  void OnProbe(const inventory::ProbeOutcome& outcome);
  // The probe reports of one run's fresh inventory, before it is published (prober failures).
  void OnProbeReports(const v1::Inventory& fresh);
  // One usage refresh: counted and timed; logged at debug when it succeeds, at warn once per
  // failing spell (not every --usage_interval) and at info when it recovers.
  void OnUsageRefresh(const inventory::ProbeOutcome& outcome);

  // service::ServiceObserver: the version-skew counter, the shared-host families, and
  // event=lease_state_write_failed (warn).
  void OnNewerLibrary(const placement::NewerLibrary& newer) override;
  void OnPick(const std::string& outcome, absl::Duration latency) override;
  void OnLeasesHeld(size_t held) override;
  void OnPicksWaiting(size_t waiting) override;
  void OnLeaseCall(const std::string& call, const std::string& outcome) override;
  void OnLeaseWriteError(const absl::Status& error) override;
  // Logs one line of the lease trail at info (FormatLeaseEvent).
  void OnLeaseEvent(const service::LeaseEvent& event) override;
  void OnCostlyCallsQueued(size_t queued) override { rpc_->SetCostlyCallsQueued(queued); }
  void OnCostlyCallRefused() override { rpc_->CostlyCallRefused(); }

 private:
  const std::string lease_state_file_;
  const std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::ProbeMetrics> probe_;
  std::unique_ptr<service::RpcMetrics> rpc_;
  std::unique_ptr<metrics::VersionSkewMetrics> version_skew_;
  std::unique_ptr<service::SharedHostMetrics> shared_host_;  // picks, leases, usage refreshes
  std::atomic<bool> usage_failing_{false};  // in a failing spell of usage refreshes
};

}  // namespace devplace::daemon

#endif  // DEVPLACE_SERVER_DAEMON_OBSERVER_H_
