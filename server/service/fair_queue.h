// FairQueue: the costly part of a call (parsing a large request and resolving it: ResolveDevice,
// and PickDevices up to its first attempt) runs on a few
// worker threads of devplaced's own, taken from each peer's queue in turn (round robin), instead
// of on gRPC's callback threads in arrival order. Measured: a burst of 100 ResolveDevice calls of
// ~748 KiB each spends most of the daemon's CPU in the handler (the resolver's environment checks
// over every variable), and gRPC runs handlers in arrival order on as many threads as cores, so
// another user's call waited behind the whole burst. Here one peer runs at most
// `max_running_per_peer` calls at once (one fewer than the workers, so a worker is always left for
// another peer's call, which then shares the cores with the burst instead of waiting for one of
// its calls to end), peers with work queued are served in turn, and a peer has at most
// `max_queued_per_peer` calls queued or running (past it a call is refused at once, before its
// request is parsed). A peer is the key the connection caps count by
// (ConnectionGate: "uid:N" for a local client, the address of a remote one).
#ifndef DEVPLACE_SERVER_SERVICE_FAIR_QUEUE_H_
#define DEVPLACE_SERVER_SERVICE_FAIR_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace devplace::service {

struct FairQueueLimits {
  int workers = 2;                 // threads running queued work (1..64)
  int max_running_per_peer = 1;    // calls of one peer running at once (>= 1; at most `workers`)
  int max_queued_per_peer = 256;   // calls of one peer queued or running at once (>= 1)
};

class FairQueue {
 public:
  // Runs one call's work; `shutting_down` is true for work still queued when Shutdown() was
  // called (it should answer at once, e.g. UNAVAILABLE). Must not throw.
  using Work = std::function<void(bool shutting_down)>;
  // `on_change` (may be empty) gets the number of calls queued or running, after every change; it
  // is called with the queue's lock held and must be quick and not call back into the queue.
  explicit FairQueue(FairQueueLimits limits, std::function<void(size_t)> on_change = nullptr);
  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;
  // Shutdown(), then joins the workers once every queued work has run.
  ~FairQueue();

  enum class Submitted { kQueued, kPeerFull, kShuttingDown };
  // Queues `work` for `peer` (kQueued). Otherwise `work` is neither kept nor run: kPeerFull when
  // the peer already has max_queued_per_peer calls queued or running, kShuttingDown once
  // Shutdown() was called.
  Submitted Submit(const std::string& peer, Work work);
  // From now on Submit refuses, and what is still queued runs with shutting_down = true. Does not block.
  void Shutdown();
  // Calls of `peer` queued or running now.
  int InProgress(const std::string& peer) const;
  const FairQueueLimits& limits() const { return limits_; }

 private:
  void Loop();
  // The first peer in turn that has work queued and may run one more call; turns_.end() if none.
  std::deque<std::string>::iterator NextTurnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FairQueueLimits limits_;
  const std::function<void(size_t)> on_change_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::deque<Work>> queued_ ABSL_GUARDED_BY(mu_);  // peers with work waiting
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);  // those peers, the next to be served first
  std::map<std::string, int> in_progress_ ABSL_GUARDED_BY(mu_);  // queued or running, per peer
  std::map<std::string, int> running_ ABSL_GUARDED_BY(mu_);      // running, per peer
  size_t total_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_FAIR_QUEUE_H_
