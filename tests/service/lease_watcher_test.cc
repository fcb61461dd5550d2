// The lease watcher's thread (lease_watcher.h) with a real pidfd and real time: it sweeps when a
// child process exits (the pidfd, not the recheck timer: the timer is set to an hour), when the
// earliest expiry passes, when woken, and at least every `recheck`; and it stops at once.
#include "server/service/lease_watcher.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/service/lease_testing.h"

namespace devplace::testing {
namespace {

using service::LeaseWatcher;

// What the watcher's callbacks saw.
class Calls {
 public:
  void Waited() {
    absl::MutexLock lock(&mu_);
    ++waits_;
  }
  void Swept() {
    absl::MutexLock lock(&mu_);
    if (sweeps_++ == 0) first_sweep_ = absl::Now();
  }
  int waits() const {
    absl::MutexLock lock(&mu_);
    return waits_;
  }
  int sweeps() const {
    absl::MutexLock lock(&mu_);
    return sweeps_;
  }
  absl::Time first_sweep() const {
    absl::MutexLock lock(&mu_);
    return first_sweep_;
  }

 private:
  mutable absl::Mutex mu_;
  int waits_ ABSL_GUARDED_BY(mu_) = 0;
  int sweeps_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

// A watcher with nothing to wait for but its recheck and Wake().
std::unique_ptr<LeaseWatcher> IdleWatcher(Calls& calls, absl::Duration recheck) {
  return std::make_unique<LeaseWatcher>(
      [&calls] {
        calls.Waited();
        return LeaseWatcher::Waits();
      },
      [&calls] { calls.Swept(); }, recheck);
}

TEST(LeaseWatcher, AHoldersPidfdWakesItWhenTheProcessExits) {
#ifdef SYS_pidfd_open
  Sleeper child;
  const long pidfd = syscall(SYS_pidfd_open, child.pid(), 0);
  if (pidfd < 0) GTEST_SKIP() << "no pidfd_open here: the watcher falls back to its recheck";
  Calls calls;
  {
    LeaseWatcher watcher(
        [&] {
          calls.Waited();
          LeaseWatcher::Waits waits;
          if (calls.sweeps() == 0) waits.pidfds.push_back(static_cast<int>(pidfd));  // the table drops it once swept
          return waits;
        },
        [&] { calls.Swept(); }, absl::Hours(1));
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(calls.sweeps(), 0);  // nothing ended, nothing to sweep
    child.Kill();
    EXPECT_TRUE(Eventually([&] { return calls.sweeps() >= 1; }));
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_EQ(calls.sweeps(), 1);  // once: the table has no pidfd left to poll
  }  // the watcher stops (and sweeps once more on its way out)
  close(static_cast<int>(pidfd));
#else
  GTEST_SKIP() << "no pidfd_open in this build";
#endif
}

TEST(LeaseWatcher, ItSweepsWhenTheEarliestExpiryPasses) {
  Calls calls;
  const absl::Time expiry = absl::Now() + absl::Milliseconds(300);
  LeaseWatcher watcher(
      [&] {
        calls.Waited();
        LeaseWatcher::Waits waits;
        if (calls.sweeps() == 0) waits.next_expiry = expiry;
        return waits;
      },
      [&] { calls.Swept(); }, absl::Hours(1));
  EXPECT_TRUE(Eventually([&] { return calls.sweeps() >= 1; }));
  EXPECT_GE(calls.first_sweep(), expiry);
}

TEST(LeaseWatcher, WakeAsksForTheWaitsAgain) {
  Calls calls;
  const std::unique_ptr<LeaseWatcher> watcher = IdleWatcher(calls, absl::Hours(1));
  ASSERT_TRUE(Eventually([&] { return calls.waits() == 1; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(calls.sweeps(), 0);
  watcher->Wake();  // a lease was added
  EXPECT_TRUE(Eventually([&] { return calls.sweeps() == 1 && calls.waits() == 2; }));
}

// Holders without a pidfd (no pidfd_open, a group whose leader ended) are checked every `recheck`.
TEST(LeaseWatcher, ItSweepsAtLeastEveryRecheck) {
  Calls calls;
  const std::unique_ptr<LeaseWatcher> watcher = IdleWatcher(calls, absl::Milliseconds(20));
  EXPECT_TRUE(Eventually([&] { return calls.sweeps() >= 3; }));
}

TEST(LeaseWatcher, ItStopsAtOnceWhateverItWaitsFor) {
  Calls calls;
  std::unique_ptr<LeaseWatcher> watcher = IdleWatcher(calls, absl::Hours(1));
  ASSERT_TRUE(Eventually([&] { return calls.waits() == 1; }));
  const absl::Time start = absl::Now();
  watcher.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace devplace::testing
