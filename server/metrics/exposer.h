// devplaced's /metrics endpoint: checks the --metrics_listen address and serves the Prometheus
// text exposition format over HTTP/1.1 from an accept loop of its own (one thread, epoll), with
// prometheus-cpp's serializer. No gRPC.
//
// Why not prometheus-cpp's Exposer: civetweb gives each connection one of a fixed set of worker
// threads until its request is read, so a handful of idle or slow connections from one user
// delayed every scrape by seconds (64 made half the scrapes miss Prometheus' 10 s timeout). Here a
// connection costs a descriptor and a few hundred bytes while it sends its request, however slowly,
// and a scrape is answered as soon as its request is in.
#ifndef DEVPLACE_SERVER_METRICS_EXPOSER_H_
#define DEVPLACE_SERVER_METRICS_EXPOSER_H_

#include <sys/socket.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"

namespace devplace::metrics {

// Checks a --metrics_listen value: empty (metrics off), IPV4:PORT or [IPV6]:PORT with an IP
// literal and a port 0..65535 (0 picks a free port; server/common/address.h). A non-loopback
// address (IsLoopbackHost: anything outside 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104, e.g.
// 0.0.0.0 or a NIC's address) is refused unless `allow_remote`, because /metrics names the
// host's devices to whoever can reach it. INVALID_ARGUMENT naming the flag.
absl::Status CheckMetricsAddress(const std::string& address, bool allow_remote);

// How long a connection may take to send its whole request (request line and headers) from
// accept, and then to read the answer; past either it is closed unanswered.
inline constexpr absl::Duration kMetricsRequestTimeout = absl::Seconds(5);
// The longest request (request line and headers) read; a longer one is answered 431 and closed.
inline constexpr size_t kMetricsMaxRequestBytes = 8192;
// The connection caps the daemon gives /metrics (a ConnectionGate of its own, with the gRPC
// listeners' rate of new connections per peer): connections open at once in all and per peer, and
// the reserve on top for root and the daemon's own user. Within the descriptors the daemon keeps
// for itself (kDescriptorHeadroom, server/daemon/config.h).
inline constexpr int kMetricsMaxConnections = 64;
inline constexpr int kMetricsMaxConnectionsPerPeer = 8;
inline constexpr int kMetricsConnectionReserve = 8;

// What the endpoint asks of its owner for each connection (the daemon: its /metrics connection
// gate). Both are called on the endpoint's thread and must not block.
struct MetricsConnectionHooks {
  // A connection was just accepted as `fd` from `peer`: true to serve it, false to close it at once.
  std::function<bool(int fd, const sockaddr_storage& peer)> admit;
  // `fd`, admitted, is about to be closed; `timed_out` when its request did not arrive in time.
  std::function<void(int fd, bool timed_out)> release;
};

class MetricsServer;

struct MetricsEndpoint {
  MetricsEndpoint();
  MetricsEndpoint(MetricsEndpoint&&) noexcept;
  MetricsEndpoint& operator=(MetricsEndpoint&&) noexcept;
  ~MetricsEndpoint();  // stops serving: closes the listening socket and every connection

  std::unique_ptr<MetricsServer> server;
  std::string address;  // as bound, with the port picked for :0
};

// Serves the given collectables (kept alive by the endpoint) at http://ADDRESS/metrics:
// GET or HEAD of /metrics (any query) gets 200 with the text exposition format 0.0.4, and
// "Connection: close"; another path 404, another method 405, a request that is not HTTP/1.x 400,
// one longer than kMetricsMaxRequestBytes 431. Also serves its own exposer_scrapes_total,
// exposer_transferred_bytes_total and exposer_request_latencies (microseconds, a summary), the
// names prometheus-cpp's Exposer used. `hooks` may be empty (every connection served).
// `address` must have passed CheckMetricsAddress and be non-empty. UNAVAILABLE naming the address
// when it cannot be bound (in use, no permission).
absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    MetricsConnectionHooks hooks = {});

}  // namespace devplace::metrics

#endif  // DEVPLACE_SERVER_METRICS_EXPOSER_H_
