#include "server/metrics/exposer.h"

#include <arpa/inet.h>

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace devplace::metrics {
namespace {

constexpr char kAccepted[] = "accepted: empty (off), IPV4:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9465 or [::1]:9465";

struct HostPort {
  std::string host;  // without brackets
  bool v6 = false;
  int port = -1;
};

bool Split(const std::string& address, HostPort* out) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &out->port) || out->port > 65535) {
    return false;
  }
  std::string host = address.substr(0, colon);
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    out->host = host.substr(1, host.size() - 2);
    out->v6 = true;
    return inet_pton(AF_INET6, out->host.c_str(), buf) == 1;
  }
  out->host = host;
  return inet_pton(AF_INET, host.c_str(), buf) == 1;
}

}  // namespace

absl::Status CheckMetricsAddress(const std::string& address, bool allow_remote) {
  if (address.empty()) return absl::OkStatus();
  HostPort hp;
  if (!Split(address, &hp)) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_listen='", address, "' is not an address; ", kAccepted));
  }
  const bool loopback = hp.v6 ? hp.host == "::1" : absl::StartsWith(hp.host, "127.");
  if (!loopback && !allow_remote) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_listen='", address,
        "' is not a loopback address; /metrics names this host's devices, so serving it beyond the host needs "
        "--metrics_allow_remote"));
  }
  return absl::OkStatus();
}

absl::StatusOr<MetricsEndpoint> StartMetricsEndpoint(
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  HostPort hp;
  if (!Split(address, &hp)) return absl::InvalidArgumentError(absl::StrCat("--metrics_listen: ", kAccepted));
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
  const int port = ports.empty() ? hp.port : ports.front();
  endpoint.address = hp.v6 ? absl::StrCat("[", hp.host, "]:", port) : absl::StrCat(hp.host, ":", port);
  return endpoint;
}

}  // namespace devplace::metrics
