// Prebuilt answers must be exactly the answers the resolver gives, and never outlive what they
// were built from: not across revisions, not across an unchanged re-probe (which publishes fresh
// free-memory figures under the same revision), not across requests; a usage refresh that moves
// nothing an answer shows keeps them.
#include "server/service/answer_cache.h"

#include <chrono>
#include <memory>
#include <string>

#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/message_differencer.h"
#include "absl/synchronization/notification.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"
#include "server/service/service.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using service::CanonicalRequestKey;

v1::Inventory Gpus(int n, uint64_t free_bytes = 70 * kGiB) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, n);
  for (int i = 0; i < n; ++i) b.Device(v1::ROW_CUDA_NVIDIA, i).set_memory_free_bytes(free_bytes - i);
  return b.Build();
}

v1::ResolveDeviceRequest AutoRequest() {
  v1::ResolveDeviceRequest r;
  r.set_workload(v1::WORKLOAD_INFERENCE);
  r.set_device_map("auto");
  r.set_model_size_bytes(uint64_t{40} << 30);
  return r;
}

// Whether `got` (a message or its serialized bytes) is exactly placement::Resolve(inv, req). Maps
// serialize in no fixed order, so messages are compared, not bytes.
::testing::AssertionResult IsResolversAnswer(const v1::ResolveDeviceResponse& got, const v1::Inventory& inv,
                                             const v1::ResolveDeviceRequest& req) {
  absl::StatusOr<v1::ResolveDeviceResponse> want = placement::Resolve(inv, req);
  if (!want.ok()) return ::testing::AssertionFailure() << "the resolver failed: " << want.status();
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  if (differ.Compare(*want, got)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not the resolver's answer: " << diff;
}
::testing::AssertionResult IsResolversAnswer(const std::string& bytes, const v1::Inventory& inv,
                                             const v1::ResolveDeviceRequest& req) {
  v1::ResolveDeviceResponse got;
  if (!got.ParseFromString(bytes)) return ::testing::AssertionFailure() << bytes.size() << " bytes that do not parse";
  return IsResolversAnswer(got, inv, req);
}
bool Same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

TEST(CanonicalRequestKey, EnvOrderDoesNotMatterButContentDoes) {
  v1::ResolveDeviceRequest a = AutoRequest(), b = AutoRequest();
  for (int i = 0; i < 20; ++i) (*a.mutable_env())["VAR_" + std::to_string(i)] = std::to_string(i);
  for (int i = 19; i >= 0; --i) (*b.mutable_env())["VAR_" + std::to_string(i)] = std::to_string(i);
  EXPECT_EQ(CanonicalRequestKey(a), CanonicalRequestKey(b));
  (*b.mutable_env())["VAR_3"] = "4";
  EXPECT_NE(CanonicalRequestKey(a), CanonicalRequestKey(b));
  v1::ResolveDeviceRequest c = AutoRequest();
  c.set_device_map("balanced");
  EXPECT_NE(CanonicalRequestKey(AutoRequest()), CanonicalRequestKey(c));
}

TEST(PreparedSnapshot, AnswersAreTheResolversAndRepeatsComeFromTheCache) {
  auto snap = std::make_shared<const v1::Inventory>(Gpus(8));
  service::PreparedSnapshot prepared(snap, {});
  v1::Inventory parsed;
  ASSERT_TRUE(parsed.ParseFromString(*prepared.inventory_bytes()));
  EXPECT_TRUE(Same(parsed, *snap));

  const v1::ResolveDeviceRequest req = AutoRequest();
  std::shared_ptr<const service::ResolveAnswer> first = prepared.Resolve(req);
  ASSERT_TRUE(first->status.ok()) << first->status;
  EXPECT_TRUE(IsResolversAnswer(first->bytes, *snap, req));
  EXPECT_EQ(prepared.hits(), 0u);
  std::shared_ptr<const service::ResolveAnswer> again = prepared.Resolve(req);
  EXPECT_EQ(again, first);  // the same cached object
  EXPECT_EQ(prepared.hits(), 1u);

  v1::ResolveDeviceRequest train;
  train.set_workload(v1::WORKLOAD_TRAINING);
  train.set_local_rank(3);
  train.set_world_size(8);
  std::shared_ptr<const service::ResolveAnswer> other = prepared.Resolve(train);
  EXPECT_TRUE(IsResolversAnswer(other->bytes, *snap, train));
  EXPECT_NE(other, first);
  EXPECT_EQ(prepared.cached_answers(), 2u);
}

// The wire-bytes path: the same bytes again are a hit without parsing; other bytes (even of an
// equal request) are a miss until answered; errors and limits behave as for Resolve.
TEST(PreparedSnapshot, RepeatedWireBytesAreServedWithoutParsing) {
  auto snap = std::make_shared<const v1::Inventory>(Gpus(8));
  service::PreparedSnapshot prepared(snap, {});
  v1::ResolveDeviceRequest req = AutoRequest();
  (*req.mutable_env())["CUDA_VISIBLE_DEVICES"] = "3,1";
  const std::string wire = req.SerializeAsString();
  EXPECT_EQ(prepared.FindByWire(wire), nullptr);
  std::shared_ptr<const service::ResolveAnswer> first = prepared.Resolve(req, wire);
  ASSERT_TRUE(first->status.ok()) << first->status;
  EXPECT_TRUE(IsResolversAnswer(first->bytes, *snap, req));
  EXPECT_EQ(prepared.FindByWire(wire), first);
  EXPECT_EQ(prepared.hits(), 1u);
  // Another request's bytes never hit this entry.
  v1::ResolveDeviceRequest other = req;
  (*other.mutable_env())["CUDA_VISIBLE_DEVICES"] = "1,3";
  EXPECT_EQ(prepared.FindByWire(other.SerializeAsString()), nullptr);
  std::shared_ptr<const service::ResolveAnswer> second = prepared.Resolve(other, other.SerializeAsString());
  EXPECT_TRUE(IsResolversAnswer(second->bytes, *snap, other));
  EXPECT_NE(second->bytes, first->bytes);
  // Errors are remembered by their bytes too.
  v1::ResolveDeviceRequest bad = AutoRequest();
  bad.set_device_map("cuda:9");
  prepared.Resolve(bad, bad.SerializeAsString());
  ASSERT_NE(prepared.FindByWire(bad.SerializeAsString()), nullptr);
  EXPECT_EQ(prepared.FindByWire(bad.SerializeAsString())->status, placement::Resolve(*snap, bad).status());
  // Off: nothing found by bytes either.
  service::PreparedSnapshot off(snap, {.max_entries = 0});
  off.Resolve(req, wire);
  EXPECT_EQ(off.FindByWire(wire), nullptr);
  // Bounded: entries by bytes count against max_entries with the canonical ones.
  service::PreparedSnapshot small(snap, {.max_entries = 2, .max_bytes = size_t{1} << 20});
  for (int rank = 0; rank < 6; ++rank) {
    v1::ResolveDeviceRequest r;
    r.set_workload(v1::WORKLOAD_TRAINING);
    r.set_local_rank(rank);
    r.set_world_size(6);
    EXPECT_TRUE(IsResolversAnswer(small.Resolve(r, r.SerializeAsString())->bytes, *snap, r));
    EXPECT_LE(small.cached_answers(), 2u);
  }
}

// A request bigger than max_key_bytes (here an env value the resolver rejects) is answered each
// time, never cached by either key, so it cannot crowd out the answers jobs repeat.
TEST(PreparedSnapshot, OversizedRequestsAreAnsweredButNotCached) {
  auto snap = std::make_shared<const v1::Inventory>(Gpus(2));
  service::PreparedSnapshot prepared(snap, {});
  const v1::ResolveDeviceRequest good = AutoRequest();
  prepared.Resolve(good, good.SerializeAsString());
  ASSERT_EQ(prepared.cached_answers(), 1u);
  v1::ResolveDeviceRequest big = AutoRequest();
  (*big.mutable_env())["FOO"] = std::string(20000, 'x');
  const std::string wire = big.SerializeAsString();
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<const service::ResolveAnswer> a = prepared.Resolve(big, wire);
    EXPECT_EQ(a->status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a->status.message()), HasSubstr("env.FOO"));
    EXPECT_EQ(prepared.FindByWire(wire), nullptr);
  }
  EXPECT_EQ(prepared.cached_answers(), 1u);
  EXPECT_NE(prepared.FindByWire(good.SerializeAsString()), nullptr);  // the job's answer survived
}

