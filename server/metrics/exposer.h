// devplaced's /metrics endpoint: checks the --metrics_listen address and starts prometheus-cpp's
// HTTP exposer (civetweb) on it. No gRPC.
#ifndef DEVPLACE_SERVER_METRICS_EXPOSER_H_
#define DEVPLACE_SERVER_METRICS_EXPOSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace devplace::metrics {

// Checks a --metrics_listen value: empty (metrics off), IPV4:PORT or [IPV6]:PORT with an IP
// literal and a port 0..65535 (0 picks a free port; server/common/address.h). A non-loopback
// address (IsLoopbackHost: anything outside 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104, e.g.
// 0.0.0.0 or a NIC's address) is refused unless `allow_remote`, because /metrics names the
// host's devices to whoever can reach it. INVALID_ARGUMENT naming the flag.
absl::Status CheckMetricsAddress(const std::string& address, bool allow_remote);

struct MetricsEndpoint {
  // Kept alive here: the exposer holds only weak pointers to them.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string address;  // as bound, with the port picked for :0
};

// The HTTP server's workers (each serves one connection at a time) and how long a connection may
// take to send its whole request before it is closed (civetweb's request_timeout_ms; its default
// is 30 s). A scrape is served at once while fewer than kMetricsWorkers connections are open.
inline constexpr int kMetricsWorkers = 8;
inline constexpr absl::Duration kMetricsRequestTimeout = absl::Seconds(5);

// Serves the given collectables at http://ADDRESS/metrics (text exposition format 0.0.4), with
// kMetricsWorkers and kMetricsRequestTimeout.
// `address` must have passed CheckMetricsAddress and be non-empty. UNAVAILABLE naming the address
// when it cannot be bound (in use, no permission).
absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);

}  // namespace devplace::metrics

#endif  // DEVPLACE_SERVER_METRICS_EXPOSER_H_
