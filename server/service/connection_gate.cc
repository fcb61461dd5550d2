#include "server/service/connection_gate.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/time/clock.h"

namespace devplace::service {
namespace {

// Before a cap refusal the counts are refreshed at most this often: a flood at the cap costs one
// fstat per counted connection per period, and is refused at most this long after a slot freed.
constexpr absl::Duration kSweepEvery = absl::Milliseconds(50);

}  // namespace

int ConnectionGate::EffectiveMaxTotal() const {
  if (limits_.descriptor_headroom < 0) return limits_.max_total;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return limits_.max_total;
  const int64_t fit = static_cast<int64_t>(files.rlim_cur) - limits_.reserve - limits_.descriptor_headroom;
  return static_cast<int>(std::clamp<int64_t>(fit, 1, limits_.max_total));
}

void ConnectionGate::RemoveLocked(std::unordered_map<int, Entry>::iterator it) {
  if (it->second.kind == PeerKind::kReserved) {
    --reserved_;
  } else {
    --ordinary_;
    auto peer = ordinary_per_peer_.find(it->second.peer);
    if (peer != ordinary_per_peer_.end() && --peer->second <= 0) ordinary_per_peer_.erase(peer);
  }
  if (!it->second.name.empty()) {
    if (auto named = by_name_.find(it->second.name); named != by_name_.end() && named->second == it->first) {
      by_name_.erase(named);
    }
  }
  by_fd_.erase(it);
}

void ConnectionGate::SweepLocked() {
  const absl::Time now = absl::Now();
  last_sweep_ = now;
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    struct stat st;
    const auto next = std::next(it);
    if (fstat(it->first, &st) != 0 || st.st_dev != it->second.dev || st.st_ino != it->second.ino) RemoveLocked(it);
    it = next;
  }
  // A bucket that has refilled completely is the same as none.
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const auto next = std::next(it);
    const int burst = BurstOf(it->first == kUnownedPeer ? PeerKind::kUnowned : PeerKind::kOrdinary);
    if (limits_.rate_per_peer <= 0 || it->second.tokens + absl::ToDoubleSeconds(now - it->second.at) *
                                                                limits_.rate_per_peer >= burst) {
      buckets_.erase(it);
    }
    it = next;
  }
}

Admission ConnectionGate::DecideLocked(const Peer& peer) const {
  const int open = ordinary_ + reserved_;
  if (peer.kind == PeerKind::kReserved) {
    return open < max_total_ + limits_.reserve ? Admission::kAdmitted : Admission::kTotalFull;
  }
  const auto it = ordinary_per_peer_.find(peer.key);
  if (it != ordinary_per_peer_.end() && it->second >= CapOf(peer.kind)) {
    return peer.kind == PeerKind::kUnowned ? Admission::kUnownedFull : Admission::kPeerFull;
  }
  return open < max_total_ ? Admission::kAdmitted : Admission::kTotalFull;
}

bool ConnectionGate::HasTokenLocked(const Peer& peer, absl::Time now) {
  if (limits_.rate_per_peer <= 0 || peer.kind == PeerKind::kReserved) return true;
  const double burst = BurstOf(peer.kind);
  auto [it, fresh] = buckets_.try_emplace(peer.key, Bucket{burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens = std::min(burst, b.tokens + std::max(0.0, absl::ToDoubleSeconds(now - b.at)) * limits_.rate_per_peer);
    b.at = now;
  }
  return b.tokens >= 1;
}

Admission ConnectionGate::Admit(int fd, const Peer& peer) {
  struct stat st;
  const bool known = fstat(fd, &st) == 0;
  const int max_total = EffectiveMaxTotal();
  absl::MutexLock lock(&mu_);
  max_total_ = max_total;
  // The kernel handed out this number again: whatever it named before was closed.
  if (auto it = by_fd_.find(fd); it != by_fd_.end()) RemoveLocked(it);
  const absl::Time now = absl::Now();
  Admission decision = DecideLocked(peer);
  if (decision != Admission::kAdmitted && now - last_sweep_ >= kSweepEvery) {
    SweepLocked();
    decision = DecideLocked(peer);
  }
  // Caps first (a peer at its cap is refused by it, whatever its rate), then the rate.
  if (decision == Admission::kAdmitted && !HasTokenLocked(peer, now)) decision = Admission::kRateLimited;
  switch (decision) {
    case Admission::kPeerFull: ++refused_peer_; break;
    case Admission::kTotalFull: ++refused_total_; break;
    case Admission::kUnownedFull: ++refused_unowned_; break;
    case Admission::kRateLimited: ++refused_rate_; break;
    case Admission::kAdmitted: break;
  }
  if (decision != Admission::kAdmitted || !known) return decision;
  if (auto bucket = buckets_.find(peer.key); bucket != buckets_.end() && peer.kind != PeerKind::kReserved) {
    bucket->second.tokens -= 1;
  }
  by_fd_[fd] = Entry{peer.key, peer.name, st.st_dev, st.st_ino, peer.kind};
  if (!peer.name.empty()) by_name_[peer.name] = fd;
  if (peer.kind == PeerKind::kReserved) {
    ++reserved_;
  } else {
    ++ordinary_;
    ++ordinary_per_peer_[peer.key];
  }
  ++admitted_;
  peak_ = std::max(peak_, ordinary_ + reserved_);
  return decision;
}

void ConnectionGate::Release(int fd, bool timed_out) {
  absl::MutexLock lock(&mu_);
  if (auto it = by_fd_.find(fd); it != by_fd_.end()) RemoveLocked(it);
  if (timed_out) ++timed_out_;
}

int ConnectionGate::Sweep() {
  absl::MutexLock lock(&mu_);
  SweepLocked();
  return ordinary_ + reserved_;
}

std::optional<std::string> ConnectionGate::PeerOf(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  const auto named = by_name_.find(name);
  if (named == by_name_.end()) return std::nullopt;
  const auto it = by_fd_.find(named->second);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second.peer;
}

ConnectionGate::Stats ConnectionGate::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.open = ordinary_ + reserved_;
  s.peak = peak_;
  s.max_total = max_total_ > 0 ? max_total_ : EffectiveMaxTotal();
  s.admitted = admitted_;
  s.refused_peer = refused_peer_;
  s.refused_total = refused_total_;
  s.refused_unowned = refused_unowned_;
  s.refused_rate = refused_rate_;
  s.timed_out = timed_out_;
  return s;
}

int ConnectionGate::TakePeak() {
  absl::MutexLock lock(&mu_);
  const int peak = peak_;
  peak_ = ordinary_ + reserved_;
  return peak;
}

}  // namespace devplace::service
