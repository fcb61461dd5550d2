// Refresh rounds of devplaced: RefreshInventory calls, SIGHUP and start-up ask for a new probe,
// and one worker thread runs them, one round at a time. The handler (DevicePlacementService)
// parses and authorizes the call; this class decides when the probe runs and answers the call.
#ifndef DEVPLACE_SERVER_SERVICE_REFRESH_ROUNDS_H_
#define DEVPLACE_SERVER_SERVICE_REFRESH_ROUNDS_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/inventory/store.h"

namespace devplace::service {

// The refresh worker, with its own lock and thread.
//
// Rounds: every call queued while a round runs shares the next round: one run of the refresh
// function for all of them, whatever their number, its snapshot rendered once (RenderFn) and sent
// to each; a failed refresh answers each with its error (DEADLINE_EXCEEDED, INTERNAL, ...). The
// probe never runs on a gRPC thread.
//
// Rate limit (RefreshInventory's --refresh_min_interval): a call that would start a round of its
// own (none is queued) less than `min_interval` after the previous caller-started round began is
// answered RESOURCE_EXHAUSTED at once, with the time to wait ("retry in N ms"); a call that finds a
// round queued joins it. Zero: no limit. Request() (SIGHUP, start-up) is never limited and does not
// count as a caller-started round.
//
// Shutdown: Shutdown() does not block; from then on a call is answered UNAVAILABLE "devplaced is
// shutting down" at once and Request() is ignored; the worker answers the calls it has queued the
// same, without a new probe, once the round it runs (if any) returned. The destructor waits for it.
class RefreshRounds {
 public:
  // Runs one probe: the new snapshot, or why there is none.
  using RefreshFn = std::function<absl::StatusOr<inventory::Snapshot>()>;
  // The bytes a caller gets for a fresh snapshot (a serialized v1::Inventory).
  using RenderFn = std::function<std::string(const v1::Inventory&)>;

  // Starts the worker thread. `refresh` and `render` run on it.
  RefreshRounds(RefreshFn refresh, RenderFn render, absl::Duration min_interval);
  // Shutdown(), then waits for the worker.
  ~RefreshRounds();
  RefreshRounds(const RefreshRounds&) = delete;
  RefreshRounds& operator=(const RefreshRounds&) = delete;

  // Queues a call for the next round (its reactor is finished by the worker, with `response` set
  // when the probe succeeded), or finishes it at once: RESOURCE_EXHAUSTED past the rate limit,
  // UNAVAILABLE once shutting down. `reactor` and `response` must stay valid until finished.
  void Enqueue(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* response) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for a round without a caller waiting on it; it shares a round with queued calls.
  void Request() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the worker to end (after Shutdown). Idempotent.
  void Join();

 private:
  struct Waiter {
    grpc::ServerUnaryReactor* reactor;  // null for Request()
    grpc::ByteBuffer* response;         // a serialized v1::Inventory
  };
  void Worker();
  // Runs one round's probe and answers its callers.
  void Run(const std::vector<Waiter>& round);

  const RefreshFn refresh_;
  const RenderFn render_;
  const absl::Duration min_interval_;
  absl::Mutex mu_;
  absl::Time last_caller_round_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool caller_round_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Waiter> pending_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_REFRESH_ROUNDS_H_
