// Prometheus families for the connection gates (connection_gate.h), read from their counts at each
// scrape:
//   devplace_connections_refused_total{listener,reason}  connections closed without being served:
//       reason peer_cap, total_cap, unowned_cap (the caps), rate (the peer's rate of new
//       connections) and timeout (closed by devplaced for not sending the HTTP/2 preface, or a
//       /metrics request, in time; TLS and TCP handshakes that time out are closed by gRPC and not
//       counted here)
//   devplace_connections_open{listener}                  connections counted open now
//   devplace_connections_max{listener}                   the total cap in force (lowered to fit the
//                                                        descriptor limit)
// `listener` is the gate's name: "grpc" (every unix, TCP and TLS listener) or "metrics".
#ifndef DEVPLACE_SERVER_SERVICE_CONNECTION_METRICS_H_
#define DEVPLACE_SERVER_SERVICE_CONNECTION_METRICS_H_

#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/service/connection_gate.h"

namespace devplace::service {

class ConnectionCollector : public prometheus::Collectable {
 public:
  // The gates, by listener name; each must outlive the collector's last Collect().
  explicit ConnectionCollector(std::vector<std::pair<std::string, const ConnectionGate*>> gates)
      : gates_(std::move(gates)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::vector<std::pair<std::string, const ConnectionGate*>> gates_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_CONNECTION_METRICS_H_
