// What DevicePlacementService reports as it answers, for metrics and log lines (devplaced's
// DaemonObserver, server/daemon/observer.h, counts and logs them). No gRPC here.
#ifndef DEVPLACE_SERVER_SERVICE_SERVICE_OBSERVER_H_
#define DEVPLACE_SERVER_SERVICE_SERVICE_OBSERVER_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/resolver.h"

namespace devplace::service {

// One step of a lease's life, for the trail an operator reads ("who had GPU 1 at 10:37?").
struct LeaseEvent {
  // "granted" (a pick answered), "released" (LeaseRelease), "renewed" (LeaseKeepAlive), "ended"
  // (its holder exited: the process, or the last process of its group), "expired" (its time to
  // live passed), "refused" (a pick answered with an error: no lease); devplaced itself logs
  // "restored" (kept from the lease file at start). A waiting pick across a restart (no lease;
  // outcome and error say the rest): "waiter_returned" (its caller came back and has its place,
  // outcome "place_N"), "waiter_dropped" (a placeholder that was not claimed; error says why).
  std::string action;
  v1::LeaseInfo lease;  // whole (id, pid, uid); empty for "refused"
  std::string user;     // who called: "uid:N", else the peer's address; empty for ended and expired
  std::string outcome;  // refused: the pick's outcome (OnPick's names)
  std::string error;    // refused: the error's message
};

// Every method may be called from any gRPC thread or the service's workers, several at once: an
// implementation must be thread-safe and quick (a counter, a log line). Each default does nothing.
class ServiceObserver {
 public:
  virtual ~ServiceObserver() = default;
  // One library of one ResolveDevice answer sent with OK whose job release is newer than the
  // rules (V-SKEW), cached repeats included.
  virtual void OnNewerLibrary(const placement::NewerLibrary& /*newer*/) {}
  // One PickDevices answer: its outcome ("answered", "no_free_device", "no_free_device_after_wait",
  // "invalid_argument", "failed_precondition", "resource_exhausted", "over_user_device_cap",
  // "lease_not_durable", "too_many_waiting", "too_many_queued_calls", "cancelled", "unavailable") and the time
  // from its arrival to its answer.
  virtual void OnPick(const std::string& /*outcome*/, absl::Duration /*latency*/) {}
  // The number of leases held, after every change.
  virtual void OnLeasesHeld(size_t /*held*/) {}
  // The number of PickDevices calls waiting (wait_ms), after every change. Called with the waiting
  // picks' lock held (so that the numbers arrive in order): it must not call into the service.
  virtual void OnPicksWaiting(size_t /*waiting*/) {}
  // One LeaseRelease ("release") or LeaseKeepAlive ("keep_alive") answer by outcome ("ok",
  // "not_found", "permission_denied", "invalid_argument", "failed_precondition").
  virtual void OnLeaseCall(const std::string& /*call*/, const std::string& /*outcome*/) {}
  // A lease was granted, released, renewed, ended or expired, or a pick was refused.
  virtual void OnLeaseEvent(const LeaseEvent& /*event*/) {}
  // The lease table could not be written to its file (LeaseTable::Restore's path): the change
  // stands in memory.
  virtual void OnLeaseWriteError(const absl::Status& /*error*/) {}
  // The number of costly calls (ResolveDevice not answered from the cache, PickDevices before its
  // first attempt's answer) queued or running on the service's workers, after every change (with
  // the queue's lock held: must not call into the service); and one such call refused because its
  // peer had --max_queued_calls_per_peer of them.
  virtual void OnCostlyCallsQueued(size_t /*queued*/) {}
  virtual void OnCostlyCallRefused() {}
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_SERVICE_OBSERVER_H_
