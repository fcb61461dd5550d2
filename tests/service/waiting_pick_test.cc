// A waiting pick keeps only what the rules read of its request: the pick's answer is the same with
// the kept request as with the whole one, and the kept one is a small part of a request at the
// limits (256 env entries of about 3 KiB; 1,024 DRA devices of 64 attributes).
// WaitingPicks, the queue, with its real worker thread and hooks that stand for the lease table
// (a number of free devices, a count of ended leases): arrival order, devices held back for an
// older waiter from younger ones in a round, a round started again from the first waiter when a
// lease ends during it, the per-user bounds, the timed retry and shutdown.
#include "server/service/waiting_pick.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/placement/pick.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

v1::Inventory EightGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 8);
  return b.Build();
}

void ExpectSameAnswer(const v1::Inventory& inventory, const v1::PickDevicesRequest& request) {
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  const placement::PickOutcome whole = placement::Pick(inventory, request, {});
  const placement::PickOutcome part = placement::Pick(inventory, kept, {});
  EXPECT_EQ(whole.status, part.status);
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(whole.response, part.response)) << diff;
}

TEST(KeptForWaiting, EnvKeepsTheVariablesTheRulesReadAndTheirNearMisses) {
  v1::PickDevicesRequest request;
  request.set_count(2);
  request.set_wait_ms(60'000);
  auto& env = *request.mutable_job()->mutable_env();
  for (int i = 0; i < 250; ++i) env[absl::StrCat("JOB_SETTING_", i)] = std::string(2900, 'v');
  env["CUDA_VISIBLE_DEVICES"] = "5,2,7";
  env["LOCAL_RANK"] = "1";
  env["CUDA_VISIBLE_DEVICE"] = "0";  // a near miss: the answer warns about it (E-TYPO)
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  EXPECT_EQ(kept.job().env_size(), 3);
  EXPECT_EQ(kept.job().env().at("CUDA_VISIBLE_DEVICES"), "5,2,7");
  EXPECT_EQ(kept.job().env().count("CUDA_VISIBLE_DEVICE"), 1u);
  EXPECT_EQ(kept.wait_ms(), 60'000u);
  EXPECT_GT(request.ByteSizeLong(), 700'000u);
  EXPECT_LT(kept.ByteSizeLong(), 200u);
  ExpectSameAnswer(EightGpus(), request);
}

TEST(KeptForWaiting, DraDevicesKeepTheAttributesTheyAreMatchedBy) {
  const v1::Inventory inventory = EightGpus();
  v1::PickDevicesRequest request;
  v1::DeviceAllocation& a = *request.mutable_job()->mutable_device_allocation();
  a.set_source("/var/run/kubernetes.io/dra-device-attributes");
  for (int i = 0; i < 1024; ++i) {
    v1::AllocatedDevice& d = *a.add_devices();
    d.set_claim("claim");
    d.set_request("gpu");
    d.set_driver("gpu.nvidia.com");
    d.set_pool("node");
    d.set_name(absl::StrCat("gpu-", i));
    auto& attributes = *d.mutable_attributes();
    // Two of them are this host's GPUs 3 and 6 (by PCI address and by a qualified uuid).
    if (i == 3) attributes["pciBusID"] = inventory.backends(1).devices(3).pci_bus_id();
    if (i == 6) attributes["gpu.nvidia.com/uuid"] = inventory.backends(1).devices(6).uuid();
    if (i != 3 && i != 6) attributes["uuid"] = absl::StrCat("GPU-elsewhere-", i);
    attributes["minor"] = absl::StrCat(100 + i);
    for (int k = 0; attributes.size() < 64; ++k) attributes[absl::StrFormat("x%02d", k)] = "some value";
  }
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  ASSERT_EQ(kept.job().device_allocation().devices_size(), 1024);
  EXPECT_EQ(kept.job().device_allocation().devices(3).attributes_size(), 2);  // pciBusID, minor
  EXPECT_EQ(kept.job().device_allocation().devices(6).attributes().count("gpu.nvidia.com/uuid"), 1u);
  EXPECT_LT(kept.ByteSizeLong() * 5, request.ByteSizeLong());
  ExpectSameAnswer(inventory, request);
  request.set_count(2);
  ExpectSameAnswer(inventory, request);
}

// Stands for the lease table behind WaitingPicks' hooks: `free` devices, one taken by each pick
// answered; `ended` leases so far. Records the arrival numbers tried and answered, and every
// answer the queue gave itself (refusals, shutdown).
class FakeHost {
 public:
  struct Finished {
    uint64_t arrival;
    grpc::Status status;
    std::string outcome;
  };

  service::WaitingPicks::Hooks Hooks() {
    return {[this](service::PendingPick& pick, service::WaitingRound& round) { return Retry(pick, round); },
            [this](const service::PendingPick& pick, const grpc::Status& status, const std::string& outcome) {
              absl::MutexLock lock(&mu_);
              finished_.push_back({pick.arrival, status, outcome});
            },
            [this] {
              absl::MutexLock lock(&mu_);
              return ended_;
            },
            nullptr, nullptr, nullptr, nullptr};
  }
  // A lease ended: `n` more devices are free. How many tries there were before it.
  size_t Release(int n) {
    absl::MutexLock lock(&mu_);
    free_ += n;
    ++ended_;
    return tried_.size();
  }
  // Devices free without a lease ending (no poke reaches the queue).
  void FreeQuietly(int n) {
    absl::MutexLock lock(&mu_);
    free_ += n;
  }
  // The next time `arrival` is tried, a lease ends meanwhile (and it stays waiting).
  void EndALeaseWhileTrying(uint64_t arrival) {
    absl::MutexLock lock(&mu_);
    end_while_trying_ = arrival;
  }
  // Waits (at most 10 s) until `n` picks were answered by a retry; their arrival numbers in order.
  std::vector<uint64_t> AwaitAnswered(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return answered_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return answered_;
  }
  std::vector<Finished> AwaitFinished(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return finished_;
  }
  // Waits until `arrival` was tried at least `times` times.
  void AwaitTried(uint64_t arrival, int times) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, arrival, times]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::count(tried_.begin(), tried_.end(), arrival) >= times;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  // The arrival tried right after the one EndALeaseWhileTrying named (waits for it).
  std::optional<uint64_t> AwaitTryAfterTheLeaseEnded() {
    absl::MutexLock lock(&mu_);
    auto next = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_at_try_.has_value() && tried_.size() > *ended_at_try_ + 1;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&next), absl::Seconds(10))) return std::nullopt;
    return tried_[*ended_at_try_ + 1];
  }
  std::vector<uint64_t> tried() {
    absl::MutexLock lock(&mu_);
    return tried_;
  }
  std::vector<uint64_t> answered() {
    absl::MutexLock lock(&mu_);
    return answered_;
  }
  // Waits until `arrival` was tried after the first `since` tries.
  void AwaitTriedAfter(size_t since, uint64_t arrival) {
    absl::MutexLock lock(&mu_);
    auto tried = [this, since, arrival]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return tried_.size() > since && std::find(tried_.begin() + since, tried_.end(), arrival) != tried_.end();
    };
    mu_.AwaitWithTimeout(absl::Condition(&tried), absl::Seconds(10));
  }
  size_t kept_env() {
    absl::MutexLock lock(&mu_);
    return kept_env_;
  }

 private:
  // As the service: a pick is served from the devices free and not held back by an older waiter
  // of the round; one that stays waiting holds back those it could use (fewer than it wants).
  bool Retry(service::PendingPick& pick, service::WaitingRound& round) {
    absl::MutexLock lock(&mu_);
    const uint64_t ended_at_start = round.ended_at_start;
    tried_.push_back(pick.arrival);
    kept_env_ = std::max<size_t>(kept_env_, pick.request.job().env_size());
    if (end_while_trying_ == pick.arrival) {
      end_while_trying_.reset();
      ended_at_try_ = tried_.size() - 1;
      ++ended_;
      return false;
    }
    if (ended_ != ended_at_start) return false;  // as PickAndHold's only_if_ended: ABORTED
    const int wanted = static_cast<int>(std::max<uint32_t>(1, pick.request.count()));
    const int open = free_ - static_cast<int>(round.held_back.size());
    if (open < wanted) {
      placement::LeasedUnit unit;
      unit.held_back = true;
      round.held_back.insert(round.held_back.end(), std::max(open, 0), unit);
      return false;
    }
    free_ -= wanted;
    answered_.push_back(pick.arrival);
    return true;
  }

  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ended_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> end_while_trying_ ABSL_GUARDED_BY(mu_);
  std::optional<size_t> ended_at_try_ ABSL_GUARDED_BY(mu_);  // its index in tried_
  std::vector<uint64_t> tried_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> answered_ ABSL_GUARDED_BY(mu_);
  std::vector<Finished> finished_ ABSL_GUARDED_BY(mu_);
  size_t kept_env_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits (at most 10 s) until `queue` holds `n` picks: an answered pick leaves it just after its
