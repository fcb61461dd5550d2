// Integration tests: the real devplaced binary on a temporary unix socket and 127.0.0.1:0,
// probing fixture host trees through the real devplace-probe child, called over gRPC.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

// A copy of a fixture host the test may change.
std::string CopyFixture(const std::string& name, const std::string& dir) {
  const std::string dst = dir + "/host";
  fs::copy(FixtureHost(name), dst, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return dst;
}

struct Stubs {
  explicit Stubs(const std::string& target)
      : channel(grpc::CreateChannel(target, grpc::InsecureChannelCredentials())),
        placement(v1::DevicePlacement::NewStub(channel)),
        health(grpc::health::v1::Health::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DevicePlacement::Stub> placement;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

bool Serving(Stubs& s) {
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return s.health->Check(Ctx(absl::Seconds(2)).get(), req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

void WaitServing(Stubs& s) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!Serving(s) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Serving(s)) << "devplaced never became SERVING";
}

v1::ResolveDeviceRequest Inference(const std::string& device_map) {
  v1::ResolveDeviceRequest r;
  r.set_workload(v1::WORKLOAD_INFERENCE);
  r.set_device_map(device_map);
  return r;
}

TEST(Daemon, ServesEveryRpcOverUnixSocketAndTcp) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100")});
  struct stat st;
  ASSERT_EQ(stat(d.socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  for (const std::string& target : {d.unix_target(), d.tcp_target()}) {
    SCOPED_TRACE(target);
    Stubs s(target);
    WaitServing(s);
    v1::ListBackendsResponse backends;
    ASSERT_TRUE(s.placement->ListBackends(Ctx().get(), {}, &backends).ok());
    EXPECT_EQ(backends.backends_size(), 12);
    v1::Inventory inv;
    ASSERT_TRUE(s.placement->GetInventory(Ctx().get(), {}, &inv).ok());
    EXPECT_EQ(inv.revision(), 1u);
    EXPECT_TRUE(inv.has_probed_at());
    ASSERT_EQ(inv.backends_size(), 2);
    EXPECT_EQ(inv.backends(1).devices_size(), 2);
    v1::ResolveDeviceResponse answer;
    ASSERT_TRUE(s.placement->ResolveDevice(Ctx().get(), Inference("auto"), &answer).ok());
    EXPECT_EQ(answer.device(), "cuda:0");
    EXPECT_EQ(answer.devices_size(), 3);
    EXPECT_EQ(answer.inventory_revision(), 1u);
    EXPECT_EQ(answer.inventory_epoch(), inv.epoch());
    EXPECT_NE(answer.inventory_epoch(), 0u);
    grpc::Status bad = s.placement->ResolveDevice(Ctx().get(), Inference("cuda:01"), &answer);
    EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(bad.error_message(), HasSubstr("device_map: Invalid device string: 'cuda:01'"));
    grpc::Status missing = s.placement->ResolveDevice(Ctx().get(), Inference("cuda:5"), &answer);
    EXPECT_EQ(missing.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(missing.error_message(), HasSubstr("cuda:0"));
    v1::Inventory refreshed;
    const grpc::Status refresh = s.placement->RefreshInventory(Ctx().get(), {}, &refreshed);
    if (target == d.unix_target()) {  // root over the socket may re-probe; plaintext TCP may not
      ASSERT_TRUE(refresh.ok()) << refresh.error_message();
      EXPECT_EQ(refreshed.revision(), 1u);  // same tree, same content, same revision
    } else {
      EXPECT_EQ(refresh.error_code(), grpc::StatusCode::PERMISSION_DENIED);
      EXPECT_THAT(refresh.error_message(), HasSubstr("allowed only to root"));
    }
    // WatchInventory: the current snapshot first.
    auto ctx = Ctx();
    auto reader = s.placement->WatchInventory(ctx.get(), {});
    v1::Inventory first;
    ASSERT_TRUE(reader->Read(&first));
    EXPECT_EQ(first.revision(), 1u);
    ctx->TryCancel();
    while (reader->Read(&first)) {
    }
  }
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
  EXPECT_THAT(d.Log(), HasSubstr("event=probe"));
  EXPECT_THAT(d.Log(), HasSubstr("event=shutdown signal=SIGTERM"));
}

TEST(Daemon, WatchSeesNewRevisionAfterTheTreeChangesAndRefresh) {
  TempDir dir;
  const std::string host = CopyFixture("nvidia-2x-h100", dir.path());
  DaemonProcess d(dir.path(), {"--host_root=" + host, "--refresh_interval=0s"});
  Stubs s(d.unix_target());
  WaitServing(s);
  grpc::ClientContext watch_ctx;
  v1::WatchInventoryRequest from_scratch;
  auto reader = s.placement->WatchInventory(&watch_ctx, from_scratch);
  v1::Inventory seen;
  ASSERT_TRUE(reader->Read(&seen));
  ASSERT_EQ(seen.revision(), 1u);
  fs::remove(host + "/dev/nvidia1");  // GPU 1 loses its device node
  v1::Inventory refreshed;
  ASSERT_TRUE(s.placement->RefreshInventory(Ctx().get(), {}, &refreshed).ok());
  EXPECT_EQ(refreshed.revision(), 2u);
  ASSERT_TRUE(reader->Read(&seen));
  EXPECT_EQ(seen.revision(), 2u);
  EXPECT_FALSE(seen.backends(1).devices(1).usable());
  EXPECT_THAT(seen.backends(1).devices(1).unusable_reason(), HasSubstr("/dev/nvidia1"));
  // SIGHUP re-probes too.
  std::ofstream(host + "/dev/nvidia1").close();
  d.Signal(SIGHUP);
  ASSERT_TRUE(reader->Read(&seen));
  EXPECT_EQ(seen.revision(), 3u);
  EXPECT_TRUE(seen.backends(1).devices(1).usable());
  watch_ctx.TryCancel();
  while (reader->Read(&seen)) {
  }
}

TEST(Daemon, UnavailableUntilTheFirstProbeThenServing) {
  TempDir dir;
  const std::string slow =
      dir.Script("slow-probe", absl::StrCat("sleep 1.5\nexec ", ShellQuote(DEVPLACE_PROBE_BINARY), " \"$@\"")).back();
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--probe_command=" + slow});
  Stubs s(d.tcp_target());
  v1::ResolveDeviceResponse answer;
  grpc::Status early = s.placement->ResolveDevice(Ctx().get(), Inference(""), &answer);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(early.error_message(), HasSubstr("no inventory yet"));
  EXPECT_FALSE(Serving(s));
  WaitServing(s);
  ASSERT_TRUE(s.placement->ResolveDevice(Ctx().get(), Inference(""), &answer).ok());
  EXPECT_EQ(answer.device(), "cpu");
}

// A probe that works once, then misbehaves as `after` says. The timeout leaves the good first
// probe room under sanitizers and a loaded machine (an AddressSanitizer probe takes ~0.6 s).
void ExpectLastGoodSnapshotSurvives(const std::string& after, grpc::StatusCode code, const std::string& words) {
  TempDir dir;
  const std::string probe =
      dir.Script("flaky-probe", absl::StrCat(OtherRunsExec(DEVPLACE_PROBE_BINARY), "if [ -e ", dir.path(), "/ran ]; then\n", after, "\nfi\ntouch ",
                                             dir.path(), "/ran\nexec ", ShellQuote(DEVPLACE_PROBE_BINARY), " \"$@\""))
          .back();
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--probe_command=" + probe,
                               "--probe_timeout=3s", "--refresh_interval=0s"});
  Stubs s(d.unix_target());  // RefreshInventory: root over the unix socket
  WaitServing(s);
  const absl::Time start = absl::Now();
  v1::Inventory inv;
  grpc::Status refresh = s.placement->RefreshInventory(Ctx().get(), {}, &inv);
  EXPECT_EQ(refresh.error_code(), code) << refresh.error_message();
  EXPECT_THAT(refresh.error_message(), HasSubstr(words));
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  // The daemon keeps answering from the last good snapshot.
  ASSERT_TRUE(s.placement->GetInventory(Ctx().get(), {}, &inv).ok());
  EXPECT_EQ(inv.revision(), 1u);
  EXPECT_EQ(inv.backends(1).devices_size(), 2);
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(s.placement->ResolveDevice(Ctx().get(), Inference("cuda:1"), &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:1");
  EXPECT_TRUE(Serving(s));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(Daemon, HangingProbeIsKilledAndTheLastGoodSnapshotStays) {
  ExpectLastGoodSnapshotSurvives("sleep 1000", grpc::StatusCode::DEADLINE_EXCEEDED, "timed out");
}

TEST(Daemon, CrashingProbeIsReportedAndTheLastGoodSnapshotStays) {
  ExpectLastGoodSnapshotSurvives("echo 'probe blew up' >&2; kill -SEGV $$", grpc::StatusCode::INTERNAL, "signal");
}

TEST(Daemon, GarbageFromTheProbeIsReportedAndTheLastGoodSnapshotStays) {
  ExpectLastGoodSnapshotSurvives("echo 'this is not an inventory'; exit 0", grpc::StatusCode::INTERNAL, "Inventory");
}

TEST(Daemon, SigtermDuringCallsAndWatchesEndsCleanly) {
  TempDir dir;
  const std::string probe = dir.Script("slow-second-probe",
                                       absl::StrCat(OtherRunsExec(DEVPLACE_PROBE_BINARY), "if [ -e ", dir.path(), "/ran ]; then touch ", dir.path(),
                                                    "/second; sleep 1; fi\ntouch ",
                                                    dir.path(), "/ran\nexec ", ShellQuote(DEVPLACE_PROBE_BINARY), " \"$@\""))
                                .back();
  // A grace far longer than the slow probe's second, however slow the machine or the build.
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("amd-2x-mi210"), "--probe_command=" + probe,
                               "--refresh_interval=0s", "--shutdown_grace=30s"});
  Stubs s(d.unix_target());
  WaitServing(s);
  grpc::ClientContext watch_ctx;
  auto reader = s.placement->WatchInventory(&watch_ctx, {});
  v1::Inventory seen;
  ASSERT_TRUE(reader->Read(&seen));
  grpc::Status refresh_status;
  std::thread refresh([&] {
    v1::Inventory inv;
    refresh_status = s.placement->RefreshInventory(Ctx().get(), {}, &inv);
  });
  // SIGTERM once the refresh is waiting on the slow probe (however long the call takes to arrive).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (access((dir.path() + "/second").c_str(), F_OK) != 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(access((dir.path() + "/second").c_str(), F_OK), 0) << "the refresh never ran the probe";
  d.Signal(SIGTERM);
  while (reader->Read(&seen)) {
  }
  EXPECT_TRUE(reader->Finish().ok()) << "the watch ends cleanly, with OK";
  refresh.join();
  EXPECT_TRUE(refresh_status.ok()) << "the in-flight refresh finishes: " << refresh_status.error_message();
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
  EXPECT_THAT(d.Log(), HasSubstr("event=stopped"));
}

TEST(Daemon, MergesTheLibtorchViewFromTheTorchProbe) {
#ifndef DEVPLACE_TORCH_VERSION
  GTEST_SKIP() << "built with DEVPLACE_WITH_TORCH=OFF: no devplace-torch-probe";
#else
  TempDir dir;
  // --probe_timeout: loading libtorch takes about 1 s on an idle machine and passed the 10 s default
  // on a loaded one.
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--refresh_interval=0s",
                               "--torch_probe_command=" DEVPLACE_TORCH_PROBE_BINARY, "--probe_timeout=120s"});
  Stubs s(d.unix_target());
  WaitServing(s);
  ASSERT_TRUE(d.WaitForLog("event=torch_probe result=ok", absl::Seconds(120))) << d.Log();
  v1::Inventory inv;
  // The view reaches the inventory with the host probe that follows the torch probe.
  for (const absl::Time give_up = absl::Now() + absl::Seconds(120); !inv.torch().probed() && absl::Now() < give_up;) {
    ASSERT_TRUE(s.placement->GetInventory(Ctx().get(), {}, &inv).ok());
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(inv.torch().probed()) << inv.torch().error();
  EXPECT_EQ(inv.torch().version(), DEVPLACE_TORCH_VERSION);
  EXPECT_THAT(inv.torch().compiled_backends(), ::testing::Contains("cpu"));
  EXPECT_EQ(inv.torch().cuda_device_count(), 0u);  // Debian's libtorch is CPU-only
  // The daemon's own process never loads libtorch.
  std::ifstream maps("/proc/" + std::to_string(d.pid()) + "/maps");
  const std::string mapped((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_EQ(mapped.find("libtorch"), std::string::npos);
  // --torch_probe_command=none disables it, and says so in the operator's words (not "is empty").
  TempDir dir2;
  DaemonProcess off(dir2.path(), {"--host_root=" + FixtureHost("cpu-only"), "--torch_probe_command=none"});
  Stubs s2(off.unix_target());
  WaitServing(s2);
  ASSERT_TRUE(s2.placement->GetInventory(Ctx().get(), {}, &inv).ok());
  EXPECT_FALSE(inv.torch().probed());
  EXPECT_EQ(inv.torch().error(), "devplace-torch-probe is turned off (--torch_probe_command=none)");
  const CommandResult shown =
      RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(off.unix_target()), " inventory"));
  EXPECT_THAT(shown.out, HasSubstr("devplace-torch-probe is turned off (--torch_probe_command=none)")) << shown.out;
  EXPECT_THAT(shown.out, Not(HasSubstr("is empty")));
#endif
}

// One answer per request and inventory: clients that ask the same question while the daemon starts,
// merges usage reads (every 100 ms here) and runs a full refresh get the same bytes every time, all
// from revision 1 of one epoch: the fixture's files never change, so neither may the answer. The
// Neuron host is where it did not hold: the usage read lacked the per-core device memory the full
// probe reads, so the first usage refresh after start-up erased placed[].memory_free_bytes, and an
// answer asked a moment earlier differed from one asked a moment later; the AMD hosts read their
// memory in use from sysfs the same way.
// `m`'s bytes with map entries in key order: equal messages, equal bytes (a plain serialization
// writes max_memory in the map's own order, which differs between equal maps).
std::string Canonical(const google::protobuf::Message& m) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return bytes;
}

TEST(Daemon, OneAnswerPerRequestAndRevisionWhileItStartsRefreshesAndMergesUsage) {
  v1::ResolveDeviceRequest rank1;  // Accelerator().device for LOCAL_RANK=1
  rank1.set_workload(v1::WORKLOAD_TRAINING);
  rank1.set_convention(v1::CONVENTION_ACCELERATE);
  rank1.set_local_rank(1);
  const std::vector<v1::ResolveDeviceRequest> requests = {rank1, Inference("auto")};
  for (const char* host : {"neuron-2x-trn1", "amd-2x-mi210", "mixed-nvidia-amd-igpu", "nvidia-2x-h100"}) {
    SCOPED_TRACE(host);
    TempDir dir;
    std::vector<std::string> flags = {"--host_root=" + FixtureHost(host), "--usage_interval=100ms",
                                      "--refresh_min_interval=0s"};
    if (std::string(host) == "nvidia-2x-h100") {  // NVML's figures, from the fake, which do not move either
      setenv("FAKE_NVML_CONFIG", (std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/h100.txt").c_str(), 1);
      flags.push_back("--nvml_library=" DEVPLACE_FAKE_NVML);
    }
    DaemonProcess d(dir.path(), flags);
    unsetenv("FAKE_NVML_CONFIG");
    struct Answer {
      uint64_t epoch, revision;
      std::string bytes;
    };
    absl::Mutex mu;
    std::vector<std::map<std::string, int>> seen(requests.size());  // answer bytes -> count
    std::set<std::pair<uint64_t, uint64_t>> versions;                // (epoch, revision) answered from
    std::atomic<bool> done{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c) {  // each its own channel, from before the first inventory
      clients.emplace_back([&, c] {
        Stubs s(c % 2 == 0 ? d.unix_target() : d.tcp_target());
        while (!done.load()) {
          for (size_t i = 0; i < requests.size(); ++i) {
            v1::ResolveDeviceResponse answer;
            if (!s.placement->ResolveDevice(Ctx().get(), requests[i], &answer).ok()) continue;  // not serving yet
            absl::MutexLock lock(&mu);
            versions.insert({answer.inventory_epoch(), answer.inventory_revision()});
            ++seen[i][Canonical(answer)];
          }
        }
      });
    }
    // The event the test needs: answers given across several usage reads and a full refresh.
    Stubs s(d.unix_target());
    WaitServing(s);
    std::set<int64_t> usage_reads;
    bool refreshed = false;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (usage_reads.size() < 4 && absl::Now() < give_up) {
      v1::Inventory inv;
      if (s.placement->GetInventory(Ctx().get(), {}, &inv).ok()) {
        usage_reads.insert(inv.usage_read_at().seconds() * 1000000000 + inv.usage_read_at().nanos());
      }
      if (usage_reads.size() >= 2 && !refreshed) {
        v1::Inventory after;
        refreshed = s.placement->RefreshInventory(Ctx().get(), {}, &after).ok();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    done = true;
    for (std::thread& t : clients) t.join();
    EXPECT_GE(usage_reads.size(), 4u) << "usage reads seen by GetInventory: " << usage_reads.size() << "\n" << d.Log();
    EXPECT_TRUE(refreshed);
    v1::Inventory inv;
    ASSERT_TRUE(s.placement->GetInventory(Ctx().get(), {}, &inv).ok());
    EXPECT_EQ(versions, (std::set<std::pair<uint64_t, uint64_t>>{{inv.epoch(), 1}}));
    for (size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(requests[i].ShortDebugString());
      ASSERT_FALSE(seen[i].empty());
      if (seen[i].size() == 1) continue;
      std::string differ;
      for (const auto& [bytes, count] : seen[i]) {
        v1::ResolveDeviceResponse answer;
        answer.ParseFromString(bytes);
        absl::StrAppend(&differ, count, " x ", answer.ShortDebugString(), "\n");
      }
      ADD_FAILURE() << seen[i].size() << " different answers to one request:\n" << differ;
    }
  }
}

}  // namespace
}  // namespace devplace::testing