TEST(PreparedSnapshot, ErrorsAreCachedWithTheirStatus) {
  auto snap = std::make_shared<const v1::Inventory>(Gpus(2));
  service::PreparedSnapshot prepared(snap, {});
  v1::ResolveDeviceRequest bad = AutoRequest();
  bad.set_device_map("cuda:7");
  for (int i = 0; i < 2; ++i) {
    std::shared_ptr<const service::ResolveAnswer> a = prepared.Resolve(bad);
    EXPECT_EQ(a->status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(a->status, placement::Resolve(*snap, bad).status());
    EXPECT_TRUE(a->bytes.empty());
  }
  EXPECT_EQ(prepared.hits(), 1u);
}

TEST(PreparedSnapshot, StaysWithinItsLimits) {
  auto snap = std::make_shared<const v1::Inventory>(Gpus(8));
  service::PreparedSnapshot prepared(snap, {.max_entries = 3, .max_bytes = size_t{1} << 20});
  for (int rank = 0; rank < 10; ++rank) {
    v1::ResolveDeviceRequest r;
    r.set_workload(v1::WORKLOAD_TRAINING);
    r.set_local_rank(rank);
    r.set_world_size(10);
    std::shared_ptr<const service::ResolveAnswer> a = prepared.Resolve(r);
    EXPECT_TRUE(IsResolversAnswer(a->bytes, *snap, r)) << "rank " << rank;
    EXPECT_LE(prepared.cached_answers(), 3u);
  }
  // Bytes: an answer bigger than a quarter of the budget is served, not cached.
  service::PreparedSnapshot tiny(snap, {.max_entries = 100, .max_bytes = 64});
  EXPECT_TRUE(IsResolversAnswer(tiny.Resolve(AutoRequest())->bytes, *snap, AutoRequest()));
  EXPECT_EQ(tiny.cached_answers(), 0u);
  // Off: nothing cached, answers unchanged.
  service::PreparedSnapshot off(snap, {.max_entries = 0});
  EXPECT_TRUE(IsResolversAnswer(off.Resolve(AutoRequest())->bytes, *snap, AutoRequest()));
  EXPECT_TRUE(IsResolversAnswer(off.Resolve(AutoRequest())->bytes, *snap, AutoRequest()));
  EXPECT_EQ(off.cached_answers(), 0u);
  EXPECT_EQ(off.hits(), 0u);
}

// The usage read `devplace-probe --usage_only` would print for Gpus(8, free): every device with
// its free memory and a usage table (one process on device 0 using `used` bytes).
// (Backend 0 is the host's CPU, 1 the GPUs.)
v1::Inventory UsageRead(uint64_t free_bytes, uint64_t used) {
  v1::Inventory usage = Gpus(8, free_bytes);
  for (v1::Device& d : *usage.mutable_backends(1)->mutable_devices()) {
    v1::DeviceUsage& u = *d.mutable_usage();
    u.set_source("nvml");
    u.set_processes_known(true);
    if (d.host_index() != 0) continue;
    u.set_memory_used_bytes(used + kGiB);
    u.set_process_count(1);
    v1::DeviceUsageProcess& p = *u.add_processes();
    p.set_pid(4242);
    p.set_used_memory_bytes(used);
  }
  return usage;
}

// A usage refresh (every 2 s in devplaced) publishes a new snapshot; when it moved only what no
// answer shows (when usage was read, the memory processes use), the answers stay cached. Free
// memory shows in answers (placed[].memory_free_bytes, max_memory): when it moves, and on a new
// revision, the cache starts empty and the answers are the resolver's for the new snapshot.
TEST(PreparedSnapshots, AUsageOnlyRefreshKeepsTheAnswersAndARealChangeEmptiesThem) {
  TempDir dir;
  dir.Write("inventory.bin", Gpus(8).SerializeAsString());
  dir.Write("usage.bin", UsageRead(70 * kGiB, 5 * kGiB).SerializeAsString());
  inventory::StoreOptions options;
  options.probe_command = {"/bin/cat", dir.File("inventory.bin")};
  options.usage_command = {"/bin/cat", dir.File("usage.bin")};
  inventory::InventoryStore store(options);
  ASSERT_TRUE(store.Refresh().ok());
  ASSERT_TRUE(store.RefreshUsage().ok());  // the first usage table: device 0 turns busy, a new revision
  service::PreparedSnapshots prepared(store, {});
  const v1::ResolveDeviceRequest req = AutoRequest();
  const std::shared_ptr<service::PreparedSnapshot> first = prepared.Current();
  ASSERT_NE(first, nullptr);
  const uint64_t revision = first->snapshot()->revision();
  EXPECT_TRUE(IsResolversAnswer(first->Resolve(req)->bytes, *first->snapshot(), req));
  ASSERT_EQ(first->cached_answers(), 1u);

  // Usage only: the process uses more memory, free memory as before.
  dir.Write("usage.bin", UsageRead(70 * kGiB, 9 * kGiB).SerializeAsString());
  ASSERT_TRUE(store.RefreshUsage().ok());
  const std::shared_ptr<service::PreparedSnapshot> second = prepared.Current();
  ASSERT_NE(second->snapshot(), first->snapshot());  // a new snapshot...
  EXPECT_EQ(second->snapshot()->revision(), revision);
  EXPECT_EQ(second->snapshot()->backends(1).devices(0).usage().memory_used_bytes(), 10 * kGiB);
  v1::Inventory served;
  ASSERT_TRUE(served.ParseFromString(*second->inventory_bytes()));  // ...whose inventory has the new usage
  EXPECT_EQ(served.backends(1).devices(0).usage().processes(0).used_memory_bytes(), 9 * kGiB);
  EXPECT_EQ(second->cached_answers(), 1u);  // ...and the answers of the last one
  const uint64_t hits = second->hits();
  EXPECT_TRUE(IsResolversAnswer(second->Resolve(req)->bytes, *second->snapshot(), req));
  EXPECT_EQ(second->hits(), hits + 1);

  // Free memory moved: answers show it, so they are built again.
  dir.Write("usage.bin", UsageRead(50 * kGiB, 9 * kGiB).SerializeAsString());
  ASSERT_TRUE(store.RefreshUsage().ok());
  const std::shared_ptr<service::PreparedSnapshot> third = prepared.Current();
  EXPECT_EQ(third->cached_answers(), 0u);
  const std::shared_ptr<const service::ResolveAnswer> answer = third->Resolve(req);
  EXPECT_TRUE(IsResolversAnswer(answer->bytes, *third->snapshot(), req));
  v1::ResolveDeviceResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(answer->bytes));
  EXPECT_EQ(parsed.placed(0).memory_free_bytes(), 50 * kGiB);

  // A real inventory change (two GPUs left): a new revision, an empty cache.
  dir.Write("inventory.bin", Gpus(2).SerializeAsString());
  ASSERT_TRUE(store.Refresh().ok());
  const std::shared_ptr<service::PreparedSnapshot> fourth = prepared.Current();
  EXPECT_GT(fourth->snapshot()->revision(), revision);
  EXPECT_EQ(fourth->cached_answers(), 0u);
  ASSERT_TRUE(parsed.ParseFromString(fourth->Resolve(req)->bytes));
  EXPECT_EQ(parsed.placed_size(), 2);
  EXPECT_TRUE(IsResolversAnswer(parsed, *fourth->snapshot(), req));
}

