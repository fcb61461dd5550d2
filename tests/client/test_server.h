// An in-process devplace.v1.DevicePlacement server for the client tests: a small sync service
// that answers ResolveDevice with the real resolver over a fixture host's probed inventory,
// streams WatchInventory, and can be told to stall or end streams; plus gRPC's default health
// service, on a unix socket in a fresh temporary directory.
#ifndef DEVPLACE_TESTS_CLIENT_TEST_SERVER_H_
#define DEVPLACE_TESTS_CLIENT_TEST_SERVER_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/server.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {

// The inventory devplace's probers build for a fixture host, with revision 1.
v1::Inventory FixtureInventory(const std::string& name);

class TestPlacementService final : public v1::DevicePlacement::Service {
 public:
  explicit TestPlacementService(v1::Inventory inventory) : inventory_(std::move(inventory)) {}

  // placement::Resolve over the current inventory; its status goes back unchanged.
  grpc::Status ResolveDevice(grpc::ServerContext* context, const v1::ResolveDeviceRequest* request,
                             v1::ResolveDeviceResponse* response) override;
  // The current inventory, after the configured delay (cut short when the call is cancelled).
  grpc::Status GetInventory(grpc::ServerContext* context, const v1::GetInventoryRequest* request,
                            v1::Inventory* response) override;
  // placement::ListBackendsResponse().
  grpc::Status ListBackends(grpc::ServerContext* context, const v1::ListBackendsRequest* request,
                            v1::ListBackendsResponse* response) override;
  // Bumps the revision and returns the inventory.
  grpc::Status RefreshInventory(grpc::ServerContext* context, const v1::RefreshInventoryRequest* request,
                                v1::Inventory* response) override;
  // The current inventory unless its revision is the known one, then each new revision, until the
  // call is cancelled, or after `watch_limit` messages when set (ending with `watch_end`).
  grpc::Status WatchInventory(grpc::ServerContext* context, const v1::WatchInventoryRequest* request,
                              grpc::ServerWriter<v1::Inventory>* writer) override;

  void set_delay(absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    delay_ = delay;
  }
  // Ends each watch with `end` after `messages` messages (0 = never).
  void EndWatchesAfter(int messages, grpc::Status end) {
    absl::MutexLock lock(&mu_);
    watch_limit_ = messages;
    watch_end_ = std::move(end);
  }
  uint64_t revision() const {
    absl::MutexLock lock(&mu_);
    return inventory_.revision();
  }
  // Messages all watches have written so far.
  int watch_messages() const {
    absl::MutexLock lock(&mu_);
    return watch_messages_;
  }
  // Waits until watches have written more than `messages` messages in all (true), or `timeout`.
  bool WaitForWatchMessagesOver(int messages, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto over = [this, messages]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return watch_messages_ > messages; };
    return mu_.AwaitWithTimeout(absl::Condition(&over), timeout);
  }

 private:
  mutable absl::Mutex mu_;
  v1::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int watch_limit_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status watch_end_ ABSL_GUARDED_BY(mu_);
  int watch_messages_ ABSL_GUARDED_BY(mu_) = 0;
};

// The service plus gRPC's default health service, listening on unix:<temp dir>/devplace.sock.
class TestServer {
 public:
  explicit TestServer(const std::string& fixture_host = "nvidia-2x-h100");
  ~TestServer();  // shuts down with a short grace period and removes the temp dir
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  // "unix:<dir>/devplace.sock".
  const std::string& target() const { return target_; }
  // The temporary directory holding the socket.
  const std::string& dir() const { return dir_.path(); }
  TestPlacementService& service() { return *service_; }
  // Sets what the health service answers for "" (the whole server).
  void SetServing(bool serving);

 private:
  TempDir dir_;  // destroyed last, after the server
  std::string target_;
  std::unique_ptr<TestPlacementService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_CLIENT_TEST_SERVER_H_
