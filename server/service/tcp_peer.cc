#include "server/service/tcp_peer.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/common/address.h"

namespace devplace::service {
namespace {

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

// This host's interface addresses, as AddressAndPort writes them; read again when a second old.
class HostAddresses {
 public:
  bool Contains(const std::string& host) {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - read_at_ >= absl::Seconds(1) || now < read_at_) {
      Read();
      read_at_ = now;
    }
    return addresses_.count(host) > 0;
  }

 private:
  void Read() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return;  // keep the last list
    addresses_.clear();
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
      sockaddr_storage ss{};
      std::memcpy(&ss, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      addresses_.insert(AddressAndPort(ss).first);
    }
    freeifaddrs(list);
  }

  absl::Mutex mu_;
  absl::Time read_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::set<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::pair<std::string, int> AddressAndPort(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return {text, ntohs(a->sin_port)};
  }
  if (ss.ss_family != AF_INET6) return {"?", 0};
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
    inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof text);
  } else {
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
  }
  return {text, ntohs(a->sin6_port)};
}

std::string GrpcPeerName(const sockaddr_storage& peer) {
  const auto [host, port] = AddressAndPort(peer);
  if (host.find(':') != std::string::npos) return absl::StrCat("ipv6:[", host, "]:", port);
  return absl::StrCat("ipv4:", host, ":", port);
}

bool IsHostAddress(const std::string& host) {
  if (IsLoopbackHost(host)) return true;
  static HostAddresses* const addresses = new HostAddresses;  // never destroyed: listener threads use it
  return addresses->Contains(host);
}

ClientSocket FindClientSocket(const sockaddr_storage& peer, const sockaddr_storage& local) {
  ClientSocket found;
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
  if (nl < 0) return found;
  alignas(nlmsghdr) char buf[1024];
  timeval tv{1, 0};
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send(nl, &msg, sizeof msg, 0) == static_cast<ssize_t>(sizeof msg)) {
    const ssize_t n = recv(nl, buf, sizeof buf, 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
    if (n > 0 && NLMSG_OK(h, static_cast<size_t>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
        h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      // A socket no process holds has no inode; the kernel reports its uid as root's.
      found.state = d->idiag_inode == 0 ? ClientSocket::kOrphaned : ClientSocket::kOwned;
      if (found.state == ClientSocket::kOwned) found.uid = d->idiag_uid;
    }
  }
  close(nl);
  return found;
}

Peer IdentifyTcpPeer(int fd, const sockaddr_storage& peer, uid_t owner_uid) {
  const std::string host = AddressAndPort(peer).first;
  Peer out{absl::StrCat("ip:", host), PeerKind::kOrdinary, GrpcPeerName(peer)};
  if (!IsHostAddress(host)) return out;
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  ClientSocket client;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) client = FindClientSocket(peer, local);
  switch (client.state) {
    case ClientSocket::kOwned:
      out.key = absl::StrCat("uid:", client.uid);
      if (client.uid == 0 || client.uid == owner_uid) out.kind = PeerKind::kReserved;
      break;
    case ClientSocket::kOrphaned:
      out.key = kUnownedPeer;
      out.kind = PeerKind::kUnowned;
      break;
    case ClientSocket::kNotFound:
      // Loopback never leaves this network namespace: the client is gone. A node address may be
      // another namespace's connection through NAT: counted by address, as a remote client.
      if (IsLoopbackHost(host)) {
        out.key = kUnownedPeer;
        out.kind = PeerKind::kUnowned;
      }
      break;
  }
  return out;
}

}  // namespace devplace::service
