// ConnectionGate: the connection caps of devplaced's listeners, applied at accept. Every listener
// (unix socket, TCP, TLS) is accepted by devplaced itself and asks the gate before it hands the
// connection to gRPC; a refused connection is closed at once, so a flood can neither exhaust the
// daemon's descriptors nor crowd out other peers.
//
// - A peer is a string key the listener computes: "uid:<N>" for a unix-socket client (from
//   SO_PEERCRED), and for TCP the client's user "uid:<N>" when it connects over loopback (read
//   from the kernel's socket table, so a local user cannot escape the cap through 127.0.0.2,
//   127.0.0.3, ...), else "ip:<address>".
// - An ordinary connection is admitted while its peer holds fewer than `max_per_peer` and all
//   ordinary peers together fewer than `max_total`. A reserved connection (the daemon's own
//   liveness checks; over the unix socket, root and the daemon's own user, who run health probes)
//   may also use `reserve` slots above `max_total`.
// - TLS connections count from accept, their handshake included: stalled handshakes are bounded
//   by the same caps (and in time by --handshake_timeout).
// - gRPC closes the connections it was handed without telling anyone, so an admitted connection
//   counts until a sweep finds its descriptor closed (the descriptor no longer names the same
//   socket inode) or the same descriptor number is accepted again. Sweeps run before a refusal
//   (at most one per 50 ms) and from Sweep(); counts are therefore never below the truth.
// Thread-safe.
#ifndef DEVPLACE_SERVER_SERVICE_CONNECTION_GATE_H_
#define DEVPLACE_SERVER_SERVICE_CONNECTION_GATE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace devplace::service {

struct ConnectionLimits {
  int max_total = 4096;    // ordinary connections, all peers together (>= 1)
  int max_per_peer = 128;  // ordinary connections of one peer (>= 1)
  int reserve = 32;        // further connections for reserved peers only (>= 0)
};

enum class Admission { kAdmitted, kPeerFull, kTotalFull };

class ConnectionGate {
 public:
  explicit ConnectionGate(ConnectionLimits limits) : limits_(limits) {}

  const ConnectionLimits& limits() const { return limits_; }

  // For the connection just accepted as `fd` from `peer`: kAdmitted (counted from now on) or why
  // not (the caller closes it).
  Admission Admit(int fd, const std::string& peer, bool reserved);
  // Drops the connections whose descriptors were closed since; returns how many are open.
  int Sweep();

  struct Stats {
    int open = 0;                  // counted now (possibly a few already closed: see above)
    int peak = 0;                  // most open at once since the last TakePeak()
    uint64_t admitted = 0;         // since start
    uint64_t refused_peer = 0;     // refused: the peer's cap
    uint64_t refused_total = 0;    // refused: the total cap (and the reserve, for reserved peers)
  };
  Stats stats() const;
  // The peak since the last call, then restarts it from the current count.
  int TakePeak();

 private:
  struct Entry {
    std::string peer;
    dev_t dev = 0;
    ino_t ino = 0;
    bool reserved = false;
  };
  void RemoveLocked(std::unordered_map<int, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Admission DecideLocked(const std::string& peer, bool reserved) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ConnectionLimits limits_;
  mutable absl::Mutex mu_;
  std::unordered_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> ordinary_per_peer_ ABSL_GUARDED_BY(mu_);
  int ordinary_ ABSL_GUARDED_BY(mu_) = 0;
  int reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_peer_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The daemon's own connections to its TCP and TLS listeners (the liveness checks), by their local
// port on the loopback address: the listener admits them into the reserve, and a TLS listener
// closes them at accept (proof that it accepts) instead of starting a handshake no one will
// finish. Thread-safe.
class SelfConnections {
 public:
  void Add(int port) {
    absl::MutexLock lock(&mu_);
    ports_[port]++;
  }
  void Remove(int port) {
    absl::MutexLock lock(&mu_);
    if (auto it = ports_.find(port); it != ports_.end() && --it->second <= 0) ports_.erase(it);
  }
  bool Contains(int port) const {
    absl::MutexLock lock(&mu_);
    return ports_.count(port) > 0;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<int, int> ports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_CONNECTION_GATE_H_
