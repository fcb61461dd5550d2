// Waiting PickDevices calls (shared hosts; rule P-PICK): a pick that found too few devices free and
// asked to wait (wait_ms) is queued and tried again whenever a lease ends, so it must keep its
// request, but only what the rules read of it (KeptForWaiting). A request within every limit may
// be about a megabyte (256 env entries of 4 KiB, or 1,024 DRA devices of 64 attributes); what the
// rules read of it is a few hundred bytes to a few hundred KiB.
//
// WaitingPicks is the queue and its worker thread. It never touches the gRPC call a pick answers:
// the service's hooks (WaitingPicks::Hooks) try a pick and answer it.
#ifndef DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_
#define DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "grpcpp/support/status.h"
#include "server/placement/pick.h"
#include "server/service/lease_holder.h"
#include "server/service/lease_state.pb.h"

namespace grpc {
class ByteBuffer;
class CallbackServerContext;
class ServerUnaryReactor;
}  // namespace grpc

namespace devplace::service {

// `request` without what no rule reads: of job.env only the variables the resolver reads
// (placement::ReadEnvironmentVariables) and their near misses (rule E-TYPO warns about those),
// of each job.device_allocation device only the attributes rule P-DRA matches on
// (placement::IdentifyingAttribute). placement::Pick answers it exactly as it answers `request`.
v1::PickDevicesRequest KeptForWaiting(const v1::PickDevicesRequest& request);

// One PickDevices call, from its arrival to its answer.
struct PendingPick {
  // The call it answers: the service's hooks use them, WaitingPicks never does.
  grpc::CallbackServerContext* ctx = nullptr;
  grpc::ServerUnaryReactor* reactor = nullptr;
  grpc::ByteBuffer* response = nullptr;
  // Once queued, only what the rules read of it (KeptForWaiting).
  v1::PickDevicesRequest request;
  LeaseHolderSpec holder;
  absl::Time arrived = absl::InfinitePast();
  // When it stops waiting: wait_ms after its arrival, or the client's deadline less 100 ms.
  absl::Time deadline = absl::InfinitePast();
  uint64_t arrival = 0;   // the order PickDevices calls began in (WaitingPicks::Arrive)
  std::string user;       // who the per-user bounds count it for: "uid:N", else the peer
  size_t kept_bytes = 0;  // what the queued request takes (SpaceUsedLong), set by Enqueue
  // The caller's uid (unix socket peer credentials); none over TCP.
  std::optional<uint32_t> uid;
  // Set by Enqueue for a pick that waits (wait_ms > 0) with a known uid: 32 hex digits, or the
  // claimed placeholder's (PickDevicesRequest.waiter_id).
  std::string waiter_id;
  // A place kept across a restart (Restore): no call, no request; it holds its place until a pick
  // of the same uid claims it, its deadline passes or claim_until passes.
  bool placeholder = false;
  absl::Time claim_until = absl::InfiniteFuture();
  // A placeholder whose pick came back (Enqueue sets it under the queue's lock; the worker, which
  // alone removes entries, removes it).
  bool claimed = false;
};

// One round of retries (WaitingPicks::Round): what the picks it tries, in arrival order, share.
// Hooks::retry reads it and adds to it.
struct WaitingRound {
  // Hooks::ended() when the round began: a pick is given devices only while no lease ended since
  // (LeaseTable::PickAndHold's only_if_ended), so a device released meanwhile goes to the earliest
  // waiter it suits.
  uint64_t ended_at_start = 0;
  // No starvation: the units free now that older picks of this round, still waiting, could use
  // (placement::PickOutcome::free_units, each marked held_back); a younger pick is not given them.
  std::vector<placement::LeasedUnit> held_back;
  // What held_back was found in (the service's inventory snapshot): a pick tried against another
  // sets `again` instead.
  std::shared_ptr<const void> held_back_in;
  // Set by Hooks::retry: the round starts again from the first waiter.
  bool again = false;
};

// The queue of waiting picks, with its own lock and worker thread.
//
// Order: picks are kept in arrival order (Arrive's numbers, taken before the request is parsed,
// so a big request does not lose its place to a later small one). A round tries every waiting
// pick in that order; when a lease ends during a round (Hooks::ended moves) the round starts
// again from the first waiter, so a device released meanwhile goes to the earliest waiter it
// suits. A new pick waits behind the queued ones (Arriving: kBehindOthers).
//
// No starvation (docs/SEMANTICS.md section 14, "Waiting picks"): a pick that stays waiting keeps
// the units free now that it could use (fewer than it wants) from every younger pick of the round
// (WaitingRound::held_back), so a waiter for several devices is not passed by younger waiters for
// one as its devices free one by one: it is served once enough of them are free, whatever younger
// picks ask for. A younger pick is still served at once from units no older waiter could use. A
// pick that can never be served here (more units than the job may use, past its user's device cap)
// is refused at once and never waits, so it holds nothing back; an older waiter holds a younger
// one back at most until it is served or its own wait ends (wait_ms, at most an hour).
//
// When: a round runs after Poke (a lease ended or was granted), after Enqueue, at least every
// 500 ms while picks wait, and at the earliest waiter's deadline (Hooks::retry answers it then).
//
// Bounds (devplaced --max_waiting_picks_per_user, --max_waiting_pick_bytes_per_user): each user
// has at most Limits::max_per_user picks queued, keeping at most Limits::max_bytes_per_user bytes
// together (0 = no bound); a pick past either is answered RESOURCE_EXHAUSTED at once
// ("too_many_waiting"), saying both bounds.
//
// Memory: the worker hands the heap's free pages back to the system (malloc_trim) when the queue
// empties after picks queued or were refused, and at most every 2 s while picks wait, so that a
// burst of waiters does not leave the daemon at its peak RSS.
//
// Restarts: a pick that waits with a known uid gets a waiter id (Hooks::queued sends it to the
// caller); the waiters are kept in the lease file (Hooks::persist) and a restarted daemon restores
// them as placeholders (Restore), which a pick of the same uid naming the id claims (Enqueue):
// it takes the placeholder's place. An id of another uid, or unknown, earns no place.
//
// Shutdown: Shutdown() does not block; from then on Arriving says kShuttingDown, Enqueue answers
// UNAVAILABLE "devplaced is shutting down" ("unavailable"), and the worker answers every queued
// pick the same and ends. Join() (and the destructor) waits for the worker.
class WaitingPicks {
 public:
  struct Limits {
    int max_per_user = 16;
    int64_t max_bytes_per_user = int64_t{16} << 20;
  };
  // Called on the worker thread, or on Enqueue's caller for a refusal, never with the queue's
  // lock held (a hook may call Poke). Each must be set.
  struct Hooks {
    // Tries `pick` once more in `round` (set aside round.held_back; add to it the units `pick`
    // keeps free when it keeps waiting; set round.again to start the round over): true when the
    // pick was answered (it leaves the queue), false when it keeps waiting.
    std::function<bool(PendingPick& pick, WaitingRound& round)> retry;
    // Answers `pick` with `status`; `outcome` names it for metrics.
    std::function<void(const PendingPick& pick, const grpc::Status& status, const std::string& outcome)> finish;
    // How many leases ended so far (LeaseTable::ended).
    std::function<uint64_t()> ended;
    // How many picks wait now, after every change (may be unset). Called with the queue's lock
    // held, so the numbers arrive in order: it must not call WaitingPicks.
    std::function<void(size_t waiting)> waiting;
    // A pick was queued with a waiter id (PendingPick::waiter_id): the service sends it to the
    // caller now (initial metadata), before any answer can be. Called with the queue's lock held
    // (the worker cannot answer the pick meanwhile): it must not call WaitingPicks. May be unset.
    std::function<void(const PendingPick& pick)> queued;
    // The waiters changed (Waiters()): the service keeps them in the lease file. Called on the
    // worker thread without the lock, after a round, and once at Shutdown before the waiting
    // picks are answered UNAVAILABLE (so that they are kept for the next daemon). May be unset.
    std::function<void(std::vector<state::Waiter> waiters)> persist;
    // A placeholder was dropped unclaimed (`why`: its deadline or the grace passed). May be unset.
    std::function<void(const PendingPick& placeholder, const std::string& why)> dropped;
  };