// retry returned.
bool AwaitQueued(const service::WaitingPicks& queue, size_t n) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (queue.size() != n && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  return queue.size() == n;
}

// Frees `n` devices (a lease ended; the queue is poked) and waits until `answered` picks were
// answered: their arrival numbers in order.
std::vector<uint64_t> FreeAndAwait(FakeHost& host, service::WaitingPicks& queue, int n, size_t answered) {
  host.Release(n);
  queue.Poke();
  return host.AwaitAnswered(answered);
}

service::PendingPick Waiter(uint64_t arrival, const std::string& user = "uid:1000") {
  service::PendingPick pick;
  pick.request.set_count(1);
  pick.request.set_wait_ms(600'000);
  pick.arrived = absl::Now();
  pick.deadline = absl::Now() + absl::Minutes(10);
  pick.arrival = arrival;
  pick.user = user;
  return pick;
}

TEST(WaitingPicks, ADeviceThatFreesUpGoesToTheEarliestWaiter) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  EXPECT_EQ(queue.Arriving(), service::WaitingPicks::Turn::kNow);
  std::vector<uint64_t> arrivals;
  for (int i = 0; i < 4; ++i) arrivals.push_back(queue.Arrive());
  EXPECT_EQ(arrivals, (std::vector<uint64_t>{0, 1, 2, 3}));
  // Queued out of order (a big request parsed slower): the queue keeps arrival order.
  for (uint64_t arrival : {3, 1, 2, 0}) queue.Enqueue(Waiter(arrival));
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_EQ(queue.Arriving(), service::WaitingPicks::Turn::kBehindOthers);
  host.AwaitTried(3, 1);
  EXPECT_EQ(FreeAndAwait(host, queue, 1, 1), (std::vector<uint64_t>{0}));
  EXPECT_EQ(FreeAndAwait(host, queue, 2, 3), (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(AwaitQueued(queue, 1));
}

// No starvation: the first waiter wants two, three younger ones one each. The first device freed
// is held back for it (no younger waiter gets it, in that round or the next); the second serves it.
TEST(WaitingPicks, AnOlderWaiterForTwoIsNotPassedByYoungerWaitersForOne) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  service::PendingPick two = Waiter(queue.Arrive());
  two.request.set_count(2);
  queue.Enqueue(std::move(two));
  for (int i = 0; i < 3; ++i) queue.Enqueue(Waiter(queue.Arrive()));
  host.AwaitTried(3, 1);
  size_t since = host.Release(1);
  queue.Poke();
  host.AwaitTriedAfter(since, 3);  // a whole round with the device free
  since = host.tried().size();
  host.AwaitTriedAfter(since, 3);  // and the next (at most 500 ms later)
  EXPECT_THAT(host.answered(), ::testing::IsEmpty());
  EXPECT_EQ(FreeAndAwait(host, queue, 1, 1), (std::vector<uint64_t>{0}));
  // Then the younger ones, in their order.
  EXPECT_EQ(FreeAndAwait(host, queue, 2, 3), (std::vector<uint64_t>{0, 1, 2}));
}

TEST(WaitingPicks, ALeaseEndingDuringARoundStartsItAgainFromTheFirstWaiter) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  for (int i = 0; i < 3; ++i) queue.Enqueue(Waiter(queue.Arrive()));
  host.AwaitTried(2, 1);
  host.EndALeaseWhileTrying(1);
  queue.Poke();
  // The try of 1 during which the lease ended is followed by a try of 0, not of 2.
  EXPECT_EQ(host.AwaitTryAfterTheLeaseEnded(), 0u) << ::testing::PrintToString(host.tried());
}

