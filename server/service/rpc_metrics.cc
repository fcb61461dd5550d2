#include "server/service/rpc_metrics.h"

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace devplace::service {
namespace {

const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                                   0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                                   1,      2.5,     5,      10};
  return buckets;
}

}  // namespace

class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcMetrics& metrics, absl::string_view full_method) : metrics_(metrics) {
    // "/package.Service/Method"
    absl::string_view m = full_method;
    if (!m.empty() && m[0] == '/') m.remove_prefix(1);
    const size_t slash = m.find('/');
    service_ = std::string(m.substr(0, slash));
    method_ = slash == absl::string_view::npos ? "" : std::string(m.substr(slash + 1));
    watch_ = service_ == "devplace.v1.DevicePlacement" && method_ == "WatchInventory";
    in_flight_ = &metrics_.in_flight_.Add({{"service", service_}, {"method", method_}});
    in_flight_->Increment();
    if (watch_) metrics_.watch_streams_.Increment();
  }

  ~RpcMetricsInterceptor() override {
    if (!finished_) Finish(grpc::StatusCode::CANCELLED);
    in_flight_->Decrement();
    if (watch_) metrics_.watch_streams_.Decrement();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !finished_) {
      Finish(methods->GetSendStatus().error_code());
      metrics_.answered_.fetch_add(1, std::memory_order_relaxed);
    }
    methods->Proceed();
  }

 private:
  void Finish(grpc::StatusCode code) {
    finished_ = true;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_.duration_.Add({{"service", service_}, {"method", method_}}, Buckets()).Observe(seconds);
    // gRPC's and absl's codes are the same numbers; absl names them as gRPC does.
    metrics_.handled_
        .Add({{"service", service_},
              {"method", method_},
              {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}})
        .Increment();
  }

  RpcMetrics& metrics_;
  std::string service_, method_;
  bool watch_ = false;
  bool finished_ = false;
  prometheus::Gauge* in_flight_ = nullptr;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

namespace {

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(metrics_, info->method() != nullptr ? info->method() : "");
  }

 private:
  RpcMetrics& metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry)
    : handled_(prometheus::BuildCounter()
                   .Name("devplace_rpc_handled_total")
                   .Help("gRPC calls finished, by service, method and gRPC status code")
                   .Register(registry)),
      duration_(prometheus::BuildHistogram()
                    .Name("devplace_rpc_duration_seconds")
                    .Help("gRPC call duration from start to status, in seconds (WatchInventory: stream lifetime)")
                    .Register(registry)),
      in_flight_(prometheus::BuildGauge()
                     .Name("devplace_rpc_in_flight")
                     .Help("gRPC calls started and not yet finished")
                     .Register(registry)),
      watch_streams_(prometheus::BuildGauge()
                         .Name("devplace_watch_streams_open")
                         .Help("WatchInventory streams open now")
                         .Register(registry)
                         .Add({})),
      costly_queued_(prometheus::BuildGauge()
                         .Name("devplace_costly_calls_queued")
                         .Help("ResolveDevice calls not answered from the cache and PickDevices calls before their "
                               "first attempt, queued or running on the daemon's workers (each peer's in turn)")
                         .Register(registry)
                         .Add({})),
      costly_refused_(prometheus::BuildCounter()
                          .Name("devplace_costly_calls_refused_total")
                          .Help("ResolveDevice and PickDevices calls refused (RESOURCE_EXHAUSTED) because their peer had "
                                "--max_queued_calls_per_peer of them queued or running")
                          .Register(registry)
                          .Add({})) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcMetrics::NewInterceptorFactory() {
  return std::make_unique<Factory>(*this);
}

}  // namespace devplace::service