  // Starts the worker thread.
  WaitingPicks(Limits limits, Hooks hooks);
  // Shutdown() and Join().
  ~WaitingPicks();
  WaitingPicks(const WaitingPicks&) = delete;
  WaitingPicks& operator=(const WaitingPicks&) = delete;

  // The next arrival number (PendingPick::arrival), in the order calls began.
  uint64_t Arrive();
  enum class Turn { kNow, kBehindOthers, kShuttingDown };
  // Whether a new pick may be tried at once (nothing waits), must queue behind waiting picks, or
  // must be answered UNAVAILABLE.
  Turn Arriving() const;
  // Queues `pick` (compacted by KeptForWaiting) in arrival order, or answers it through
  // Hooks::finish: RESOURCE_EXHAUSTED past its user's bounds, UNAVAILABLE once shutting down.
  void Enqueue(PendingPick pick) ABSL_LOCKS_EXCLUDED(mu_);
  // Leases changed: a round runs.
  void Poke() ABSL_LOCKS_EXCLUDED(mu_);
  // After a restart (call before the first pick): the waiters the previous daemon kept, as
  // placeholders in their places (Waiter.place; later arrivals are numbered after them), each
  // until a pick of its uid claims it (Enqueue), its deadline, or now + `grace`, whichever is
  // first. No pick behind an unclaimed placeholder is served meanwhile. Waiters already past their
  // deadline, without an id or repeated are skipped. Returns how many were restored.
  size_t Restore(const std::vector<state::Waiter>& waiters, absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);
  // The picks waiting now that a restart can give their places back to (a waiter id and a uid),
  // placeholders included, in arrival order.
  std::vector<state::Waiter> Waiters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Picks queued now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the worker to answer the queued picks and end (after Shutdown). Idempotent.
  void Join();

