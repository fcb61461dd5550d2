#include "server/service/connection_gate.h"

#include <sys/stat.h>

#include <algorithm>

#include "absl/time/clock.h"

namespace devplace::service {
namespace {

// Before a refusal the counts are refreshed at most this often: a flood at the cap costs one
// fstat per counted connection per period, and is refused at most this long after a slot freed.
constexpr absl::Duration kSweepEvery = absl::Milliseconds(50);

}  // namespace

void ConnectionGate::RemoveLocked(std::unordered_map<int, Entry>::iterator it) {
  if (it->second.reserved) {
    --reserved_;
  } else {
    --ordinary_;
    auto peer = ordinary_per_peer_.find(it->second.peer);
    if (peer != ordinary_per_peer_.end() && --peer->second <= 0) ordinary_per_peer_.erase(peer);
  }
  by_fd_.erase(it);
}

void ConnectionGate::SweepLocked() {
  last_sweep_ = absl::Now();
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    struct stat st;
    const auto next = std::next(it);
    if (fstat(it->first, &st) != 0 || st.st_dev != it->second.dev || st.st_ino != it->second.ino) RemoveLocked(it);
    it = next;
  }
}

Admission ConnectionGate::DecideLocked(const std::string& peer, bool reserved) const {
  const int open = ordinary_ + reserved_;
  if (reserved) return open < limits_.max_total + limits_.reserve ? Admission::kAdmitted : Admission::kTotalFull;
  const auto it = ordinary_per_peer_.find(peer);
  if (it != ordinary_per_peer_.end() && it->second >= limits_.max_per_peer) return Admission::kPeerFull;
  return open < limits_.max_total ? Admission::kAdmitted : Admission::kTotalFull;
}

Admission ConnectionGate::Admit(int fd, const std::string& peer, bool reserved) {
  struct stat st;
  const bool known = fstat(fd, &st) == 0;
  absl::MutexLock lock(&mu_);
  // The kernel handed out this number again: whatever it named before was closed.
  if (auto it = by_fd_.find(fd); it != by_fd_.end()) RemoveLocked(it);
  Admission decision = DecideLocked(peer, reserved);
  if (decision != Admission::kAdmitted && absl::Now() - last_sweep_ >= kSweepEvery) {
    SweepLocked();
    decision = DecideLocked(peer, reserved);
  }
  if (decision == Admission::kPeerFull) ++refused_peer_;
  if (decision == Admission::kTotalFull) ++refused_total_;
  if (decision != Admission::kAdmitted || !known) return decision;
  by_fd_[fd] = Entry{peer, st.st_dev, st.st_ino, reserved};
  if (reserved) {
    ++reserved_;
  } else {
    ++ordinary_;
    ++ordinary_per_peer_[peer];
  }
  ++admitted_;
  peak_ = std::max(peak_, ordinary_ + reserved_);
  return decision;
}

int ConnectionGate::Sweep() {
  absl::MutexLock lock(&mu_);
  SweepLocked();
  return ordinary_ + reserved_;
}

ConnectionGate::Stats ConnectionGate::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{ordinary_ + reserved_, peak_, admitted_, refused_peer_, refused_total_};
}

int ConnectionGate::TakePeak() {
  absl::MutexLock lock(&mu_);
  const int peak = peak_;
  peak_ = ordinary_ + reserved_;
  return peak;
}

}  // namespace devplace::service
