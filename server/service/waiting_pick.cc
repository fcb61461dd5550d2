#include "server/service/waiting_pick.h"

#include <malloc.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/placement/allocation.h"
#include "server/placement/env_typos.h"
#include "server/service/wire.h"

namespace devplace::service {
namespace {

// Waiting picks are tried again at least this often, whatever else happens.
constexpr absl::Duration kRetryEvery = absl::Milliseconds(500);
// While picks wait, the heap is trimmed at most this often.
constexpr absl::Duration kTrimEvery = absl::Seconds(2);

}  // namespace

v1::PickDevicesRequest KeptForWaiting(const v1::PickDevicesRequest& request) {
  v1::PickDevicesRequest kept = request;
  v1::ResolveDeviceRequest& job = *kept.mutable_job();
  const std::vector<std::string>& read = placement::ReadEnvironmentVariables();
  auto& env = *job.mutable_env();
  for (auto it = env.begin(); it != env.end();) {
    const bool needed = std::find(read.begin(), read.end(), it->first) != read.end() ||
                        placement::NearMissOf(it->first).has_value();
    it = needed ? std::next(it) : env.erase(it);
  }
  for (v1::AllocatedDevice& d : *job.mutable_device_allocation()->mutable_devices()) {
    auto& attributes = *d.mutable_attributes();
    for (auto it = attributes.begin(); it != attributes.end();) {
      it = placement::IdentifyingAttribute(it->first, d.driver()) ? std::next(it) : attributes.erase(it);
    }
  }
  return kept;
}

WaitingPicks::WaitingPicks(Limits limits, Hooks hooks)
    : limits_(limits), hooks_(std::move(hooks)), worker_([this] { Worker(); }) {}

WaitingPicks::~WaitingPicks() {
  Shutdown();
  Join();
}

uint64_t WaitingPicks::Arrive() {
  absl::MutexLock lock(&mu_);
  return next_arrival_++;
}

WaitingPicks::Turn WaitingPicks::Arriving() const {
  absl::MutexLock lock(&mu_);
  if (stopping_) return Turn::kShuttingDown;
  // Waiting picks come first: a new one queues behind them (arrival order).
  return waiting_.empty() ? Turn::kNow : Turn::kBehindOthers;
}

void WaitingPicks::Enqueue(PendingPick pick) {
  // A waiting pick keeps what the rules read, not the whole request (its env and DRA attributes
  // may be a megabyte); the parsed request is freed here.
  pick.request = KeptForWaiting(pick.request);
  pick.kept_bytes = pick.request.SpaceUsedLong();
  std::optional<grpc::Status> refusal;
  std::string outcome;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refusal = ShuttingDown();
      outcome = "unavailable";
    } else {
      UserWaiting& mine = per_user_[pick.user];
      const int max_count = limits_.max_per_user;
      const size_t max_bytes = static_cast<size_t>(limits_.max_bytes_per_user);
      if ((max_count > 0 && mine.count >= max_count) || (max_bytes > 0 && mine.bytes + pick.kept_bytes > max_bytes)) {
        refusal = grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat(pick.user, " has ", mine.count, " pick(s) waiting, keeping ", mine.bytes,
                         " bytes; each user may have at most ", max_count,
                         " waiting (devplaced --max_waiting_picks_per_user) keeping at most ", max_bytes,
                         " bytes (--max_waiting_pick_bytes_per_user); this one keeps ", pick.kept_bytes,
                         ". Wait for one to end, or pick without --wait"));
        outcome = "too_many_waiting";
        if (mine.count == 0) per_user_.erase(pick.user);
      } else {
        ++mine.count;
        mine.bytes += pick.kept_bytes;
        // In arrival order: a pick whose parse took longer than a later one's still goes before it.
        auto after = waiting_.end();
        while (after != waiting_.begin() && std::prev(after)->arrival > pick.arrival) --after;
        waiting_.insert(after, std::move(pick));
        Counted();
      }
      // The worker takes a queued pick's deadline into account, and trims what a refused one freed.
      poked_ = true;
      trim_pending_ = true;
    }
  }
  if (refusal.has_value()) hooks_.finish(pick, *refusal, outcome);
}

void WaitingPicks::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

size_t WaitingPicks::size() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

void WaitingPicks::Shutdown() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;  // the worker answers the waiting picks UNAVAILABLE and ends
}

void WaitingPicks::Join() {
  if (worker_.joinable()) worker_.join();
}

void WaitingPicks::Counted() {
  if (hooks_.waiting) hooks_.waiting(waiting_.size());
}

void WaitingPicks::Uncount(const PendingPick& pick) {
  auto user = per_user_.find(pick.user);
  if (user == per_user_.end()) return;
  if (--user->second.count <= 0) {
    per_user_.erase(user);
  } else {
    user->second.bytes -= std::min(user->second.bytes, pick.kept_bytes);
  }
}

void WaitingPicks::Round() {
  for (bool again = true; again;) {
    again = false;
    std::list<PendingPick>::iterator it;
    // A waiter is given a device only while no lease ended since the round began: one released
    // meanwhile goes to the earliest waiter it suits, in the next round.
    WaitingRound round;
    round.ended_at_start = hooks_.ended();
    {
      absl::MutexLock lock(&mu_);
      it = waiting_.begin();
    }
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (it == waiting_.end()) break;
      }
      PendingPick& p = *it;  // stays in place: only this thread removes entries
      const bool answered = hooks_.retry(p, round);
      {
        absl::MutexLock lock(&mu_);
        if (answered) {
          Uncount(p);
          it = waiting_.erase(it);
          Counted();
        } else {
          ++it;
        }
      }
      // A device was released behind the first waiter, or the inventory changed under what older
      // waiters keep free: from the first again.
      if (round.again || hooks_.ended() != round.ended_at_start) {
        again = true;
        break;
      }
    }
  }
}

bool WaitingPicks::TrimDue() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  const bool trim = trim_pending_ && (waiting_.empty() || now - last_trim_ >= kTrimEvery);
  if (trim) {
    trim_pending_ = false;
    last_trim_ = now;
  }
  return trim;
}

void WaitingPicks::Worker() {
  for (;;) {
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (poked_ && (!waiting_.empty() || trim_pending_));
      };
      absl::Duration wait = waiting_.empty() ? absl::InfiniteDuration() : kRetryEvery;
      const absl::Time now = absl::Now();
      for (const PendingPick& p : waiting_) wait = std::min(wait, std::max(p.deadline - now, absl::ZeroDuration()));
      mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
      poked_ = false;
      stopping = stopping_;
    }
    if (stopping) {
      std::list<PendingPick> last;
      {
        absl::MutexLock lock(&mu_);
        last.swap(waiting_);
        per_user_.clear();
        Counted();
      }
      for (const PendingPick& p : last) hooks_.finish(p, ShuttingDown(), "unavailable");
      return;
    }
    Round();
    // The waiters' requests were freed; hand the heap's free pages back to the system, or a burst
    // of waiters leaves the daemon at its peak RSS for good.
    if (TrimDue()) malloc_trim(0);
  }
}

}  // namespace devplace::service
