// Prometheus metrics for devplaced's gRPC edge, from a server interceptor (gRPC 1.51's
// experimental ServerInterceptorFactoryInterface, which works with the callback API):
//   devplace_rpc_handled_total{service,method,code}  calls finished, by gRPC code name (OK,
//                                                     INVALID_ARGUMENT, ...; CANCELLED when the
//                                                     call ended without a status being sent)
//   devplace_rpc_duration_seconds{service,method}    histogram, call start to status sent
//   devplace_rpc_in_flight{service,method}           calls started and not yet finished
//   devplace_watch_streams_open                      WatchInventory streams open now
// `service` is the full proto service name (devplace.v1.DevicePlacement, grpc.health.v1.Health,
// ...), `method` the bare method name. Every registered service is counted.
#ifndef DEVPLACE_SERVER_SERVICE_RPC_METRICS_H_
#define DEVPLACE_SERVER_SERVICE_RPC_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace devplace::service {

class RpcMetrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  explicit RpcMetrics(prometheus::Registry& registry);
  // A factory for grpc::ServerBuilder::experimental().SetInterceptorCreators; this object must
  // outlive the server it is installed in.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewInterceptorFactory();
  // Calls of any service whose handler sent a status, since start (a call that ended without one,
  // cancelled or dropped, is not counted): the progress the liveness self-check reads
  // (liveness.h), which a daemon whose handlers are all stuck does not make.
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }
  // devplace_costly_calls_queued (ResolveDevice and PickDevices calls queued or running on the
  // service's workers)
  // and devplace_costly_calls_refused_total (refused past --max_queued_calls_per_peer).
  void SetCostlyCallsQueued(size_t queued) { costly_queued_.Set(static_cast<double>(queued)); }
  void CostlyCallRefused() { costly_refused_.Increment(); }

 private:
  friend class RpcMetricsInterceptor;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Gauge& watch_streams_;
  prometheus::Gauge& costly_queued_;
  prometheus::Counter& costly_refused_;
  std::atomic<uint64_t> answered_{0};
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_RPC_METRICS_H_