 private:
  // What one user's waiting picks take.
  struct UserWaiting {
    int count = 0;
    size_t bytes = 0;
  };
  void Worker();
  // Tries every waiting pick in arrival order, holding back for the older ones (the class comment).
  void Round() ABSL_LOCKS_EXCLUDED(mu_);
  // Removes an answered pick's share from its user's count and bytes.
  void Uncount(const PendingPick& pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells Hooks::waiting how many picks wait now.
  void Counted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a pick with a known uid that may wait: a new waiter id, or the place, id and deadline of
  // the placeholder of its uid that it claims (removed from the queue).
  void Claim(PendingPick& pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls Hooks::persist when the waiters changed.
  void PersistIfChanged() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the heap is due a trim now (and marks it trimmed).
  bool TrimDue() ABSL_LOCKS_EXCLUDED(mu_);

  const Limits limits_;
  const Hooks hooks_;
  mutable absl::Mutex mu_;
  // Arrival order. Only the worker removes entries (so it may use one it reached without the
  // lock while Enqueue inserts); a std::list keeps them in place meanwhile.
  std::list<PendingPick> waiting_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, UserWaiting> per_user_ ABSL_GUARDED_BY(mu_);
  uint64_t next_arrival_ ABSL_GUARDED_BY(mu_) = 0;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  // Whether a waiter with an id came or went since Hooks::persist was last called.
  bool waiters_changed_ ABSL_GUARDED_BY(mu_) = false;
  // Claimed placeholders still in waiting_ (the worker removes them): not counted as waiting.
  size_t claimed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration restore_grace_ ABSL_GUARDED_BY(mu_);  // Restore's grace
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Whether picks queued or were refused since the heap was last trimmed.
  bool trim_pending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_trim_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread worker_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_
