// WatchHub over a real gRPC server: a WatchInventory handler that opens each stream on the hub
// (the peer and whether it is privileged come from the test client's metadata), a real inventory
// store whose probe is a real child process printing the inventory file the test writes, and real
// client streams. The first message and the newer revisions, a client that already has the
// current revision, both caps and their messages, a freed count when a stream ends, and shutdown.
#include "server/service/watch_hub.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "server/service/wire.h"
#include "tests/common/temp_dir.h"
#include "tests/service/serve.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

// Metadata the test client sends: the peer key and whether the caller is privileged.
constexpr char kPeerKey[] = "x-test-peer";
constexpr char kPrivilegedKey[] = "x-test-privileged";

std::string Metadata(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
}

// WatchInventory only: parses the request as DevicePlacementService does and opens the stream.
class HubService final
    : public v1::DevicePlacement::WithRawCallbackMethod_WatchInventory<v1::DevicePlacement::CallbackService> {
 public:
  explicit HubService(service::WatchHub& hub) : hub_(hub) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchInventory(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* request_bytes) override {
    v1::WatchInventoryRequest request;
    grpc::Status bad;
    EXPECT_TRUE(service::ParseRequest(request_bytes, &request, &bad)) << bad.error_message();
    return hub_.Open(Metadata(ctx, kPeerKey), request.known_epoch(), request.known_revision(),
                     service::Viewer{Metadata(ctx, kPrivilegedKey) == "yes", {}});
  }

 private:
  service::WatchHub& hub_;
};

v1::Inventory Gpus(int n) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, n);
  return b.Build();
}

// One client stream.
struct Stream {
  std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<grpc::ClientReader<v1::Inventory>> reader;
};

