// RefreshRounds over a real gRPC server: a RefreshInventory handler that hands each call to the
// rounds, called by real clients, with a refresh function that blocks until the test lets it
// finish. Calls queued during a round share the next one (one probe), the rate limit refuses a
// call that would start a round too soon but lets one join a queued round, a failed probe answers
// every caller with its error, and shutdown answers the queued calls without a probe.
#include "server/service/refresh_rounds.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/service/serve.h"

namespace devplace::testing {
namespace {

using ::testing::MatchesRegex;

// The probe: each run waits until the test opens the gate, then publishes revision N (the Nth
// run), or fails when told to.
class FakeProbe {
 public:
  absl::StatusOr<inventory::Snapshot> Run() {
    absl::MutexLock lock(&mu_);
    ++started_;
    mu_.Await(absl::Condition(&open_));
    if (!failure_.ok()) return failure_;
    auto inventory = std::make_shared<v1::Inventory>();
    inventory->set_revision(started_);
    return inventory::Snapshot(std::move(inventory));
  }
  // Lets every run, from now on, finish.
  void OpenForever() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    failure_ = std::move(status);
  }
  // Waits until `n` runs started.
  void AwaitStarted(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }

 private:
  absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

// RefreshInventory only: each call goes to the rounds as DevicePlacementService hands it.
class RoundsService final
    : public v1::DevicePlacement::WithRawCallbackMethod_RefreshInventory<v1::DevicePlacement::CallbackService> {
 public:
  explicit RoundsService(service::RefreshRounds& rounds) : rounds_(rounds) {}
  grpc::ServerUnaryReactor* RefreshInventory(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* /*request*/,
                                             grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    rounds_.Enqueue(reactor, response);
    absl::MutexLock lock(&mu_);
    ++calls_;
    return reactor;
  }
  // Waits until `n` calls were handed to the rounds.
  void AwaitCalls(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

 private:
  service::RefreshRounds& rounds_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Answer {
  grpc::Status status;
  v1::Inventory inventory;
};

class RefreshRoundsTest : public ::testing::Test {
 protected:
  void Start(absl::Duration min_interval) {
    rounds_ = std::make_unique<service::RefreshRounds>(
        [this] { return probe_.Run(); }, [](const v1::Inventory& fresh) { return fresh.SerializeAsString(); },
        min_interval);
    service_ = std::make_unique<RoundsService>(*rounds_);
    served_ = ServeOnUnixSocket(service_.get(), dir_.File("s.sock"));
    ASSERT_NE(served_.server, nullptr);
  }
  void TearDown() override {
    if (rounds_ != nullptr) rounds_->Shutdown();
    probe_.OpenForever();
    if (served_.server != nullptr) served_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    rounds_.reset();
  }
  Answer Call() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    Answer answer;
    answer.status = served_.stub->RefreshInventory(&ctx, {}, &answer.inventory);
    return answer;
  }
  // Calls in threads of their own; their answers once Join()ed.
  struct Callers {
    std::vector<std::thread> threads;
    std::vector<Answer> answers;
    explicit Callers(size_t n) : answers(n) {}
    void Join() {
      for (std::thread& t : threads) t.join();
    }
  };
  void CallInBackground(Callers& callers, size_t i) {
    callers.threads.emplace_back([this, &callers, i] { callers.answers[i] = Call(); });
  }

  TempDir dir_;
  FakeProbe probe_;
  std::unique_ptr<service::RefreshRounds> rounds_;
  std::unique_ptr<RoundsService> service_;
  Served served_;
};

TEST_F(RefreshRoundsTest, CallsQueuedDuringARoundShareTheNextOne) {
  Start(absl::ZeroDuration());
  Callers callers(6);
  CallInBackground(callers, 0);
  probe_.AwaitStarted(1);  // round 1 runs for the first call
  for (size_t i = 1; i < 6; ++i) CallInBackground(callers, i);
  service_->AwaitCalls(6);
  probe_.OpenForever();
  callers.Join();
  ASSERT_TRUE(callers.answers[0].status.ok()) << callers.answers[0].status.error_message();
  EXPECT_EQ(callers.answers[0].inventory.revision(), 1u);
  for (size_t i = 1; i < 6; ++i) {
    ASSERT_TRUE(callers.answers[i].status.ok()) << callers.answers[i].status.error_message();
    EXPECT_EQ(callers.answers[i].inventory.revision(), 2u) << "caller " << i;  // one probe for the five
  }
  EXPECT_EQ(probe_.started(), 2);
}

TEST_F(RefreshRoundsTest, ACallTooSoonIsRefusedButOneMayJoinAQueuedRound) {
  Start(absl::Hours(1));
  // A round without a caller (SIGHUP) is not limited and does not count.
  rounds_->Request();
  probe_.AwaitStarted(1);
  Callers callers(2);
  CallInBackground(callers, 0);  // starts a caller round, queued behind the running one
  service_->AwaitCalls(1);
  CallInBackground(callers, 1);  // joins it
  service_->AwaitCalls(2);
  probe_.OpenForever();
  callers.Join();
  for (const Answer& a : callers.answers) {
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.inventory.revision(), 2u);
  }
  const Answer refused = Call();  // would start a round of its own within the hour
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(),
              MatchesRegex("RefreshInventory starts at most one probe every 1h \\(--refresh_min_interval\\); retry in "
                           "[0-9]+ ms"));
  EXPECT_EQ(probe_.started(), 2);
  rounds_->Request();  // SIGHUP still probes
  probe_.AwaitStarted(3);
  EXPECT_EQ(probe_.started(), 3);
}

TEST_F(RefreshRoundsTest, AFailedProbeAnswersEveryCallerOfItsRoundWithItsError) {
  Start(absl::ZeroDuration());
  probe_.Fail(absl::DeadlineExceededError("devplace-probe ran past --probe_timeout=10s"));
  rounds_->Request();
  probe_.AwaitStarted(1);
  Callers callers(3);
  for (size_t i = 0; i < 3; ++i) CallInBackground(callers, i);
  service_->AwaitCalls(3);
  probe_.OpenForever();
  callers.Join();
  for (const Answer& a : callers.answers) {
    EXPECT_EQ(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(a.status.error_message(), "devplace-probe ran past --probe_timeout=10s");
  }
  EXPECT_EQ(probe_.started(), 2);
}

TEST_F(RefreshRoundsTest, ShutdownAnswersQueuedCallsWithoutAProbe) {
  Start(absl::ZeroDuration());
  Callers callers(3);
  CallInBackground(callers, 0);
  probe_.AwaitStarted(1);
  CallInBackground(callers, 1);
  CallInBackground(callers, 2);
  service_->AwaitCalls(3);
  rounds_->Shutdown();
  const Answer late = Call();  // at once, while the round still runs
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(late.status.error_message(), "devplaced is shutting down");
  rounds_->Request();  // ignored
  probe_.OpenForever();
  callers.Join();
  EXPECT_TRUE(callers.answers[0].status.ok()) << "the round that ran finishes";
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(callers.answers[i].status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(callers.answers[i].status.error_message(), "devplaced is shutting down");
  }
  rounds_->Join();
  EXPECT_EQ(probe_.started(), 1);
}

}  // namespace
}  // namespace devplace::testing
