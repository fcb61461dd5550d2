// Who a TCP connection devplaced accepted belongs to, for the connection gate (connection_gate.h):
// its user when the client is on this host, found in the kernel's socket table
// (NETLINK_SOCK_DIAG), else its IP address. Used by the TCP/TLS listeners and /metrics.
#ifndef DEVPLACE_SERVER_SERVICE_TCP_PEER_H_
#define DEVPLACE_SERVER_SERVICE_TCP_PEER_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <string>
#include <utility>

#include "server/service/connection_gate.h"

namespace devplace::service {

// The address of `ss` without its port (IPv4-mapped IPv6 written as IPv4), and its port.
std::pair<std::string, int> AddressAndPort(const sockaddr_storage& ss);

// gRPC's name for a connection from `peer` (ServerContext::peer()): "ipv4:127.0.0.1:40000",
// "ipv6:[::1]:40000" (an IPv4-mapped address as ipv4).
std::string GrpcPeerName(const sockaddr_storage& peer);

// Whether `host` (an address as AddressAndPort writes it) is one of this host's: loopback
// (127.0.0.0/8, ::1) or an address of one of its network interfaces (getifaddrs, read again at
// most once a second, so an address added or removed is seen within a second).
bool IsHostAddress(const std::string& host);

// The client end of a TCP connection whose server end is `fd`, looked up in the kernel's socket
// table of this network namespace by the connection's addresses.
struct ClientSocket {
  enum State {
    kNotFound,  // no such socket here: a remote client, another network namespace, or gone (reset)
    kOrphaned,  // it exists but no process holds it (the client closed: FIN-WAIT-2, TIME-WAIT, ...)
    kOwned,     // open in a process of user `uid`
  };
  State state = kNotFound;
  uid_t uid = static_cast<uid_t>(-1);
};
ClientSocket FindClientSocket(const sockaddr_storage& peer, const sockaddr_storage& local);

// How the gate counts a TCP connection accepted as `fd` from `peer`:
// - from an address of this host whose client socket is open: "uid:<owner>", reserved for root and
//   `owner_uid` (the daemon's user);
// - from this host but orphaned (the client closed before it was looked up), or from a loopback
//   address and not found: the unowned peer (kUnowned);
// - otherwise "ip:<address>": a remote client, or one in another network namespace whose
//   connection reaches this host's address through NAT (a container's bridge): one peer per address.
// `name` is GrpcPeerName(peer). Never fails: an address it cannot read counts as "ip:?".
Peer IdentifyTcpPeer(int fd, const sockaddr_storage& peer, uid_t owner_uid);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_TCP_PEER_H_
