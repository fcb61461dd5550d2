#include "server/service/fair_queue.h"

#include <algorithm>
#include <utility>

namespace devplace::service {

FairQueue::FairQueue(FairQueueLimits limits, std::function<void(size_t)> on_change)
    : limits_(limits), on_change_(std::move(on_change)) {
  const int n = std::clamp(limits_.workers, 1, 64);
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Loop(); });
}

FairQueue::~FairQueue() {
  Shutdown();
  for (std::thread& t : workers_) t.join();
}

FairQueue::Submitted FairQueue::Submit(const std::string& peer, Work work) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return Submitted::kShuttingDown;
  int& n = in_progress_[peer];
  if (n >= limits_.max_queued_per_peer) return Submitted::kPeerFull;
  ++n;
  std::deque<Work>& q = queued_[peer];
  if (q.empty()) turns_.push_back(peer);
  q.push_back(std::move(work));
  ++total_;
  if (on_change_) on_change_(total_);
  return Submitted::kQueued;
}

void FairQueue::Shutdown() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

int FairQueue::InProgress(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  const auto it = in_progress_.find(peer);
  return it == in_progress_.end() ? 0 : it->second;
}

std::deque<std::string>::iterator FairQueue::NextTurnLocked() {
  return std::find_if(turns_.begin(), turns_.end(), [this](const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto it = running_.find(peer);
    return it == running_.end() || it->second < std::max(1, limits_.max_running_per_peer);
  });
}

void FairQueue::Loop() {
  for (;;) {
    Work work;
    std::string peer;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FairQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return (q->stopping_ && q->turns_.empty()) || q->NextTurnLocked() != q->turns_.end();
          },
          this));
      const auto turn = NextTurnLocked();
      if (turn == turns_.end()) return;  // stopping and nothing left
      peer = std::move(*turn);
      turns_.erase(turn);
      auto it = queued_.find(peer);
      work = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) {
        queued_.erase(it);
      } else {
        turns_.push_back(peer);  // its next call after every other peer's next one
      }
      ++running_[peer];
      stopping = stopping_;
    }
    work(stopping);
    absl::MutexLock lock(&mu_);
    if (auto it = running_.find(peer); it != running_.end() && --it->second <= 0) running_.erase(it);
    if (auto it = in_progress_.find(peer); it != in_progress_.end() && --it->second <= 0) in_progress_.erase(it);
    --total_;
    if (on_change_) on_change_(total_);
  }
}

}  // namespace devplace::service