TEST(SameAnswers, OnlyFieldsNoAnswerShowsAreIgnored) {
  const v1::Inventory base = UsageRead(70 * kGiB, 5 * kGiB);
  v1::Inventory other = base;
  other.mutable_usage_read_at()->set_seconds(1234);
  other.mutable_probed_at()->set_seconds(99);
  other.mutable_backends(1)->mutable_devices(1)->mutable_usage()->set_busy(true);
  EXPECT_TRUE(service::SameAnswers(base, other));
  other.set_revision(base.revision() + 1);
  EXPECT_FALSE(service::SameAnswers(base, other));
  other = base;
  other.mutable_backends(1)->mutable_devices(3)->set_memory_free_bytes(1);
  EXPECT_FALSE(service::SameAnswers(base, other));
  other = base;
  other.mutable_host()->set_memory_available_bytes(base.host().memory_available_bytes() + 1);
  EXPECT_FALSE(service::SameAnswers(base, other));
}

// The real service on a unix socket, over a store whose probe (a real child process) prints the
// inventory file the test writes.
class ServiceCache : public ::testing::Test {
 protected:
  void SetUp() override {
    inventory_file_ = dir_.File("inventory.bin");
    Publish(Gpus(8));
    inventory::StoreOptions options;
    options.probe_command = {"/bin/cat", inventory_file_};
    store_ = std::make_unique<inventory::InventoryStore>(options);
    ASSERT_TRUE(store_->Refresh().ok());
    service_ = std::make_unique<service::DevicePlacementService>(*store_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + dir_.File("s.sock"), grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("unix:" + dir_.File("s.sock"), grpc::InsecureChannelCredentials());
    stub_ = v1::DevicePlacement::NewStub(channel_);
  }
  void TearDown() override {
    service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  }
  void Publish(const v1::Inventory& inv) { dir_.Write("inventory.bin", inv.SerializeAsString()); }
  v1::ResolveDeviceResponse Resolve(const v1::ResolveDeviceRequest& req) {
    v1::ResolveDeviceResponse out;
    const grpc::Status s = stub_->ResolveDevice(Ctx().get(), req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }
  grpc::Status Raw(const std::string& method, const std::string& body) {
    grpc::GenericStub generic(channel_);
    auto ctx = Ctx();
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(ctx.get(), "/devplace.v1.DevicePlacement/" + method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status;
  }

  TempDir dir_;
  std::string inventory_file_;
  std::unique_ptr<inventory::InventoryStore> store_;
  std::unique_ptr<service::DevicePlacementService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DevicePlacement::Stub> stub_;
};

TEST_F(ServiceCache, RepeatedRequestsGetTheResolversAnswer) {
  const v1::ResolveDeviceRequest req = AutoRequest();
  const v1::ResolveDeviceResponse first = Resolve(req);
  const v1::ResolveDeviceResponse second = Resolve(req);
  EXPECT_TRUE(IsResolversAnswer(first, *store_->Current(), req));
  EXPECT_TRUE(Same(second, first));
  EXPECT_EQ(first.inventory_revision(), 1u);
  EXPECT_EQ(first.placed_size(), 8);
}

// Over the wire: the second call of the same bytes is served from the cache by its bytes, and a
// request whose env map arrives in another order still gets the resolver's answer.
TEST_F(ServiceCache, RepeatedBytesAndReorderedEnvGetTheResolversAnswer) {
  v1::ResolveDeviceRequest req = AutoRequest();
  for (int i = 0; i < 6; ++i) (*req.mutable_env())["VAR_" + std::to_string(i)] = std::to_string(i);
  (*req.mutable_env())["CUDA_VISIBLE_DEVICES"] = "5,2";
  for (int call = 0; call < 3; ++call) {
    const v1::ResolveDeviceResponse got = Resolve(req);
    EXPECT_TRUE(IsResolversAnswer(got, *store_->Current(), req)) << "call " << call;
    EXPECT_EQ(got.device(), "cuda:0");
    EXPECT_EQ(got.placed(0).host_index(), 5);
  }
  v1::ResolveDeviceRequest reordered = AutoRequest();
  (*reordered.mutable_env())["CUDA_VISIBLE_DEVICES"] = "5,2";
  for (int i = 5; i >= 0; --i) (*reordered.mutable_env())["VAR_" + std::to_string(i)] = std::to_string(i);
  EXPECT_TRUE(IsResolversAnswer(Resolve(reordered), *store_->Current(), req));
  (*reordered.mutable_env())["CUDA_VISIBLE_DEVICES"] = "2";
  EXPECT_EQ(Resolve(reordered).placed(0).host_index(), 2);
}

TEST_F(ServiceCache, AnUnchangedReprobeWithNewTelemetryIsNotServedFromTheOldSnapshot) {
  const v1::ResolveDeviceRequest req = AutoRequest();
  const v1::ResolveDeviceResponse before = Resolve(req);
  ASSERT_EQ(before.placed(0).memory_free_bytes(), 70 * kGiB);
  Publish(Gpus(8, 20 * kGiB));  // same content, other free memory: same revision, new snapshot
  absl::StatusOr<inventory::Snapshot> now = store_->Refresh();
  ASSERT_TRUE(now.ok());
  ASSERT_EQ((*now)->revision(), 1u);
  const v1::ResolveDeviceResponse after = Resolve(req);
  EXPECT_EQ(after.placed(0).memory_free_bytes(), 20 * kGiB);
  EXPECT_TRUE(IsResolversAnswer(after, **now, req));
}

TEST_F(ServiceCache, ANewRevisionGetsNewAnswersAndANewInventory) {
  const v1::ResolveDeviceRequest req = AutoRequest();
  EXPECT_EQ(Resolve(req).placed_size(), 8);
  v1::Inventory inv;
  ASSERT_TRUE(stub_->GetInventory(Ctx().get(), {}, &inv).ok());
  EXPECT_TRUE(Same(inv, *store_->Current()));

  Publish(Gpus(2));
  absl::StatusOr<inventory::Snapshot> now = store_->Refresh();
  ASSERT_TRUE(now.ok());
  ASSERT_EQ((*now)->revision(), 2u);
  const v1::ResolveDeviceResponse after = Resolve(req);
  EXPECT_EQ(after.inventory_revision(), 2u);
  EXPECT_EQ(after.placed_size(), 2);
  EXPECT_TRUE(IsResolversAnswer(after, **now, req));
  ASSERT_TRUE(stub_->GetInventory(Ctx().get(), {}, &inv).ok());
  EXPECT_EQ(inv.revision(), 2u);
  EXPECT_TRUE(Same(inv, **now));
}

TEST_F(ServiceCache, ListBackendsIsTheTable) {
  v1::ListBackendsResponse out;
  ASSERT_TRUE(stub_->ListBackends(Ctx().get(), {}, &out).ok());
  EXPECT_TRUE(Same(out, placement::ListBackendsResponse()));
  EXPECT_GT(out.backends_size(), 0);
}

TEST_F(ServiceCache, MalformedRequestsAreInvalidArgumentNamingTheMessage) {
  const std::string garbage("\xff\xff\xff", 3);
  for (const char* method : {"GetInventory", "ListBackends", "ResolveDevice"}) {
    const grpc::Status s = Raw(method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(s.error_message(), HasSubstr("do not parse as a devplace.v1.")) << method;
  }
  EXPECT_TRUE(Raw("GetInventory", "").ok());
  EXPECT_TRUE(Raw("ListBackends", "").ok());
}

}  // namespace
}  // namespace devplace::testing
