// Prometheus metrics for shared hosts (PickDevices, leases, the usage refresh):
//   devplace_picks_total{outcome}             PickDevices answers: "answered", "no_free_device",
//                                             "no_free_device_after_wait", "invalid_argument",
//                                             "failed_precondition", "resource_exhausted",
//                                             "over_user_device_cap", "lease_not_durable",
//                                             "too_many_waiting", "too_many_queued_calls",
//                                             "cancelled", "unavailable" (a bounded set)
//   devplace_pick_duration_seconds            histogram, arrival to answer (waits included)
//   devplace_leases_held                      leases held now
//   devplace_picks_waiting                    PickDevices calls waiting (wait_ms) now
//   devplace_lease_calls_total{call,outcome}  LeaseRelease ("release") and LeaseKeepAlive
//                                             ("keep_alive") answers: "ok", "not_found",
//                                             "permission_denied", "invalid_argument",
//                                             "failed_precondition"
//   devplace_usage_refreshes_total{result}    usage refreshes (devplace-probe --usage_only): ok, error
//   devplace_usage_refresh_duration_seconds   histogram, the usage probe child's run
#ifndef DEVPLACE_SERVER_SERVICE_SHARED_HOST_METRICS_H_
#define DEVPLACE_SERVER_SERVICE_SHARED_HOST_METRICS_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace devplace::service {

class SharedHostMetrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  explicit SharedHostMetrics(prometheus::Registry& registry);
  // Thread-safe, as prometheus-cpp's metrics are.
  void ObservePick(const std::string& outcome, absl::Duration latency);
  void SetLeasesHeld(size_t held);
  void SetPicksWaiting(size_t waiting);
  void ObserveLeaseCall(const std::string& call, const std::string& outcome);
  void ObserveUsageRefresh(bool ok, absl::Duration duration);

 private:
  prometheus::Family<prometheus::Counter>& picks_;
  prometheus::Histogram& pick_duration_;
  prometheus::Gauge& leases_held_;
  prometheus::Gauge& picks_waiting_;
  prometheus::Family<prometheus::Counter>& lease_calls_;
  prometheus::Family<prometheus::Counter>& usage_refreshes_;
  prometheus::Histogram& usage_duration_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_SHARED_HOST_METRICS_H_
