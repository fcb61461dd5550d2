// devplaced's TCP and TLS listeners, accepted by devplaced itself (not by gRPC's accept loop) so
// that every connection passes the ConnectionGate (connection_gate.h) before gRPC sees it: the
// admitted ones are handed to gRPC through an external-connection acceptor registered with the
// listener's credentials (plaintext or TLS, whose handshake gRPC then runs, bounded by
// grpc.server_handshake_timeout_ms); refused ones are closed at once. gRPC names their calls'
// peers as usual ("ipv4:127.0.0.1:PORT").
#ifndef DEVPLACE_SERVER_SERVICE_TCP_LISTENER_H_
#define DEVPLACE_SERVER_SERVICE_TCP_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/service/connection_gate.h"

namespace grpc::experimental {
class ExternalConnectionAcceptor;
}

namespace devplace::service {

// What an accept loop reports: accept() failures (errno), at most one a second per listener.
using AcceptErrorHook = std::function<void(const std::string& listener, int error)>;

class TcpListener {
 public:
  // Binds and listens on every address `host:port` / `[v6]:port` resolves to, as gRPC does:
  // "localhost" gives 127.0.0.1 and ::1, "[::]" is dual-stack, port 0 picks one free port for
  // all of them. Errors are UNAVAILABLE naming the address and the errno text.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Bind(const std::string& address, bool tls);
  ~TcpListener();  // Stop()

  int port() const { return port_; }
  // Connections accepted so far (admitted or refused): progress that tells a busy listener from a
  // dead one.
  uint64_t accepted() const { return accepted_.load(); }

  // Accepts on a thread of its own. Each connection is counted by IdentifyTcpPeer (tcp_peer.h);
  // admitted ones go to `acceptor` (owned by the gRPC server built with it, started before this
  // call); `self` names the daemon's own checks; `owner_uid` is the daemon's user (its local
  // connections, like root's, are reserved).
  void Start(grpc::experimental::ExternalConnectionAcceptor* acceptor, ConnectionGate* gate,
             const SelfConnections* self, uid_t owner_uid, AcceptErrorHook on_error);
  // Stops accepting and closes the listening sockets; joins the thread. Idempotent.
  void Stop();

 private:
  TcpListener(std::string address, bool tls) : address_(std::move(address)), tls_(tls) {}
  void AcceptLoop(grpc::experimental::ExternalConnectionAcceptor* acceptor, ConnectionGate* gate,
                  const SelfConnections* self, uid_t owner_uid, const AcceptErrorHook& on_error);

  const std::string address_;
  const bool tls_;
  std::vector<int> fds_;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<uint64_t> accepted_{0};
  std::thread thread_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_TCP_LISTENER_H_
