// FairQueue on its real worker threads: peers are served in turn, a peer's calls past its cap are
// refused at once, and work still queued at shutdown runs told so. Waits for events (a blocked
// worker, notifications), never for a duration.
#include "server/service/fair_queue.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace devplace::service {
namespace {

// What the work ran, in order, and whether each was told the queue was shutting down.
struct Record {
  absl::Mutex mu;
  std::vector<std::string> ran ABSL_GUARDED_BY(mu);
  int shutting_down ABSL_GUARDED_BY(mu) = 0;

  FairQueue::Work Note(const std::string& what) {
    return [this, what](bool stopping) {
      absl::MutexLock lock(&mu);
      ran.push_back(what);
      if (stopping) ++shutting_down;
    };
  }
  size_t Size() {
    absl::MutexLock lock(&mu);
    return ran.size();
  }
  void WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    const auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ran.size() >= n; };
    mu.Await(absl::Condition(&enough));
  }
};

bool Queued(FairQueue::Submitted s) { return s == FairQueue::Submitted::kQueued; }

// Queues a first call of `peer` that holds its worker until `release` is notified; returns once it runs.
void HoldAWorker(FairQueue& queue, const std::string& peer, absl::Notification& release) {
  auto started = std::make_shared<absl::Notification>();
  ASSERT_TRUE(Queued(queue.Submit(peer, [started, &release](bool) {
    started->Notify();
    release.WaitForNotification();
  })));
  started->WaitForNotification();
}

// One worker, blocked by a first call of peer "burst" until released; meanwhile "burst" queues 50
// more and "other" 2: once released, the worker takes the two peers in turn, so each of "other"'s
// calls runs after at most one more of "burst"'s, not after all 50.
TEST(FairQueueTest, PeersAreServedInTurnNotInArrivalOrder) {
  Record record;
  absl::Notification release;
  {
    FairQueue queue({.workers = 1, .max_queued_per_peer = 100});
    HoldAWorker(queue, "uid:1", release);
    for (int i = 0; i < 50; ++i) ASSERT_EQ(queue.Submit("uid:1", record.Note("burst")), FairQueue::Submitted::kQueued);
    ASSERT_EQ(queue.Submit("uid:2", record.Note("other")), FairQueue::Submitted::kQueued);
    ASSERT_EQ(queue.Submit("uid:2", record.Note("other")), FairQueue::Submitted::kQueued);
    EXPECT_EQ(queue.InProgress("uid:1"), 51);
    EXPECT_EQ(queue.InProgress("uid:2"), 2);
    release.Notify();
    record.WaitFor(52);
  }
  absl::MutexLock lock(&record.mu);
  ASSERT_EQ(record.ran.size(), 52u);
  // "burst" was first in turn (it had work queued first), then "other", and so on.
  EXPECT_EQ(record.ran[0], "burst");
  EXPECT_EQ(record.ran[1], "other");
  EXPECT_EQ(record.ran[2], "burst");
  EXPECT_EQ(record.ran[3], "other");
  EXPECT_EQ(record.ran[4], "burst");
  EXPECT_EQ(record.shutting_down, 0);
}

// A peer's calls queued or running count against its cap; another peer is not affected, and a
// peer's slots come back as its calls finish.
TEST(FairQueueTest, APeerPastItsCapIsRefusedAndOthersAreNot) {
  Record record;
  absl::Notification release;
  FairQueue queue({.workers = 1, .max_queued_per_peer = 3});
  HoldAWorker(queue, "uid:1", release);
  EXPECT_EQ(queue.Submit("uid:1", record.Note("a")), FairQueue::Submitted::kQueued);
  EXPECT_EQ(queue.Submit("uid:1", record.Note("a")), FairQueue::Submitted::kQueued);
  EXPECT_EQ(queue.Submit("uid:1", record.Note("refused")), FairQueue::Submitted::kPeerFull);  // 3 queued or running
  EXPECT_EQ(queue.Submit("uid:2", record.Note("b")), FairQueue::Submitted::kQueued);
  release.Notify();
  record.WaitFor(3);
  // All three finished: the worker lowers the count after each work returns.
  absl::Notification done;
  ASSERT_TRUE(Queued(queue.Submit("uid:1", [&](bool) { done.Notify(); })));
  done.WaitForNotification();
  absl::MutexLock lock(&record.mu);
  EXPECT_EQ(std::count(record.ran.begin(), record.ran.end(), "refused"), 0);
}

// Two workers, a peer may run one call at a time: while "uid:1"'s first call holds a worker and
// more of its calls (which would hold one too) are queued, "uid:2"'s call runs on the other worker.
TEST(FairQueueTest, AWorkerIsLeftForAnotherPeerWhileOnePeerRunsItsMost) {
  absl::Notification release, other_ran;
  {
    FairQueue queue({.workers = 2, .max_running_per_peer = 1, .max_queued_per_peer = 10});
    HoldAWorker(queue, "uid:1", release);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(Queued(queue.Submit("uid:1", [&](bool) { release.WaitForNotification(); })));
    ASSERT_TRUE(Queued(queue.Submit("uid:2", [&](bool) { other_ran.Notify(); })));
    // Fails (rather than hangs) when the other worker took one of uid:1's calls instead.
    EXPECT_TRUE(other_ran.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_EQ(queue.InProgress("uid:1"), 4);
    release.Notify();
  }
}

// Work still queued when Shutdown() is called runs with shutting_down = true (its caller answers
// at once); Submit refuses from then on.
TEST(FairQueueTest, WorkQueuedAtShutdownRunsToldSoAndLaterWorkIsRefused) {
  Record record;
  absl::Notification release;
  {
    FairQueue queue({.workers = 1, .max_queued_per_peer = 10});
    HoldAWorker(queue, "uid:1", release);
    ASSERT_EQ(queue.Submit("uid:1", record.Note("a")), FairQueue::Submitted::kQueued);
    ASSERT_EQ(queue.Submit("uid:2", record.Note("b")), FairQueue::Submitted::kQueued);
    queue.Shutdown();
    EXPECT_EQ(queue.Submit("uid:3", record.Note("late")), FairQueue::Submitted::kShuttingDown);
    release.Notify();
  }  // joins: every queued work ran
  absl::MutexLock lock(&record.mu);
  EXPECT_EQ(record.ran.size(), 2u);
  EXPECT_EQ(record.shutting_down, 2);
}

}  // namespace
}  // namespace devplace::service
