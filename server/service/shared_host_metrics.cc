#include "server/service/shared_host_metrics.h"

namespace devplace::service {
namespace {

prometheus::Histogram::BucketBoundaries PickBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600};
}

prometheus::Histogram::BucketBoundaries UsageBuckets() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}; }

}  // namespace

SharedHostMetrics::SharedHostMetrics(prometheus::Registry& registry)
    : picks_(prometheus::BuildCounter()
                 .Name("devplace_picks_total")
                 .Help("PickDevices answers by outcome (answered, no_free_device, no_free_device_after_wait, "
                       "invalid_argument, failed_precondition, resource_exhausted, over_user_device_cap, lease_not_durable, "
                       "too_many_waiting, too_many_queued_calls, cancelled, unavailable)")
                 .Register(registry)),
      pick_duration_(prometheus::BuildHistogram()
                         .Name("devplace_pick_duration_seconds")
                         .Help("PickDevices from arrival to answer, waits included")
                         .Register(registry)
                         .Add({}, PickBuckets())),
      leases_held_(prometheus::BuildGauge()
                       .Name("devplace_leases_held")
                       .Help("Leases PickDevices handed out that are held now")
                       .Register(registry)
                       .Add({})),
      picks_waiting_(prometheus::BuildGauge()
                         .Name("devplace_picks_waiting")
                         .Help("PickDevices calls waiting now (wait_ms) for devices to be free")
                         .Register(registry)
                         .Add({})),
      lease_calls_(prometheus::BuildCounter()
                       .Name("devplace_lease_calls_total")
                       .Help("LeaseRelease (call=release) and LeaseKeepAlive (call=keep_alive) answers by outcome "
                             "(ok, not_found, permission_denied, invalid_argument, failed_precondition)")
                       .Register(registry)),
      usage_refreshes_(prometheus::BuildCounter()
                           .Name("devplace_usage_refreshes_total")
                           .Help("Usage refreshes (devplace-probe --usage_only, every --usage_interval) by result")
                           .Register(registry)),
      usage_duration_(prometheus::BuildHistogram()
                          .Name("devplace_usage_refresh_duration_seconds")
                          .Help("How long one usage refresh's probe child ran")
                          .Register(registry)
                          .Add({}, UsageBuckets())) {
  for (const char* result : {"ok", "error"}) usage_refreshes_.Add({{"result", result}});
  picks_.Add({{"outcome", "answered"}});
  picks_.Add({{"outcome", "no_free_device"}});
}

void SharedHostMetrics::ObservePick(const std::string& outcome, absl::Duration latency) {
  picks_.Add({{"outcome", outcome}}).Increment();
  pick_duration_.Observe(absl::ToDoubleSeconds(latency));
}

void SharedHostMetrics::SetLeasesHeld(size_t held) { leases_held_.Set(static_cast<double>(held)); }

void SharedHostMetrics::SetPicksWaiting(size_t waiting) { picks_waiting_.Set(static_cast<double>(waiting)); }

void SharedHostMetrics::ObserveLeaseCall(const std::string& call, const std::string& outcome) {
  lease_calls_.Add({{"call", call}, {"outcome", outcome}}).Increment();
}

void SharedHostMetrics::ObserveUsageRefresh(bool ok, absl::Duration duration) {
  usage_refreshes_.Add({{"result", ok ? "ok" : "error"}}).Increment();
  usage_duration_.Observe(absl::ToDoubleSeconds(duration));
}

}  // namespace devplace::service
