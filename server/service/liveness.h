// ListenerLiveness: checks from inside the daemon that every listener still accepts, by calling
// grpc.health.v1.Health/Check over a fresh connection to each listen address, every interval.
// gRPC 1.51's accept loop can give up for good after EMFILE (descriptor exhaustion,
// grpc/grpc#20418): the process then looks alive but serves nobody. When one address fails
// `max_failures` checks in a row the checker calls `on_dead` once (devplaced exits 1 so that its
// supervisor restarts it: systemd Restart=on-failure, the Kubernetes DaemonSet).
#ifndef DEVPLACE_SERVER_SERVICE_LIVENESS_H_
#define DEVPLACE_SERVER_SERVICE_LIVENESS_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace devplace::service {

struct LivenessOptions {
  // gRPC targets to check: "unix:/path" or "host:port" with the bound port (a wildcard host such
  // as 0.0.0.0 or [::] is checked on the loopback address), or "tls:host:port" for a TLS listener,
  // checked by a connection the listener must read and close (a failed handshake), since a
  // health call would need a client certificate.
  std::vector<std::string> targets;
  // Time between rounds; each check has `timeout` as its deadline.
  absl::Duration interval = absl::Seconds(5);
  absl::Duration timeout = absl::Seconds(2);
  // Consecutive failed checks of one target that make it dead (>= 1).
  int max_failures = 3;
  // Called for each failed check (target, error message) and once for the first dead target.
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
