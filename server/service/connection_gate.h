// ConnectionGate: the connection caps of devplaced's listeners, applied at accept. Every listener
// (unix socket, TCP, TLS, and /metrics with a gate of its own) is accepted by devplaced itself and
// asks the gate before it serves the connection; a refused connection is closed at once, so a
// flood can neither exhaust the daemon's descriptors nor crowd out other peers.
//
// - A peer is a string key the listener computes (tcp_listener.h, IdentifyTcpPeer): "uid:<N>" for
//   a unix-socket client (from SO_PEERCRED), and for TCP the client's user "uid:<N>" when it
//   connects from an address of this host (loopback or any of the node's own addresses; read from
//   the kernel's socket table, so a local user cannot escape the cap through 127.0.0.2, ... or the
//   node's IP), else "ip:<address>".
// - Three kinds of peer. An ordinary connection is admitted while its peer holds fewer than
//   `max_per_peer` and fewer than `max_total` connections are open in all. A
//   reserved connection (the daemon's own liveness checks; root and the daemon's own user, who run
//   health probes) may also use `reserve` slots above `max_total`. An unowned connection (a local
//   client whose socket has no owner any more when it is looked up: it already closed, as a
//   connect-and-close flood does) is never reserved and never root's: all of them together are one
//   peer, "unowned", capped at `max_unowned`.
// - Rate: an ordinary or unowned peer opens at most `rate_per_peer` new connections a second, in
//   bursts of up to a second's worth or its cap, whichever is more (a token bucket of that many
//   tokens, refilled at `rate_per_peer` a second); past it a connection is refused at once, however
//   few it holds, so a connect-and-close flood costs the daemon an accept and a close per
//   connection, not a gRPC transport. Reserved connections are not rate-limited.
// - The descriptor limit: with `descriptor_headroom` >= 0 the total cap is also at most the soft
//   RLIMIT_NOFILE - `reserve` - `descriptor_headroom`, read at every admission (a limit lowered by
//   root after start is followed at once; raised again, the cap returns up to `max_total`).
// - TLS connections count from accept, their handshake included: stalled handshakes are bounded
//   by the same caps (and in time by --handshake_timeout).
// - gRPC closes the connections it was handed without telling anyone, so an admitted connection
//   counts until a sweep finds its descriptor closed (the descriptor no longer names the same
//   socket inode), the same descriptor number is accepted again, or its owner calls Release()
//   before closing it. Sweeps run before a cap refusal (at most one per 50 ms) and from Sweep();
//   counts are therefore never below the truth.
// Thread-safe.
#ifndef DEVPLACE_SERVER_SERVICE_CONNECTION_GATE_H_
#define DEVPLACE_SERVER_SERVICE_CONNECTION_GATE_H_

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace devplace::service {

struct ConnectionLimits {
  int max_total = 4096;     // connections open at once, past which only reserved ones are admitted (>= 1)
  int max_per_peer = 128;   // ordinary connections of one peer (>= 1)
  int reserve = 32;         // further connections for reserved peers only (>= 0)
  int max_unowned = 8;      // unowned connections, all together (>= 1)
  int rate_per_peer = 0;    // new connections per second per ordinary or unowned peer (0 = no limit)
  // Descriptors the process keeps for everything but connections; >= 0 makes the total cap follow
  // the soft RLIMIT_NOFILE (see above), -1 leaves it at max_total.
  int descriptor_headroom = -1;
};

enum class PeerKind { kOrdinary, kReserved, kUnowned };

// Who a connection belongs to, as the listener identified it.
struct Peer {
  std::string key;  // "uid:<N>", "ip:<address>"; "unowned" for kUnowned
  PeerKind kind = PeerKind::kOrdinary;
  // gRPC's name for the connection (ServerContext::peer(): "fd:<N>" for a unix socket,
  // "ipv4:<address>:<port>" / "ipv6:[<address>]:<port>" for TCP), for PeerOf(); "" = none.
  std::string name;
};

inline constexpr char kUnownedPeer[] = "unowned";

enum class Admission { kAdmitted, kPeerFull, kTotalFull, kUnownedFull, kRateLimited };

class ConnectionGate {
 public:
  explicit ConnectionGate(ConnectionLimits limits) : limits_(limits) {}

  const ConnectionLimits& limits() const { return limits_; }
  // The total cap in force now: max_total, or less to fit the descriptor limit (see above).
  int EffectiveMaxTotal() const;

  // For the connection just accepted as `fd` from `peer`: kAdmitted (counted from now on) or why
  // not (the caller closes it).
  Admission Admit(int fd, const Peer& peer);
  // The same for an ordinary (or, with `reserved`, a reserved) peer named `key`.
  Admission Admit(int fd, const std::string& key, bool reserved) {
    return Admit(fd, Peer{key, reserved ? PeerKind::kReserved : PeerKind::kOrdinary, ""});
  }
  // The caller is about to close `fd`, which it admitted: its slot is free at once. `timed_out`
  // counts it as closed for not finishing its handshake (or request) in time.
  void Release(int fd, bool timed_out = false);
  // Drops the connections whose descriptors were closed since; returns how many are open.
  int Sweep();
  // The peer key of the open connection gRPC names `name` (ServerContext::peer()), when it was
  // admitted with that name.
  std::optional<std::string> PeerOf(const std::string& name) const;

  struct Stats {
    int open = 0;                    // counted now (possibly a few already closed: see above)
    int peak = 0;                    // most open at once since the last TakePeak()
    int max_total = 0;               // the total cap in force at the last admission
    uint64_t admitted = 0;           // since start
    uint64_t refused_peer = 0;       // refused: the peer's cap
    uint64_t refused_total = 0;      // refused: the total cap (and the reserve, for reserved peers)
    uint64_t refused_unowned = 0;    // refused: the unowned connections' cap
    uint64_t refused_rate = 0;       // refused: the peer's rate of new connections
    uint64_t timed_out = 0;          // released as timed out (Release)
    // Every connection closed without being served: refused for any reason, or timed out.
    uint64_t unserved() const { return refused_peer + refused_total + refused_unowned + refused_rate + timed_out; }
  };
  Stats stats() const;
  // The peak since the last call, then restarts it from the current count.
  int TakePeak();

 private:
  struct Entry {
    std::string peer;
    std::string name;
    dev_t dev = 0;
    ino_t ino = 0;
    PeerKind kind = PeerKind::kOrdinary;
  };
  struct Bucket {
    double tokens = 0;
    absl::Time at;
  };
  void RemoveLocked(std::unordered_map<int, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Admission DecideLocked(const Peer& peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int CapOf(PeerKind kind) const { return kind == PeerKind::kUnowned ? limits_.max_unowned : limits_.max_per_peer; }
  // The tokens a full bucket holds (see Rate above).
  int BurstOf(PeerKind kind) const { return std::max(CapOf(kind), limits_.rate_per_peer); }
  // Refills `peer`'s bucket to `now`; whether it holds a token.
  bool HasTokenLocked(const Peer& peer, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ConnectionLimits limits_;
  mutable absl::Mutex mu_;
  std::unordered_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, int> by_name_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> ordinary_per_peer_ ABSL_GUARDED_BY(mu_);  // the unowned peer included
  std::unordered_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  int ordinary_ ABSL_GUARDED_BY(mu_) = 0;
  int reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_ ABSL_GUARDED_BY(mu_) = 0;
  int max_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_peer_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_unowned_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_rate_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t timed_out_ ABSL_GUARDED_BY(mu_) = 0;
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