TEST(WaitingPicks, EachUserHasAtMostItsCountAndBytesWaiting) {
  FakeHost host;
  service::WaitingPicks queue({.max_per_user = 2, .max_bytes_per_user = 0}, host.Hooks());
  queue.Enqueue(Waiter(0, "uid:7"));
  queue.Enqueue(Waiter(1, "uid:7"));
  queue.Enqueue(Waiter(2, "uid:7"));  // past the count: answered at once
  queue.Enqueue(Waiter(3, "uid:8"));  // another user still waits
  std::vector<FakeHost::Finished> refused = host.AwaitFinished(1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].arrival, 2u);
  EXPECT_EQ(refused[0].outcome, "too_many_waiting");
  EXPECT_EQ(refused[0].status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused[0].status.error_message(),
              ::testing::StartsWith("uid:7 has 2 pick(s) waiting, keeping "));
  EXPECT_THAT(refused[0].status.error_message(),
              ::testing::HasSubstr("each user may have at most 2 waiting (devplaced --max_waiting_picks_per_user)"));
  EXPECT_EQ(queue.size(), 3u);
  // One of uid:7's is answered: another of its picks may wait again.
  host.Release(1);
  queue.Poke();
  EXPECT_EQ(host.AwaitAnswered(1), (std::vector<uint64_t>{0}));
  ASSERT_TRUE(AwaitQueued(queue, 2));
  queue.Enqueue(Waiter(4, "uid:7"));
  EXPECT_EQ(queue.size(), 3u);
  EXPECT_EQ(host.AwaitFinished(1).size(), 1u);

  // Bytes: what two compacted requests keep fits, a third does not.
  const size_t kept = service::KeptForWaiting(Waiter(0).request).SpaceUsedLong();
  FakeHost bytes_host;
  service::WaitingPicks by_bytes({.max_per_user = 0, .max_bytes_per_user = static_cast<int64_t>(kept * 2 + kept / 2)},
                                 bytes_host.Hooks());
  for (uint64_t arrival : {0, 1, 2}) by_bytes.Enqueue(Waiter(arrival));
  refused = bytes_host.AwaitFinished(1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].arrival, 2u);
  EXPECT_THAT(refused[0].status.error_message(),
              ::testing::HasSubstr(absl::StrCat("keeping ", kept * 2, " bytes; each user may have at most 0 waiting")));
  EXPECT_THAT(refused[0].status.error_message(), ::testing::HasSubstr(absl::StrCat("this one keeps ", kept, ".")));
}

