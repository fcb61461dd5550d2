#include "server/service/waiting_pick.h"

#include <malloc.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
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

// When a placeholder stops holding its place: its deadline or the restart's grace.
absl::Time PlaceholderEnds(const PendingPick& p) { return std::min(p.deadline, p.claim_until); }

// When the worker must look at `p` again.
absl::Time Due(const PendingPick& p) { return p.placeholder ? PlaceholderEnds(p) : p.deadline; }

// 16 random bytes as 32 hex digits: a waiter id nobody can guess (getrandom, else the clock and
// address mixed: an id is matched together with its uid, so a guess alone earns nothing).
std::string NewWaiterId() {
  char bytes[16] = {};
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    const uint64_t t = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
    const uint64_t a = reinterpret_cast<uintptr_t>(&bytes) ^ (t * 0x9E3779B97F4A7C15ull);
    std::memcpy(bytes, &t, 8);
    std::memcpy(bytes + 8, &a, 8);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

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
        Claim(pick);
        // In arrival order: a pick whose parse took longer than a later one's still goes before it.
        auto after = waiting_.end();
        while (after != waiting_.begin() && std::prev(after)->arrival > pick.arrival) --after;
        const auto queued = waiting_.insert(after, std::move(pick));
        if (!queued->waiter_id.empty()) {
          waiters_changed_ = true;
          if (hooks_.queued) hooks_.queued(*queued);
        }
        Counted();
      }
      // The worker takes a queued pick's deadline into account, and trims what a refused one freed.
      poked_ = true;
      trim_pending_ = true;
    }
  }
  if (refusal.has_value()) hooks_.finish(pick, *refusal, outcome);
}

void WaitingPicks::Claim(PendingPick& pick) {
  if (!pick.uid.has_value() || pick.request.wait_ms() == 0) return;  // no place to give back
  pick.waiter_id = NewWaiterId();
  const std::string& claimed = pick.request.waiter_id();
  if (claimed.empty()) return;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    // Only the uid that waited gets its place back: an id presented by another earns nothing.
    if (!it->placeholder || it->claimed || it->waiter_id != claimed || it->uid != pick.uid) continue;
    pick.arrival = it->arrival;
    pick.deadline = std::min(pick.deadline, it->deadline);  // the client's time left never extends it
    pick.waiter_id = claimed;
    it->claimed = true;  // the worker removes it (it may be looking at it now)
    ++claimed_;
    return;
  }
}

size_t WaitingPicks::Restore(const std::vector<state::Waiter>& waiters, absl::Duration grace) {
  const absl::Time now = absl::Now();
  size_t restored = 0;
  {
    absl::MutexLock lock(&mu_);
    restore_grace_ = grace;
    for (const state::Waiter& w : waiters) {
      const absl::Time deadline = absl::FromUnixMillis(w.deadline_unix_ms());
      const bool repeated = std::any_of(waiting_.begin(), waiting_.end(),
                                        [&](const PendingPick& p) { return p.waiter_id == w.waiter_id(); });
      if (w.waiter_id().empty() || w.waiter_id().size() > 64 || repeated || deadline <= now) continue;
      PendingPick p;
      p.placeholder = true;
      p.waiter_id = w.waiter_id();
      p.uid = w.uid();
      p.user = absl::StrCat("uid:", w.uid());
      p.arrival = w.place();
      p.arrived = now;
      p.deadline = deadline;
      p.claim_until = now + grace;
      auto after = waiting_.end();
      while (after != waiting_.begin() && std::prev(after)->arrival > p.arrival) --after;
      waiting_.insert(after, std::move(p));
      next_arrival_ = std::max(next_arrival_, w.place() + 1);
      ++restored;
    }
    if (restored > 0) {
      waiters_changed_ = true;
      poked_ = true;
      Counted();
    }
  }
  return restored;
}

std::vector<state::Waiter> WaitingPicks::Waiters() const {
  std::vector<state::Waiter> out;
  absl::MutexLock lock(&mu_);
  for (const PendingPick& p : waiting_) {
    if (p.waiter_id.empty() || !p.uid.has_value() || p.claimed) continue;
    state::Waiter& w = out.emplace_back();
    w.set_waiter_id(p.waiter_id);
    w.set_uid(*p.uid);
    w.set_place(p.arrival);
    w.set_deadline_unix_ms(absl::ToUnixMillis(p.deadline));
  }
  return out;
}

