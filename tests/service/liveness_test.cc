// The liveness self-check (ListenerLiveness) against a real gRPC server on a unix socket whose
// Health/Check handler never answers the check's own calls (service ""), with the server's real
// RpcMetrics interceptor counting the calls it answers: a server that answers nothing is dead after
// `max_failures` checks, one that keeps answering other calls is busy and never dead.
#include "server/service/liveness.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/service/rpc_metrics.h"
#include "tests/common/temp_dir.h"

namespace devplace::service {
namespace {

// Check("") is held until the end of the test (a stuck handler); any other service is answered.
class StuckHealth final : public grpc::health::v1::Health::CallbackService {
 public:
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (request->service().empty()) {
      absl::MutexLock lock(&mu_);
      held_.push_back(reactor);
      return reactor;
    }
    response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    for (grpc::ServerUnaryReactor* r : held_) r->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "test over"));
    held_.clear();
  }

 private:
  absl::Mutex mu_;
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  Fixture() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target, grpc::InsecureServerCredentials());
    builder.RegisterService(&health);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
    interceptors.push_back(metrics.NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    server = builder.BuildAndStart();
  }
  ~Fixture() {
    health.Release();
    server->Shutdown();
  }
  // Options checking `target` every 100 ms (300 ms to answer); the listener is gRPC's own, so its
  // accept count is given as "the check's own connection was accepted" each round.
  LivenessOptions Options() {
    LivenessOptions o;
    o.targets = {target};
    o.progress = {[this] { return ++accepted; }};
    o.answered = [this] { return metrics.answered(); };
    o.interval = absl::Milliseconds(100);
    o.timeout = absl::Milliseconds(300);
    o.max_failures = 3;
    o.on_failure = [this](const std::string&, const std::string& error) {
      absl::MutexLock lock(&mu);
      (absl::StartsWith(error, "busy: ") ? busy : failed)++;
    };
    o.on_dead = [this](const std::string&, const std::string&) {
      absl::MutexLock lock(&mu);
      dead = true;
    };
    return o;
  }

  testing::TempDir dir;
  const std::string target = "unix:" + dir.path() + "/s.sock";
  prometheus::Registry registry;
  RpcMetrics metrics{registry};
  StuckHealth health;
  std::unique_ptr<grpc::Server> server;
  std::atomic<uint64_t> accepted{0};
  absl::Mutex mu;
  int busy ABSL_GUARDED_BY(mu) = 0;
  int failed ABSL_GUARDED_BY(mu) = 0;
  bool dead ABSL_GUARDED_BY(mu) = false;
};

TEST(Liveness, AServerWhoseHandlersAnswerNothingIsDead) {
  Fixture f;
  ListenerLiveness liveness(f.Options());
  liveness.Start();
  absl::MutexLock lock(&f.mu);
  ASSERT_TRUE(f.mu.AwaitWithTimeout(absl::Condition(&f.dead), absl::Seconds(60)));
  EXPECT_EQ(f.busy, 0);
  EXPECT_GE(f.failed, 3);
}

// The check's own call waits (as behind a burst of slow calls) while the server keeps answering
// another client's calls: every failed check is busy, none counts.
TEST(Liveness, AServerThatKeepsAnsweringOtherCallsIsBusyNotDead) {
  Fixture f;
  ListenerLiveness liveness(f.Options());
  liveness.Start();
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(f.target, grpc::InsecureChannelCredentials()));
  auto five_busy = [&f]() ABSL_SHARED_LOCKS_REQUIRED(f.mu) { return f.busy >= 5 || f.dead; };
  for (;;) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("other");
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&ctx, request, &response).ok());
    absl::MutexLock lock(&f.mu);
    if (f.mu.AwaitWithTimeout(absl::Condition(&five_busy), absl::Milliseconds(20))) break;
  }
  liveness.Stop();
  absl::MutexLock lock(&f.mu);
  EXPECT_FALSE(f.dead);
  EXPECT_GE(f.busy, 5);
}

}  // namespace
}  // namespace devplace::service
