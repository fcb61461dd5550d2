// The thread that notices a lease holder's end (lease_holder.h) without waiting for the next pick:
// it sleeps in poll(2) on the holders' pidfds (readable when a process exits), an eventfd (Wake: a
// lease with a new pidfd was added) and a timer (the earliest TTL expiry, and at most `recheck`, 1 s
// by default, so that holders without a pidfd, whose end shows only in /proc, and process groups
// are checked), then calls `sweep`. The LeaseTable owns one (lease_table.h). No gRPC.
#ifndef DEVPLACE_SERVER_SERVICE_LEASE_WATCHER_H_
#define DEVPLACE_SERVER_SERVICE_LEASE_WATCHER_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace devplace::service {

class LeaseWatcher {
 public:
  // What to wait for before the next sweep.
  struct Waits {
    std::vector<int> pidfds;                          // polled for POLLIN; negative ones are ignored
    absl::Time next_expiry = absl::InfiniteFuture();  // the earliest time a TTL lease ends
  };
  // Starts the thread. Before each wait it calls `waits`, after each wake-up `sweep` (both on the
  // watcher's thread, never under its lock); the pidfds `waits` returns must stay open until
  // `sweep` has been called (a number closed and reused meanwhile only wakes the watcher early).
  // `recheck`: the longest wait between two sweeps (positive).
  LeaseWatcher(std::function<Waits()> waits, std::function<void()> sweep, absl::Duration recheck = absl::Seconds(1));
  // Stops the thread: wakes it and joins it (a sweep under way finishes first).
  ~LeaseWatcher();
  LeaseWatcher(const LeaseWatcher&) = delete;
  LeaseWatcher& operator=(const LeaseWatcher&) = delete;

  // Ends the current wait: `waits` is asked again (a lease was added, its pidfd is to be polled).
  // Without an eventfd (eventfd(2) failed) the next wait begins within `recheck`.
  void Wake();

 private:
  void Run();

  const std::function<Waits()> waits_;
  const std::function<void()> sweep_;
  const absl::Duration recheck_;
  const int wake_fd_;  // an eventfd, -1 when it could not be made
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_LEASE_WATCHER_H_
