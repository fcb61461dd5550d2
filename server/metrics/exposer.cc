#include "server/metrics/exposer.h"

#include <arpa/inet.h>

#include <exception>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/common/address.h"

namespace devplace::metrics {
namespace {

constexpr char kAccepted[] = "accepted: empty (off), IPV4:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9465 or [::1]:9465";

// ParseAddress's host:port or [v6]:port whose host is an IP literal: civetweb binds addresses,
// it does not resolve names.
std::optional<Address> ParseMetricsAddress(const std::string& address) {
  std::optional<Address> parsed = ParseAddress(address, AddressUse::kListen);
  if (!parsed.has_value() || parsed->is_unix) return std::nullopt;
  unsigned char buf[16];
  if (inet_pton(parsed->ipv6 ? AF_INET6 : AF_INET, parsed->host.c_str(), buf) != 1) return std::nullopt;
  return parsed;
}

}  // namespace

absl::Status CheckMetricsAddress(const std::string& address, bool allow_remote) {
  if (address.empty()) return absl::OkStatus();
  const std::optional<Address> parsed = ParseMetricsAddress(address);
  if (!parsed.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_listen='", address, "' is not an address; ", kAccepted));
  }
  if (!IsLoopbackHost(parsed->host) && !allow_remote) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen='", address,
        "' is not a loopback address; /metrics names this host's devices, so serving it beyond the host needs "
        "--metrics_allow_remote"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  const std::optional<Address> parsed = ParseMetricsAddress(address);
  if (!parsed.has_value()) return absl::InvalidArgumentError(absl::StrCat("--metrics_listen: ", kAccepted));
  // A busy port is our one line; civetweb would say "null context when constructing CivetServer".
  if (absl::Status bindable = CheckTcpBindable(*parsed); !bindable.ok()) {
    return bindable;
  }
  MetricsEndpoint endpoint;
  try {
    // civetweb gives each connection a worker until its request is read, so workers and the time
    // a request may take to arrive bound how long idle or slow connections can keep a scrape
    // waiting (with one worker and civetweb's default 30 s, one idle connection did).
    endpoint.exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", std::to_string(kMetricsWorkers), "request_timeout_ms",
        std::to_string(absl::ToInt64Milliseconds(kMetricsRequestTimeout))});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  endpoint.collectables = collectables;
  for (const std::shared_ptr<prometheus::Collectable>& collectable : collectables) {
    endpoint.exposer->RegisterCollectable(collectable);
  }
  const std::vector<int> ports = endpoint.exposer->GetListeningPorts();
  const int port = ports.empty() ? parsed->port : ports.front();
  endpoint.address = parsed->ipv6 ? absl::StrCat("[", parsed->host, "]:", port) : absl::StrCat(parsed->host, ":", port);
  return endpoint;
}

}  // namespace devplace::metrics
