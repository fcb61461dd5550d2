#include "server/metrics/exposer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/summary.h"
#include "prometheus/text_serializer.h"
#include "server/common/address.h"

namespace devplace::metrics {
namespace {

constexpr char kAccepted[] = "accepted: empty (off), IPV4:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9465 or [::1]:9465";
// After the answer is written: how long the client may take to close its end (its unread bytes
// are drained meanwhile, so the close cannot reset the answer away).
constexpr absl::Duration kLingerTimeout = absl::Seconds(1);
constexpr int kEventsPerWait = 64;

// ParseAddress's host:port or [v6]:port whose host is an IP literal.
std::optional<Address> ParseMetricsAddress(const std::string& address) {
  std::optional<Address> parsed = ParseAddress(address, AddressUse::kListen);
  if (!parsed.has_value() || parsed->is_unix) return std::nullopt;
  unsigned char buf[16];
  if (inet_pton(parsed->ipv6 ? AF_INET6 : AF_INET, parsed->host.c_str(), buf) != 1) return std::nullopt;
  return parsed;
}

std::string Response(absl::string_view status, absl::string_view content_type, absl::string_view body,
                     bool head, absl::string_view extra_headers = "") {
  std::string out = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                                 "\r\nContent-Length: ", body.size(), "\r\n", extra_headers, "Connection: close\r\n\r\n");
  if (!head) out.append(body.data(), body.size());
  return out;
}

std::string PlainError(absl::string_view status, absl::string_view text, absl::string_view extra_headers = "") {
  return Response(status, "text/plain; charset=utf-8", absl::StrCat(text, "\n"), false, extra_headers);
}

}  // namespace