TEST(WaitingPicks, AQueuedPickKeepsOnlyWhatTheRulesRead) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  service::PendingPick pick = Waiter(queue.Arrive());
  auto& env = *pick.request.mutable_job()->mutable_env();
  for (int i = 0; i < 100; ++i) env[absl::StrCat("JOB_SETTING_", i)] = std::string(1000, 'v');
  env["CUDA_VISIBLE_DEVICES"] = "1";
  queue.Enqueue(std::move(pick));
  host.AwaitTried(0, 1);
  EXPECT_EQ(host.kept_env(), 1u);
}

// Without a poke (no lease ended that the queue was told of), waiters are still tried again: at
// least every 500 ms.
TEST(WaitingPicks, WaitersAreTriedAgainWithoutAPoke) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  queue.Enqueue(Waiter(queue.Arrive()));
  host.AwaitTried(0, 1);
  host.FreeQuietly(1);
  EXPECT_EQ(host.AwaitAnswered(1), (std::vector<uint64_t>{0}));
  EXPECT_TRUE(AwaitQueued(queue, 0));
}

TEST(WaitingPicks, ShutdownAnswersEveryWaiterUnavailableAndRefusesNewOnes) {
  FakeHost host;
  service::WaitingPicks queue({}, host.Hooks());
  for (int i = 0; i < 3; ++i) queue.Enqueue(Waiter(queue.Arrive()));
  queue.Shutdown();
  EXPECT_EQ(queue.Arriving(), service::WaitingPicks::Turn::kShuttingDown);
  queue.Join();
  std::vector<FakeHost::Finished> finished = host.AwaitFinished(3);
  ASSERT_EQ(finished.size(), 3u);
  for (const FakeHost::Finished& f : finished) {
    EXPECT_EQ(f.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(f.status.error_message(), "devplaced is shutting down");
    EXPECT_EQ(f.outcome, "unavailable");
  }
  EXPECT_EQ(queue.size(), 0u);
  queue.Enqueue(Waiter(queue.Arrive()));  // answered at once, on this thread
  finished = host.AwaitFinished(4);
  ASSERT_EQ(finished.size(), 4u);
  EXPECT_EQ(finished[3].arrival, 3u);
  EXPECT_EQ(finished[3].outcome, "unavailable");
  EXPECT_EQ(queue.size(), 0u);
}

}  // namespace
}  // namespace devplace::testing
