// ListenerLiveness: checks from inside the daemon that every listener still accepts and serves, by
// calling grpc.health.v1.Health/Check over a fresh connection to each listen address, every
// interval. The daemon accepts its connections itself (unix_listener.h, tcp_listener.h), and its
// own checks are admitted into the connection reserve, so a flood of other peers cannot make them
// fail. The check judges progress, not one call's latency: a failed check is "busy" (logged, not
// counted) when, since the previous round,
//   - the listener accepted connections besides the check's own (a flood being accepted), or
//   - the listener accepted (the check's own connection counts) and the daemon answered calls
//     (`answered`: RPCs whose handler sent a status, on any connection): a burst of costly calls
//     on connections already open slows the check's answer but moves this count.
// A failed check is a failure when the listener accepted nothing (its accept loop stopped), or
// when it accepted but no call at all was answered (every handler stuck). When one address fails
// `max_failures` checks in a row the checker calls `on_dead` once (devplaced exits 1 so that its
// supervisor restarts it: systemd Restart=on-failure, the Kubernetes DaemonSet).
#ifndef DEVPLACE_SERVER_SERVICE_LIVENESS_H_
#define DEVPLACE_SERVER_SERVICE_LIVENESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/service/connection_gate.h"

namespace devplace::service {

struct LivenessOptions {
  // gRPC targets to check: "unix:/path" or "host:port" with the bound port (a wildcard host such
  // as 0.0.0.0 or [::] is checked on the loopback address), or "tls:host:port" for a TLS listener,
  // checked by a connection its accept loop must close at once (it knows the port from `self`),
  // since a health call would need a client certificate: no handshake is started, none fails.
  std::vector<std::string> targets;
  // Per target, in the same order (or empty): how many connections its listener accepted so far.
  std::vector<std::function<uint64_t()>> progress;
  // How many calls the daemon answered so far, all listeners together (RpcMetrics::answered);
  // unset = the accept counts alone decide.
  std::function<uint64_t()> answered;
  // Where the checks' local ports are registered for the TCP and TLS listeners to recognise.
  SelfConnections* self = nullptr;
  // Time between rounds; each check has `timeout` as its deadline.
  absl::Duration interval = absl::Seconds(5);
  absl::Duration timeout = absl::Seconds(2);
  // Consecutive failed checks of one target that make it dead (>= 1).
  int max_failures = 3;
  // Called for each failed check (target, error message; the message starts with "busy: " when
  // the check is judged busy, as above) and once for the first dead target.
  std::function<void(const std::string& target, const std::string& error)> on_failure;
  std::function<void(const std::string& target, const std::string& error)> on_dead;
};

// The loopback target that reaches a listener bound to `address` (`host:port` with the real port,
// or `unix:/path`): 0.0.0.0 -> 127.0.0.1, [::] -> [::1], others unchanged.
std::string LoopbackTarget(const std::string& address);

class ListenerLiveness {
 public:
  explicit ListenerLiveness(LivenessOptions options);
  ~ListenerLiveness();  // Stop()
  ListenerLiveness(const ListenerLiveness&) = delete;
  ListenerLiveness& operator=(const ListenerLiveness&) = delete;

  // Starts the checking thread (first round after one interval).
  void Start();
  // Stops and joins it; returns within one check's timeout. Idempotent.
  void Stop();

 private:
  void Loop();

  const LivenessOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LIVENESS_H_
