#include "server/service/connection_metrics.h"

#include <cstdint>

#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace devplace::service {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void Add(prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family.metric.push_back(std::move(m));
}

}  // namespace

std::vector<prometheus::MetricFamily> ConnectionCollector::Collect() const {
  prometheus::MetricFamily refused =
      Family("devplace_connections_refused_total",
             "Connections closed without being served, by listener and reason (peer_cap, total_cap, unowned_cap, "
             "rate, timeout)",
             prometheus::MetricType::Counter);
  prometheus::MetricFamily open =
      Family("devplace_connections_open", "Connections counted open now, by listener", prometheus::MetricType::Gauge);
  prometheus::MetricFamily max = Family("devplace_connections_max",
                                        "The total connection cap in force, by listener (lowered to fit the "
                                        "descriptor limit)",
                                        prometheus::MetricType::Gauge);
  for (const auto& [listener, gate] : gates_) {
    const ConnectionGate::Stats s = gate->stats();
    const std::pair<const char*, uint64_t> reasons[] = {{"peer_cap", s.refused_peer},
                                                        {"total_cap", s.refused_total},
                                                        {"unowned_cap", s.refused_unowned},
                                                        {"rate", s.refused_rate},
                                                        {"timeout", s.timed_out}};
    for (const auto& [reason, count] : reasons) {
      Add(refused, {{"listener", listener}, {"reason", reason}}, static_cast<double>(count));
    }
    Add(open, {{"listener", listener}}, s.open);
    Add(max, {{"listener", listener}}, gate->EffectiveMaxTotal());
  }
  return {std::move(refused), std::move(open), std::move(max)};
}

}  // namespace devplace::service