class WatchHubTest : public ::testing::Test {
 protected:
  void Start(service::WatchLimits limits) {
    dir_.Write("inventory.bin", Gpus(2).SerializeAsString());
    inventory::StoreOptions options;
    options.probe_command = {"/bin/cat", dir_.File("inventory.bin")};
    store_ = std::make_unique<inventory::InventoryStore>(options);
    ASSERT_TRUE(store_->Refresh().ok());
    // What each caller is sent: the snapshot, marked with whether it was rendered privileged.
    hub_ = std::make_unique<service::WatchHub>(*store_, limits, [](const v1::Inventory& inv, const service::Viewer& viewer) {
      v1::Inventory copy = inv;
      copy.set_daemon_version(viewer.privileged ? "privileged" : "unprivileged");
      return copy.SerializeAsString();
    });
    service_ = std::make_unique<HubService>(*hub_);
    served_ = ServeOnUnixSocket(service_.get(), dir_.File("s.sock"));
    ASSERT_NE(served_.server, nullptr);
  }
  void TearDown() override {
    if (hub_ != nullptr) hub_->Shutdown();
    if (served_.server != nullptr) served_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  Stream Watch(const std::string& peer, bool privileged = false, uint64_t known_epoch = 0, uint64_t known_revision = 0) {
    Stream s;
    s.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    s.ctx->AddMetadata(kPeerKey, peer);
    s.ctx->AddMetadata(kPrivilegedKey, privileged ? "yes" : "no");
    v1::WatchInventoryRequest request;
    request.set_known_epoch(known_epoch);
    request.set_known_revision(known_revision);
    s.reader = served_.stub->WatchInventory(s.ctx.get(), request);
    return s;
  }
  // Publishes a new revision through the real store (the probe child prints the new file).
  uint64_t Publish(int gpus) {
    dir_.Write("inventory.bin", Gpus(gpus).SerializeAsString());
    absl::StatusOr<inventory::Snapshot> now = store_->Refresh();
    EXPECT_TRUE(now.ok()) << now.status();
    return now.ok() ? (*now)->revision() : 0;
  }
  // Waits (at most 10 s) until the hub counts `n` open streams.
  bool AwaitOpen(size_t n) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (hub_->size() != n && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    return hub_->size() == n;
  }

  TempDir dir_;
  std::unique_ptr<inventory::InventoryStore> store_;
  std::unique_ptr<service::WatchHub> hub_;
  std::unique_ptr<HubService> service_;
  Served served_;
};

TEST_F(WatchHubTest, SendsTheCurrentSnapshotThenEveryNewerRevisionAsTheCallerMaySeeIt) {
  Start({});
  Stream plain = Watch("uid:1000");
  Stream admin = Watch("uid:0", true);
  v1::Inventory got;
  ASSERT_TRUE(plain.reader->Read(&got));
  EXPECT_EQ(got.revision(), 1u);
  EXPECT_EQ(got.backends(1).devices_size(), 2);
  EXPECT_EQ(got.daemon_version(), "unprivileged");
  ASSERT_TRUE(admin.reader->Read(&got));
  EXPECT_EQ(got.daemon_version(), "privileged");
  ASSERT_EQ(Publish(4), 2u);
  ASSERT_TRUE(plain.reader->Read(&got));
  EXPECT_EQ(got.revision(), 2u);
  EXPECT_EQ(got.backends(1).devices_size(), 4);
  ASSERT_TRUE(admin.reader->Read(&got));
  EXPECT_EQ(got.revision(), 2u);
  EXPECT_EQ(hub_->size(), 2u);
}

TEST_F(WatchHubTest, AClientThatHasTheCurrentRevisionIsSentOnlyNewerOnes) {
  Start({});
  const inventory::Snapshot now = store_->Current();
  Stream s = Watch("uid:1000", false, now->epoch(), now->revision());
  ASSERT_TRUE(AwaitOpen(1));
  ASSERT_EQ(Publish(3), 2u);
  v1::Inventory got;
  ASSERT_TRUE(s.reader->Read(&got));
  EXPECT_EQ(got.revision(), 2u);  // revision 1 was never sent
  // Another epoch (a restarted daemon) with the same revision number is sent the current one.
  Stream other = Watch("uid:1000", false, now->epoch() + 1, 2);
  ASSERT_TRUE(other.reader->Read(&got));
  EXPECT_EQ(got.revision(), 2u);
}

TEST_F(WatchHubTest, PastACapANewStreamEndsAtOnceAndAnEndedStreamFreesItsCount) {
  Start({.max_watches = 2, .max_watches_per_peer = 1});
  v1::Inventory got;
  Stream a = Watch("uid:1000");
  ASSERT_TRUE(a.reader->Read(&got));
  Stream a2 = Watch("uid:1000");
  EXPECT_FALSE(a2.reader->Read(&got));
  grpc::Status s = a2.reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(),
            "peer uid:1000 already has 1 watches, the limit per peer (--max_watches_per_peer); retry later");
  Stream b = Watch("uid:1001");
  ASSERT_TRUE(b.reader->Read(&got));
  Stream c = Watch("uid:1002");
  EXPECT_FALSE(c.reader->Read(&got));
  s = c.reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "devplaced already serves 2 watches, its limit (--max_watches); retry later");
  // The client cancels one: its peer and the total have room again.
  a.ctx->TryCancel();
  EXPECT_EQ(a.reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(AwaitOpen(1));
  Stream c2 = Watch("uid:1002");
  ASSERT_TRUE(c2.reader->Read(&got));
  EXPECT_EQ(got.revision(), 1u);
  EXPECT_EQ(hub_->size(), 2u);
}

TEST_F(WatchHubTest, ShutdownEndsEveryStreamWithOkAndLaterOnesAtOnce) {
  Start({});
  v1::Inventory got;
  Stream a = Watch("uid:1000");
  Stream b = Watch("uid:1001");
  ASSERT_TRUE(a.reader->Read(&got));
  ASSERT_TRUE(b.reader->Read(&got));
  hub_->Shutdown();
  EXPECT_FALSE(a.reader->Read(&got));
  EXPECT_TRUE(a.reader->Finish().ok());
  EXPECT_FALSE(b.reader->Read(&got));
  EXPECT_TRUE(b.reader->Finish().ok());
  Stream late = Watch("uid:1002");
  EXPECT_FALSE(late.reader->Read(&got));  // nothing sent
  EXPECT_TRUE(late.reader->Finish().ok());
  ASSERT_TRUE(AwaitOpen(0));
  EXPECT_EQ(Publish(5), 2u);  // the store no longer delivers to any stream
}

}  // namespace
}  // namespace devplace::testing
