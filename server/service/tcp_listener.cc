#include "server/service/tcp_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/server_builder.h"
#include "server/common/address.h"
#include "server/service/tcp_peer.h"

namespace devplace::service {
namespace {

std::string Errno(int e) { return std::strerror(e); }

// Connections accepted from one listening socket per wake-up at most.
constexpr size_t kAcceptsPerRound = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Bind(const std::string& address, bool tls) {
  const std::optional<Address> parsed = ParseAddress(address, AddressUse::kListen);
  if (!parsed.has_value() || parsed->is_unix) {
    return absl::InvalidArgumentError(absl::StrCat(address, " is not host:port or [ipv6]:port"));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int e = getaddrinfo(parsed->host.c_str(), std::to_string(parsed->port).c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address, ": ", gai_strerror(e)));
  }
  std::unique_ptr<TcpListener> listener(new TcpListener(address, tls));
  int port = parsed->port;
  std::string first_error;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<uint16_t>(port));
    if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<uint16_t>(port));
    const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // [::] is both
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      const int e = errno;
      close(fd);
      // "localhost" on a host without IPv6 loopback: bind the addresses that exist.
      if (e == EADDRNOTAVAIL && ai->ai_next != nullptr) continue;
      if (first_error.empty()) first_error = Errno(e);
      continue;
    }
    if (port == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      port = AddressAndPort(bound).second;
    }
    listener->fds_.push_back(fd);
  }
  freeaddrinfo(found);
  if (!first_error.empty() || listener->fds_.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ",
                                               first_error.empty() ? "no usable address" : first_error));
  }
  listener->port_ = port;
  if (pipe2(listener->wake_, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError(Errno(errno));
  return listener;
}

TcpListener::~TcpListener() {
  Stop();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void TcpListener::Start(grpc::experimental::ExternalConnectionAcceptor* acceptor, ConnectionGate* gate,
                        const SelfConnections* self, uid_t owner_uid, AcceptErrorHook on_error) {
  thread_ = std::thread([this, acceptor, gate, self, owner_uid, on_error = std::move(on_error)] {
    AcceptLoop(acceptor, gate, self, owner_uid, on_error);
  });
}

void TcpListener::AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor, ConnectionGate* gate,
                             const SelfConnections* self, uid_t owner_uid, const AcceptErrorHook& on_error) {
  std::vector<pollfd> fds;
  for (int fd : fds_) fds.push_back({fd, POLLIN, 0});
  fds.push_back({wake_[0], POLLIN, 0});
  absl::Time last_error = absl::InfinitePast();
  // One connection from `listening`; false when there was none to accept (or accept failed).
  const auto accept_one = [&](int listening) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int conn = accept4(listening, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED) return true;
      if (e == EAGAIN) return false;
      if (on_error && absl::Now() - last_error >= absl::Seconds(1)) {
        last_error = absl::Now();
        on_error(address_, e);
      }
      // Out of descriptors or memory: back off briefly and keep accepting.
      poll(nullptr, 0, 100);
      return false;
    }
    accepted_.fetch_add(1);
    const auto [host, port] = AddressAndPort(peer);
    const bool own = IsLoopbackHost(host) && self != nullptr && self->Contains(port);
    if (own && tls_) {  // the liveness check of a TLS listener: accepted is all it asks
      close(conn);
      return true;
    }
    const Peer who = own ? Peer{absl::StrCat("uid:", owner_uid), PeerKind::kReserved, GrpcPeerName(peer)}
                         : IdentifyTcpPeer(conn, peer, owner_uid);
    if (gate->Admit(conn, who) != Admission::kAdmitted) {
      close(conn);
      return true;
    }
    const int one = 1;
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listening;
    p.fd = conn;
    acceptor->HandleNewConnection(&p);
    return true;
  };
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds.back().revents != 0) return;  // Stop()
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      // Everything waiting, up to a round's worth: a flood is drained without a poll per connection.
      for (size_t k = 0; fds[i].revents != 0 && k < kAcceptsPerRound && accept_one(fds[i].fd); ++k) {}
    }
  }
}

void TcpListener::Stop() {
  if (thread_.joinable()) {
    (void)!write(wake_[1], "s", 1);
    thread_.join();
  }
  for (int fd : fds_) close(fd);
  fds_.clear();
}

}  // namespace devplace::service
