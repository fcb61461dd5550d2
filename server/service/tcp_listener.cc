#include "server/service/tcp_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
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

namespace devplace::service {
namespace {

std::string Errno(int e) { return std::strerror(e); }

// The peer's address without its port, IPv4-mapped IPv6 written as IPv4; and its port.
std::pair<std::string, int> PeerAddress(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return {text, ntohs(a->sin_port)};
  }
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
    inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof text);
  } else {
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
  }
  return {text, ntohs(a->sin6_port)};
}

// Fills a sock_diag id end (address words, port) from `ss`; returns the family the client socket
// has (an IPv4-mapped peer is an AF_INET socket).
int DiagEnd(const sockaddr_storage& ss, __be32 (&addr)[4], __be16* port) {
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    addr[0] = a->sin_addr.s_addr;
    *port = a->sin_port;
    return AF_INET;
  }
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  *port = a->sin6_port;
  if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
    std::memcpy(&addr[0], &a->sin6_addr.s6_addr[12], 4);
    return AF_INET;
  }
  std::memcpy(addr, &a->sin6_addr, 16);
  return AF_INET6;
}

}  // namespace

uid_t LoopbackPeerUid(int fd) {
  sockaddr_storage peer{}, local{};
  socklen_t plen = sizeof peer, llen = sizeof local;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
    return static_cast<uid_t>(-1);
  }
  if (!IsLoopbackHost(PeerAddress(peer).first)) return static_cast<uid_t>(-1);
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  // The client's socket: its source is our peer, its destination our local end.
  msg.req.sdiag_family = static_cast<__u8>(DiagEnd(peer, msg.req.id.idiag_src, &msg.req.id.idiag_sport));
  DiagEnd(local, msg.req.id.idiag_dst, &msg.req.id.idiag_dport);
  msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  const int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return static_cast<uid_t>(-1);
  uid_t uid = static_cast<uid_t>(-1);
  alignas(nlmsghdr) char buf[1024];
  timeval tv{1, 0};
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send(nl, &msg, sizeof msg, 0) == static_cast<ssize_t>(sizeof msg)) {
    const ssize_t n = recv(nl, buf, sizeof buf, 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, static_cast<size_t>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      uid = static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
    }
  }
  close(nl);
  return uid;
}

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
      port = PeerAddress(bound).second;
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
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds.back().revents != 0) return;  // Stop()
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      const int conn = accept4(fds[i].fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EINTR || e == ECONNABORTED) continue;
        if (on_error && absl::Now() - last_error >= absl::Seconds(1)) {
          last_error = absl::Now();
          on_error(address_, e);
        }
        // Out of descriptors or memory: back off briefly and keep accepting.
        poll(nullptr, 0, 100);
        continue;
      }
      accepted_.fetch_add(1);
      const auto [host, port] = PeerAddress(peer);
      const bool own = IsLoopbackHost(host) && self != nullptr && self->Contains(port);
      if (own && tls_) {  // the liveness check of a TLS listener: accepted is all it asks
        close(conn);
        continue;
      }
      const uid_t uid = own ? owner_uid : LoopbackPeerUid(conn);
      const std::string key = uid != static_cast<uid_t>(-1) ? absl::StrCat("uid:", uid) : absl::StrCat("ip:", host);
      const bool reserved = own || (uid != static_cast<uid_t>(-1) && (uid == 0 || uid == owner_uid));
      if (gate->Admit(conn, key, reserved) != Admission::kAdmitted) {
        close(conn);
        continue;
      }
      const int one = 1;
      setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
      p.listener_fd = fds[i].fd;
      p.fd = conn;
      acceptor->HandleNewConnection(&p);
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