// The accept loop: one thread, epoll over the listening socket, a wake pipe and every connection.
class MetricsServer {
 public:
  MetricsServer(int listening, std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
                MetricsConnectionHooks hooks)
      : listening_(listening), collectables_(std::move(collectables)), hooks_(std::move(hooks)) {
    own_ = std::make_shared<prometheus::Registry>();
    transferred_ = &prometheus::BuildCounter()
                        .Name("exposer_transferred_bytes_total")
                        .Help("Transferred bytes to metrics services")
                        .Register(*own_)
                        .Add({});
    scrapes_ = &prometheus::BuildCounter()
                    .Name("exposer_scrapes_total")
                    .Help("Number of times metrics were scraped")
                    .Register(*own_)
                    .Add({});
    latencies_ = &prometheus::BuildSummary()
                      .Name("exposer_request_latencies")
                      .Help("Latencies of serving scrape requests, in microseconds")
                      .Register(*own_)
                      .Add({}, prometheus::Summary::Quantiles{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}});
    collectables_.push_back(own_);
  }

  ~MetricsServer() {
    if (wake_[1] >= 0) (void)!write(wake_[1], "s", 1);
    if (thread_.joinable()) thread_.join();
    while (!connections_.empty()) Drop(connections_.begin()->first, false);
    for (int fd : {listening_, ep_, wake_[0], wake_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  absl::Status Start() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0 || pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError(std::strerror(errno));
    for (int fd : {listening_, wake_[0]}) {
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.fd = fd;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e) != 0) return absl::InternalError(std::strerror(errno));
    }
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

 private:
  enum class Phase { kReading, kWriting, kLingering };
  struct Connection {
    Phase phase = Phase::kReading;
    absl::Time deadline;
    std::string in;
    std::string out;
    size_t sent = 0;
  };

  void Loop() {
    epoll_event events[kEventsPerWait];
    for (;;) {
      int wait_ms = -1;
      if (!connections_.empty()) {
        absl::Time first = absl::InfiniteFuture();
        for (const auto& [fd, c] : connections_) first = std::min(first, c.deadline);
        wait_ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(first - absl::Now()) + 1, 0, 60000));
      }
      const int n = epoll_wait(ep_, events, kEventsPerWait, wait_ms);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_[0]) return;
        if (fd == listening_) {
          AcceptAll();
          continue;
        }
        auto it = connections_.find(fd);
        if (it == connections_.end()) continue;
        Serve(fd, it->second);
      }
      const absl::Time now = absl::Now();
      std::vector<std::pair<int, bool>> expired;
      for (const auto& [fd, c] : connections_) {
        if (c.deadline <= now) expired.emplace_back(fd, c.phase == Phase::kReading);
      }
      for (const auto& [fd, timed_out] : expired) Drop(fd, timed_out);
    }
  }

  void AcceptAll() {
    for (int k = 0; k < kEventsPerWait; ++k) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      const int fd = accept4(listening_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // EAGAIN: nothing more; EMFILE and the like: the next connection or event tries again.
        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return;
      }
      if (hooks_.admit && !hooks_.admit(fd, peer)) {
        close(fd);
        continue;
      }
      epoll_event e{};
      e.events = EPOLLIN | EPOLLRDHUP;
      e.data.fd = fd;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e) != 0) {
        if (hooks_.release) hooks_.release(fd, false);
        close(fd);
        continue;
      }
      connections_[fd].deadline = absl::Now() + kMetricsRequestTimeout;
    }
  }

  void Serve(int fd, Connection& c) {
    if (c.phase == Phase::kWriting) {
      Write(fd, c);
      return;
    }
    char buf[4096];
    for (;;) {
      const ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {  // closed or reset: nothing (more) to answer
        Drop(fd, false);
        return;
      }
      if (c.phase == Phase::kLingering) continue;  // unread bytes of a finished exchange
      c.in.append(buf, static_cast<size_t>(got));
      const size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos && c.in.size() <= kMetricsMaxRequestBytes) continue;
      if (end == std::string::npos || end + 4 > kMetricsMaxRequestBytes) {
        c.out = PlainError("431 Request Header Fields Too Large",
                           absl::StrCat("a request to /metrics is at most ", kMetricsMaxRequestBytes, " bytes"));
      } else {
        c.out = Answer(absl::string_view(c.in).substr(0, end));
      }
      c.in.clear();
      c.in.shrink_to_fit();
      c.phase = Phase::kWriting;
      c.deadline = absl::Now() + kMetricsRequestTimeout;
      epoll_event e{};
      e.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
      e.data.fd = fd;
      epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &e);
      Write(fd, c);
      return;
    }
  }

  // The answer to one request (its request line and headers, without the final blank line).
  std::string Answer(absl::string_view request) {
    const absl::string_view line = request.substr(0, request.find("\r\n"));
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
      return PlainError("400 Bad Request", "not an HTTP/1.x request");
    }
    const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
    const bool head = parts[0] == "HEAD";
    if (parts[0] != "GET" && !head) {
      return PlainError("405 Method Not Allowed", "GET or HEAD /metrics", "Allow: GET, HEAD\r\n");
    }
    if (path != "/metrics") return PlainError("404 Not Found", "devplaced serves /metrics only");
    const absl::Time start = absl::Now();
    std::string body;
    try {
      std::vector<prometheus::MetricFamily> families;
      for (const std::shared_ptr<prometheus::Collectable>& c : collectables_) {
        std::vector<prometheus::MetricFamily> more = c->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      }
      body = prometheus::TextSerializer().Serialize(families);
    } catch (const std::exception& e) {
      return PlainError("500 Internal Server Error", absl::StrCat("metrics could not be collected: ", e.what()));
    }
    std::string out = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head);
    scrapes_->Increment();
    transferred_->Increment(static_cast<double>(out.size()));
    latencies_->Observe(absl::ToDoubleMicroseconds(absl::Now() - start));
    return out;
  }

  void Write(int fd, Connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Drop(fd, false);
        return;
      }
      c.sent += static_cast<size_t>(n);
    }
    // All written: half-close and wait (briefly) for the client to close its end.
    shutdown(fd, SHUT_WR);
    c.out.clear();
    c.out.shrink_to_fit();
    c.phase = Phase::kLingering;
    c.deadline = absl::Now() + kLingerTimeout;
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &e);
  }

  void Drop(int fd, bool timed_out) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    if (hooks_.release) hooks_.release(fd, timed_out);
    close(fd);
    connections_.erase(fd);
  }

  const int listening_;
  int ep_ = -1;
  int wake_[2] = {-1, -1};
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  const MetricsConnectionHooks hooks_;
  std::shared_ptr<prometheus::Registry> own_;
  prometheus::Counter* transferred_ = nullptr;
  prometheus::Counter* scrapes_ = nullptr;
  prometheus::Summary* latencies_ = nullptr;
  std::map<int, Connection> connections_;  // the loop thread's only
  std::thread thread_;
};

MetricsEndpoint::MetricsEndpoint() = default;
MetricsEndpoint::MetricsEndpoint(MetricsEndpoint&&) noexcept = default;
MetricsEndpoint& MetricsEndpoint::operator=(MetricsEndpoint&&) noexcept = default;
MetricsEndpoint::~MetricsEndpoint() = default;

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
    const std::string& address, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    MetricsConnectionHooks hooks) {
  const std::optional<Address> parsed = ParseMetricsAddress(address);
  if (!parsed.has_value()) return absl::InvalidArgumentError(absl::StrCat("--metrics_listen: ", kAccepted));
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (parsed->ipv6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(parsed->port));
    inet_pton(AF_INET6, parsed->host.c_str(), &a->sin6_addr);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(parsed->port));
    inet_pton(AF_INET, parsed->host.c_str(), &a->sin_addr);
    len = sizeof *a;
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", std::strerror(e)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  const int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  MetricsEndpoint endpoint;
  endpoint.server = std::make_unique<MetricsServer>(fd, collectables, std::move(hooks));  // owns fd from here
  if (absl::Status s = endpoint.server->Start(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", s.message()));
  }
  endpoint.address = parsed->ipv6 ? absl::StrCat("[", parsed->host, "]:", port) : absl::StrCat(parsed->host, ":", port);
  return endpoint;
}

}  // namespace devplace::metrics
