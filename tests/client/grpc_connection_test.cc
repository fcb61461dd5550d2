// Every Connection method through MakeGrpcConnection against an in-process server that answers
// with the real resolver over the nvidia-2x-h100 fixture host: error mapping, deadlines, watch
// endings, health, Client::Connect and DefaultTarget.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connect_diagnosis.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"
#include "tests/client/test_server.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

ResolveOptions Inference(const std::string& device_map) {
  ResolveOptions options;
  options.workload = v1::WORKLOAD_INFERENCE;
  options.device_map = device_map;
  return options;
}

bool Equal(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

class GrpcConnectionTest : public ::testing::Test {
 protected:
  TestServer server_;
  Client client_{MakeGrpcConnection(server_.target())};
};

// A C++ caller of libdevplace whose daemon is unreachable is told the C++ way to choose it
// (ConnectOptions::address or DEVPLACE_ADDRESS), not the CLI's --address flag.
TEST(GrpcConnectionNote, AnUnreachableDaemonsNoteNamesConnectOptionsForCxxCallers) {
  TempDir dir;
  ConnectOptions options;
  options.address = "unix:" + dir.path() + "/absent.sock";
  options.timeout = absl::Seconds(2);
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Status unreachable = client->Inventory().status();
  EXPECT_EQ(unreachable.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(unreachable.message()),
              ::testing::EndsWith(absl::StrCat(" [devplace target ", options.address, " (from ConnectOptions::address); "
                                               "set DEVPLACE_ADDRESS or ConnectOptions::address to choose the daemon]")));
  EXPECT_THAT(std::string(unreachable.message()), Not(HasSubstr("--address")));
}

TEST_F(GrpcConnectionTest, ResolvesWithTheRealResolver) {
  absl::StatusOr<v1::ResolveDeviceResponse> r = client_.Resolve(Inference("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  EXPECT_EQ(r->backend(), v1::ROW_CUDA_NVIDIA);
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cuda:1", "cpu"));
  EXPECT_EQ(r->inventory_revision(), 1u);
  EXPECT_THAT(r->explanation(), ::testing::Contains(HasSubstr("I-AUTO")));
  // Same answer as the resolver gives in-process.
  absl::StatusOr<v1::ResolveDeviceResponse> local =
      placement::Resolve(FixtureInventory("nvidia-2x-h100"), Inference("auto").ToRequest());
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(Equal(*r, *local));
}

TEST_F(GrpcConnectionTest, RequestFieldsReachTheServer) {
  ResolveOptions options = Inference("cuda:0");
  options.env["CUDA_VISIBLE_DEVICES"] = "1";
  absl::StatusOr<v1::ResolveDeviceResponse> r = client_.Resolve(options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");  // the job's numbering ...
  ASSERT_EQ(r->placed_size(), 1);
  EXPECT_EQ(r->placed(0).host_index(), 1);  // ... of host GPU 1
  EXPECT_EQ(r->placed(0).pci_bus_id(), "0000:9a:00.0");

  options = Inference("auto");
  options.job_device_nodes = std::vector<std::string>();  // a job that sees no accelerator node
  r = client_.Resolve(options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cpu");

  ResolveOptions training;
  training.workload = v1::WORKLOAD_TRAINING;
  training.local_rank = 1;
  training.world_size = 2;
  r = client_.Resolve(training);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:1");
}

TEST_F(GrpcConnectionTest, InvalidArgumentCarriesTheServersMessage) {
  const ResolveOptions bad = Inference("cuda:-1");
  absl::StatusOr<v1::ResolveDeviceResponse> r = client_.Resolve(bad);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("device_map"));
  absl::StatusOr<v1::ResolveDeviceResponse> local =
      placement::Resolve(FixtureInventory("nvidia-2x-h100"), bad.ToRequest());
  EXPECT_EQ(r.status(), local.status());  // code and message unchanged

  EXPECT_EQ(client_.Resolve(ResolveOptions()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GrpcConnectionTest, FailedPreconditionNamesWhatIsVisible) {
  absl::StatusOr<v1::ResolveDeviceResponse> r = client_.Resolve(Inference("cuda:5"));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("cuda:1"));
}

TEST_F(GrpcConnectionTest, GetInventoryListBackendsRefresh) {
  absl::StatusOr<v1::Inventory> inv = client_.Inventory();
  ASSERT_TRUE(inv.ok()) << inv.status();
  // Two probes of one fixture differ only in how long each prober took (more under load).
  v1::Inventory expected = FixtureInventory("nvidia-2x-h100");
  v1::Inventory got = *inv;
  for (v1::Inventory* i : {&expected, &got}) {
    for (v1::ProbeReport& report : *i->mutable_probe_reports()) report.clear_duration_ms();
  }
  EXPECT_TRUE(Equal(got, expected));
  ASSERT_EQ(inv->backends_size(), 2);
  EXPECT_EQ(inv->backends(1).devices_size(), 2);

  absl::StatusOr<v1::ListBackendsResponse> table = client_.Backends();
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->backends_size(), 12);
  EXPECT_TRUE(Equal(*table, placement::ListBackendsResponse()));

  absl::StatusOr<v1::Inventory> refreshed = client_.Refresh();
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  EXPECT_EQ(refreshed->revision(), 2u);
  EXPECT_EQ(client_.Inventory()->revision(), 2u);
}

TEST_F(GrpcConnectionTest, WatchDeliversRevisionsUntilTheCallbackStops) {
  std::vector<uint64_t> seen;
  const absl::Status status = client_.Watch(0, [&](const v1::Inventory& inv) {
    seen.push_back(inv.revision());
    if (seen.size() == 1) {
      EXPECT_TRUE(client_.Refresh().ok());  // another call on the same connection, mid-watch
      return true;
    }
    return false;
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_THAT(seen, ElementsAre(1u, 2u));
}

TEST_F(GrpcConnectionTest, WatchSkipsTheKnownRevision) {
  std::thread refresher([this] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(client_.Refresh().ok());
  });
  std::vector<uint64_t> seen;
  const absl::Status status = client_.Watch(1, [&](const v1::Inventory& inv) {
    seen.push_back(inv.revision());
    return false;
  });
  refresher.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_THAT(seen, ElementsAre(2u));
}

TEST_F(GrpcConnectionTest, WatchReturnsWhenTheServerEndsTheStream) {
  server_.service().EndWatchesAfter(1, grpc::Status::OK);
  int calls = 0;
  // The server ending the stream is ABORTED, not OK: OK means the callback stopped the watch.
  const absl::Status ended = client_.Watch(0, [&](const v1::Inventory&) { return ++calls < 100; });
  EXPECT_EQ(ended.code(), absl::StatusCode::kAborted) << ended;
  EXPECT_THAT(std::string(ended.message()), HasSubstr("the daemon ended the watch"));
  EXPECT_EQ(calls, 1);

  server_.service().EndWatchesAfter(1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "daemon shutting down"));
  calls = 0;
  const absl::Status status = client_.Watch(0, [&](const v1::Inventory&) { return ++calls < 100; });
  EXPECT_EQ(status, absl::UnavailableError("daemon shutting down"));
  EXPECT_EQ(calls, 1);
}

TEST_F(GrpcConnectionTest, WatchDeadlineFromOptions) {
  ConnectOptions options;
  options.watch_timeout = absl::Milliseconds(200);
  Client client(MakeGrpcConnection(server_.target(), options));
  int calls = 0;
  const absl::Time start = absl::Now();
  const absl::Status status = client.Watch(0, [&](const v1::Inventory&) { return ++calls > 0; });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(calls, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(GrpcConnectionTest, UnaryDeadlineExceeded) {
  server_.service().set_delay(absl::Seconds(3));
  ConnectOptions options;
  options.timeout = absl::Milliseconds(200);
  Client client(MakeGrpcConnection(server_.target(), options));
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::Inventory> inv = client.Inventory();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kDeadlineExceeded) << inv.status();
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(2));
  // The sentence for this process's user (root or not) begins the message, gRPC's text after it.
  EXPECT_THAT(std::string(inv.status().message()),
              ::testing::StartsWith(internal::NoAnswer(server_.target(), options.timeout) + " (gRPC: "));
}

// No answer: root checks the package's unit and its journal; an ordinary user, who usually may not
// read that journal, is told to ask the host's operator. Both may check the address or wait longer.
TEST(NoAnswerTest, RootChecksTheUnitAnOrdinaryUserAsksTheOperator) {
  const std::string root = internal::NoAnswer("unix:/run/d.sock", absl::Seconds(5), true);
  const std::string user = internal::NoAnswer("unix:/run/d.sock", absl::Seconds(5), false);
  for (const std::string& m : {root, user}) {
    EXPECT_THAT(m, ::testing::StartsWith("devplaced at unix:/run/d.sock did not answer within 5s: "));
    EXPECT_THAT(m, ::testing::HasSubstr("check that it is the daemon meant (devplace --address, DEVPLACE_ADDRESS"));
    EXPECT_THAT(m, ::testing::HasSubstr("allow more time (devplace --timeout=D; ConnectOptions::timeout)"));
  }
  EXPECT_THAT(root, ::testing::HasSubstr("`systemctl status devplaced` and `journalctl -u devplaced` where it runs"));
  EXPECT_THAT(user, ::testing::HasSubstr("ask the host's operator to check it"));
  EXPECT_THAT(user, ::testing::Not(::testing::HasSubstr("journalctl")));
  EXPECT_THAT(user, ::testing::Not(::testing::HasSubstr("systemctl")));
  EXPECT_EQ(internal::NoAnswer("unix:/run/d.sock", absl::Seconds(5)), ::geteuid() == 0 ? root : user);
}

TEST_F(GrpcConnectionTest, Health) {
  absl::StatusOr<bool> serving = client_.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  server_.SetServing(false);
  serving = client_.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_FALSE(*serving);
}

TEST_F(GrpcConnectionTest, CopiesShareOneConnectionAcrossThreads) {
  const Client copy = client_;
  EXPECT_EQ(copy.connection(), client_.connection());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const Client mine = t % 2 == 0 ? copy : client_;
      for (int i = 0; i < 10; ++i) {
        absl::StatusOr<v1::ResolveDeviceResponse> r = mine.Resolve(Inference("auto"));
        if (r.ok() && r->device() == "cuda:0") ++ok;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), 40);
}

TEST_F(GrpcConnectionTest, ConnectUsesDevplaceAddress) {
  ScopedEnv address("DEVPLACE_ADDRESS", server_.target().c_str());
  absl::StatusOr<Client> client = Client::Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<bool> serving = client->Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
}

TEST(GrpcConnectionErrors, UnreachableDaemonIsUnavailable) {
  TempDir dir;
  Client client(MakeGrpcConnection("unix:" + dir.path() + "/nothing.sock"));
  const absl::Status status = client.Health().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(client.Inventory().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Watch(0, [](const v1::Inventory&) { return true; }).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcConnectionErrors, ConnectRejectsAUnixTargetWithoutPath) {
  ConnectOptions options;
  options.address = "unix:";
  EXPECT_EQ(Client::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.address = "unix:/tmp/x.sock";
  EXPECT_TRUE(Client::Connect(options).ok());
}

// Binds a unix socket at `path` (what DefaultTarget looks for); closed on destruction.
class ListeningSocket {
 public:
  explicit ListeningSocket(const std::string& path) : fd_(socket(AF_UNIX, SOCK_STREAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  }
  ~ListeningSocket() { close(fd_); }

 private:
  int fd_;
};

TEST(DefaultTargetTest, EnvironmentVariableWins) {
  ScopedEnv address("DEVPLACE_ADDRESS", "unix:/somewhere/devplace.sock");
  EXPECT_EQ(DefaultTarget(), "unix:/somewhere/devplace.sock");
  ScopedEnv tcp("DEVPLACE_ADDRESS", "10.0.0.7:7465");
  EXPECT_EQ(DefaultTarget(), "10.0.0.7:7465");
}

TEST(DefaultTargetTest, FallsBackToTheDaemonsListeners) {
  if (access("/run/devplace/devplace.sock", F_OK) == 0) GTEST_SKIP() << "a devplaced runs on this host";
  TempDir runtime;
  ScopedEnv address("DEVPLACE_ADDRESS", "");  // set but empty = unset
  ScopedEnv xdg("XDG_RUNTIME_DIR", runtime.path().c_str());
  EXPECT_EQ(DefaultTarget(), "127.0.0.1:7465");
  runtime.Touch("devplace.sock");  // a plain file is not a socket
  EXPECT_EQ(DefaultTarget(), "127.0.0.1:7465");
  unlink((runtime.path() + "/devplace.sock").c_str());
  ListeningSocket socket(runtime.path() + "/devplace.sock");
  EXPECT_EQ(DefaultTarget(), "unix:" + runtime.path() + "/devplace.sock");
}

}  // namespace
}  // namespace devplace::testing

namespace devplace::testing {
namespace {

TEST_F(GrpcConnectionTest, WatchCancelledFromAnotherThreadReturnsCancelled) {
  WatchCanceller canceller;
  std::atomic<int> seen{0};
  std::thread canceller_thread([&] {
    while (seen.load() == 0) absl::SleepFor(absl::Milliseconds(5));  // the watch is running
    canceller.Cancel();
  });
  // The server never ends this stream by itself: only the canceller can.
  const absl::Status status = client_.Watch(0, [&](const v1::Inventory&) {
    seen.fetch_add(1);
    return true;
  }, &canceller);
  canceller_thread.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(seen.load(), 1);
  // Cancelled before it starts: returns at once, no callback.
  const absl::Status again = client_.Watch(0, [&](const v1::Inventory&) {
    seen.fetch_add(1);
    return true;
  }, &canceller);
  EXPECT_EQ(again.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(seen.load(), 1);
}

}  // namespace
}  // namespace devplace::testing