void WaitingPicks::PersistIfChanged() {
  {
    absl::MutexLock lock(&mu_);
    if (!waiters_changed_) return;
    waiters_changed_ = false;
  }
  if (hooks_.persist) hooks_.persist(Waiters());
}

void WaitingPicks::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

size_t WaitingPicks::size() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size() - claimed_;
}

void WaitingPicks::Shutdown() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;  // the worker answers the waiting picks UNAVAILABLE and ends
}

void WaitingPicks::Join() {
  if (worker_.joinable()) worker_.join();
}

void WaitingPicks::Counted() {
  if (hooks_.waiting) hooks_.waiting(waiting_.size() - claimed_);  // a claimed placeholder's pick counts
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
      bool hold = false;  // an unclaimed placeholder holds its place: nobody behind it is served
      std::vector<PendingPick> dropped;
      std::list<PendingPick> held_out;  // picks behind it whose wait ended
      absl::Duration grace;
      {
        absl::MutexLock lock(&mu_);
        grace = restore_grace_;
        while (it != waiting_.end() && it->placeholder) {
          if (!it->claimed && absl::Now() < PlaceholderEnds(*it)) {
            hold = true;
            break;
          }
          if (!it->claimed) dropped.push_back(*it);  // claimed: its pick holds the place now
          if (it->claimed) --claimed_;
          it = waiting_.erase(it);
          waiters_changed_ = true;
          Counted();
        }
        if (hold) {
          // Held back behind it: a pick whose own wait ended (wait_ms 0 included) is answered now,
          // not tried, so that it never takes what the placeholder keeps.
          for (auto behind = std::next(it); behind != waiting_.end();) {
            if (behind->placeholder || absl::Now() < behind->deadline) {
              ++behind;
              continue;
            }
            Uncount(*behind);
            if (!behind->waiter_id.empty()) waiters_changed_ = true;
            held_out.splice(held_out.end(), waiting_, behind++);
            Counted();
          }
        }
        hold = hold || it == waiting_.end();
      }
      for (const PendingPick& gone : dropped) {
        if (hooks_.dropped) {
          hooks_.dropped(gone, gone.deadline <= gone.claim_until
                                   ? "its wait ended before its caller came back"
                                   : "its caller did not come back within --waiter_restart_grace");
        }
      }
      for (const PendingPick& late : held_out) {
        hooks_.finish(late,
                      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   absl::StrCat("no device for this pick now: the free ones are kept for the picks that were "
                                                "waiting when devplaced restarted, until they come back (for at most ",
                                                absl::FormatDuration(grace), " after the restart, "
                                                "devplaced --waiter_restart_grace); a pick with a wait (--wait, wait=) "
                                                "that has not ended queues behind them")),
                      "no_free_device");
      }
      held_out.clear();
      if (hold) break;
      PendingPick& p = *it;  // stays in place: only this thread removes entries
      const bool answered = hooks_.retry(p, round);
      {
        absl::MutexLock lock(&mu_);
        if (answered) {
          Uncount(p);
          if (!p.waiter_id.empty()) waiters_changed_ = true;
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
      for (const PendingPick& p : waiting_) wait = std::min(wait, std::max(Due(p) - now, absl::ZeroDuration()));
      mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
      poked_ = false;
      stopping = stopping_;
    }
    if (stopping) {
      // The waiters as they are now are kept for the next daemon, before they are told to go.
      if (hooks_.persist) hooks_.persist(Waiters());
      std::list<PendingPick> last;
      {
        absl::MutexLock lock(&mu_);
        last.swap(waiting_);
        per_user_.clear();
        claimed_ = 0;
        Counted();
      }
      for (const PendingPick& p : last) {
        if (!p.placeholder) hooks_.finish(p, ShuttingDown(), "unavailable");
      }
      return;
    }
    Round();
    PersistIfChanged();
    // The waiters' requests were freed; hand the heap's free pages back to the system, or a burst
    // of waiters leaves the daemon at its peak RSS for good.
    if (TrimDue()) malloc_trim(0);
  }
}

}  // namespace devplace::service
