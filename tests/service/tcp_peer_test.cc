// IdentifyTcpPeer over real TCP connections on this host: a local client counts as its user, found
// in the kernel's socket table, also when it connects from the node's own (non-loopback) address; a
// client that closed before it was looked up is the unowned peer, never root's; gRPC's name for
// the connection; this host's addresses.
#include "server/service/tcp_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/common/ports.h"

namespace devplace::service {
namespace {

constexpr uid_t kNotTheDaemon = 54321;

sockaddr_in Ipv4(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(inet_pton(AF_INET, address.c_str(), &a.sin_addr), 1) << address;
  return a;
}

// A listening socket on `address`:0 and connections to it from `address`.
class Server {
 public:
  explicit Server(const std::string& address) : address_(address) {
    listening_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Ipv4(address, 0);
    EXPECT_EQ(bind(listening_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listening_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(listening_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Server() { close(listening_); }
  int Connect() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from = Ipv4(address_, 0), to = Ipv4(address_, port_);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    return fd;
  }
  // Accepts one connection; `peer` gets the client's address.
  int Accept(sockaddr_storage* peer) const {
    socklen_t len = sizeof *peer;
    return accept4(listening_, reinterpret_cast<sockaddr*>(peer), &len, SOCK_CLOEXEC);
  }

 private:
  std::string address_;
  int listening_ = -1;
  int port_ = 0;
};

void ExpectTheClientsUser(const std::string& address) {
  Server server(address);
  const int client = server.Connect();
  sockaddr_storage peer{};
  const int conn = server.Accept(&peer);
  ASSERT_GE(conn, 0);
  const Peer who = IdentifyTcpPeer(conn, peer, kNotTheDaemon);
  EXPECT_EQ(who.key, absl::StrCat("uid:", geteuid())) << address;
  EXPECT_EQ(who.kind, geteuid() == 0 ? PeerKind::kReserved : PeerKind::kOrdinary);
  EXPECT_EQ(who.name, GrpcPeerName(peer));
  EXPECT_EQ(who.name.rfind(absl::StrCat("ipv4:", address, ":"), 0), 0u) << who.name;
  // The daemon's own user is reserved too.
  EXPECT_EQ(IdentifyTcpPeer(conn, peer, geteuid()).kind, PeerKind::kReserved);
  close(conn);
  close(client);
}

TEST(TcpPeer, ALoopbackClientIsItsUser) {
  ExpectTheClientsUser("127.0.0.1");
  ExpectTheClientsUser("127.0.0.3");  // every loopback address is this host
}

TEST(TcpPeer, AClientOnTheNodesOwnAddressIsItsUserNotTheAddress) {
  const std::string node = testing::NodeAddress();
  if (node.empty()) GTEST_SKIP() << "no non-loopback IPv4 address on this host";
  EXPECT_TRUE(IsHostAddress(node));
  ExpectTheClientsUser(node);
}

// A connect-and-close client: by the time the server looks it up, its socket is in FIN-WAIT-2 with
// no owner (the kernel reports such a socket as root's). It must not count as root.
TEST(TcpPeer, AClientThatAlreadyClosedIsTheUnownedPeerNeverRoot) {
  Server server("127.0.0.1");
  close(server.Connect());
  absl::SleepFor(absl::Milliseconds(50));  // the FIN is in
  sockaddr_storage peer{};
  const int conn = server.Accept(&peer);
  ASSERT_GE(conn, 0);
  const Peer who = IdentifyTcpPeer(conn, peer, kNotTheDaemon);
  EXPECT_EQ(who.key, kUnownedPeer);
  EXPECT_EQ(who.kind, PeerKind::kUnowned);
  close(conn);
}

TEST(TcpPeer, ARemoteAddressIsThePeerAndGrpcNamesItAsGrpcDoes) {
  EXPECT_TRUE(IsHostAddress("127.0.0.1"));
  EXPECT_TRUE(IsHostAddress("::1"));
  EXPECT_FALSE(IsHostAddress("203.0.113.77"));  // TEST-NET-3: no host has it
  sockaddr_storage ss{};
  std::memcpy(&ss, &static_cast<const sockaddr_in&>(Ipv4("203.0.113.77", 4242)), sizeof(sockaddr_in));
  EXPECT_EQ(GrpcPeerName(ss), "ipv4:203.0.113.77:4242");
  // A client the socket table cannot know: counted by its address, with no lookup.
  const Peer who = IdentifyTcpPeer(-1, ss, kNotTheDaemon);
  EXPECT_EQ(who.key, "ip:203.0.113.77");
  EXPECT_EQ(who.kind, PeerKind::kOrdinary);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(7465);
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr);
  std::memcpy(&ss, &v6, sizeof v6);
  EXPECT_EQ(GrpcPeerName(ss), "ipv4:127.0.0.1:7465");  // an IPv4-mapped address, as gRPC writes it
  inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
  std::memcpy(&ss, &v6, sizeof v6);
  EXPECT_EQ(GrpcPeerName(ss), "ipv6:[2001:db8::1]:7465");
}

}  // namespace
}  // namespace devplace::service
