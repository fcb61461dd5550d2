// Controls for what tests/tsan.supp leaves visible in gRPC-calling code (docs/DEVELOPING.md
// "When to run what"), built in every build.
//
// Debian's libgrpc is not built with TSan, so its own memory accesses are ignored by the
// suppressions file (`called_from_lib`: the libc calls it makes, the only accesses of an
// uninstrumented library TSan sees, and which it cannot order against gRPC's atomics). A handler
// the daemon writes is instrumented code that gRPC merely calls on its threads; its races must
// still be reported. These controls run the daemon's callback service API on a real server over a
// unix socket with concurrent clients:
//
// GrpcCallbackLockedIsClean: each handler updates shared state under an absl::Mutex. Under the
// tsan preset it is clean only when the suppressions file covers gRPC's own accesses (without it,
// TSan reports gRPC's slice copies and frees as races).
//
// DISABLED_GrpcCallbackRace: the same with the handler skipping the lock, a real race between two
// gRPC callback threads. ctest `tsan.catches_a_race_in_a_grpc_callback` (tsan builds only) runs
// it with --gtest_also_run_disabled_tests and passes only when TSan reports it, i.e. the
// suppressions hide none of the daemon's own code.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace {
namespace {

class CountingService final : public v1::DevicePlacement::CallbackService {
 public:
  explicit CountingService(bool locked) : locked_(locked) {}

  grpc::ServerUnaryReactor* GetInventory(grpc::CallbackServerContext* ctx, const v1::GetInventoryRequest*,
                                         v1::Inventory* reply) override {
    int seen;
    if (locked_) {
      absl::MutexLock lock(&mu_);
      seen = ++calls_;
    } else {
      seen = AddUnlocked();  // the control's race
    }
    reply->set_revision(seen);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  int AddUnlocked() ABSL_NO_THREAD_SAFETY_ANALYSIS { return ++calls_; }

  const bool locked_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Serves `service` on a unix socket and makes `threads` x `calls` GetInventory calls at once.
void CallConcurrently(CountingService& service, int threads, int calls) {
  testing::TempDir dir;
  const std::string target = "unix:" + dir.path() + "/race.sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort(target, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      auto stub = v1::DevicePlacement::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
      for (int i = 0; i < calls; ++i) {
        grpc::ClientContext ctx;
        v1::GetInventoryRequest request;
        v1::Inventory reply;
        if (stub->GetInventory(&ctx, request, &reply).ok() && reply.revision() > 0) ok.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  server->Shutdown();
  EXPECT_EQ(ok.load(), threads * calls);
}

TEST(TsanControl, GrpcCallbackLockedIsClean) {
  CountingService service(/*locked=*/true);
  CallConcurrently(service, 4, 50);
  EXPECT_EQ(service.calls(), 200);
}

TEST(TsanControl, DISABLED_GrpcCallbackRace) {
  CountingService service(/*locked=*/false);
  CallConcurrently(service, 4, 50);
  EXPECT_LE(service.calls(), 200);  // lost updates possible: that is the race
}

}  // namespace
}  // namespace devplace
