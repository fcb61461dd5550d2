// devplaced with NVML: the fake NVML library (tests/fakes) loaded by the real devplace-probe
// child. A never-returning NVML call costs the nvml prober only: the child gives up at its own
// deadline, the rest of the inventory arrives, and the daemon answers throughout.
#include <signal.h>

#include <string>

#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

std::string Script(const std::string& name) { return std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/" + name; }

TEST(NvmlDaemon, FreeMemoryFromNvmlBecomesMaxMemory) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", Script("h100.txt"));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--nvml_library=" DEVPLACE_FAKE_NVML});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  ASSERT_NE(FindReport(inv, "nvml"), nullptr);
  EXPECT_EQ(FindReport(inv, "nvml")->status(), v1::PROBE_STATUS_OK) << FindReport(inv, "nvml")->message();
  const v1::Device& gpu1 = inv.backends(1).devices(1);
  ASSERT_TRUE(gpu1.has_memory_free_bytes());
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx2, req, &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  EXPECT_EQ(answer.max_memory().at("1"), gpu1.memory_free_bytes());  // two GPUs: each one's free memory
  // The figures' source, as for the other vendor libraries: the device attribute and the I-MEM step.
  EXPECT_EQ(gpu1.attributes().at("memory_source"), "nvml");
  EXPECT_THAT(answer.explanation(), ::testing::Contains("I-MEM memory of cuda:0, cuda:1 from nvml"));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(NvmlDaemon, HungNvmlCallTimesOutInTheChildAndTheRestArrives) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", Script("hang.txt"));
  // The child gets 60 % of 10 s as its own vendor deadline; the daemon's 10 s is the safety net, with
  // 4 s left for the child's start and its other readers (1.6 s of 4 s were too few on a loaded
  // machine: they took 2.2 s).
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--nvml_library=" DEVPLACE_FAKE_NVML,
                               "--probe_timeout=10s", "--refresh_interval=0s"});
  auto stub = Stub(d.unix_target());  // RefreshInventory below: root over the unix socket
  // The daemon answers while the first probe's NVML call hangs (UNAVAILABLE: no inventory yet).
  grpc::ClientContext early;
  v1::ListBackendsResponse backends;
  EXPECT_TRUE(stub->ListBackends(&early, {}, &backends).ok());
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(60))) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("event=probe result=ok"));  // the child finished, not killed by the daemon
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  const v1::ProbeReport* report = FindReport(inv, "nvml");
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_THAT(report->message(), HasSubstr("nvmlDeviceGetMemoryInfo"));
  EXPECT_GE(report->duration_ms(), 1500u);
  ASSERT_EQ(inv.backends_size(), 2);
  EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU);
  ASSERT_EQ(inv.backends(1).devices_size(), 2);  // the NVIDIA row from sysfs and /proc
  EXPECT_FALSE(inv.backends(1).devices(0).has_memory_free_bytes());  // nothing of NVML merged
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx2, req, &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  // The next refresh is not blocked by the hung library of the previous child (it meets the hang
  // again: its own 6 s vendor deadline, then the answer).
  grpc::ClientContext ctx3;
  ctx3.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::Inventory again;
  EXPECT_TRUE(stub->RefreshInventory(&ctx3, {}, &again).ok());
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// A library that crashes (SIGSEGV inside nvmlDeviceGetMemoryInfo) in the probe's NVML child:
// the probe survives, the inventory arrives over the wire with nvml CRASHED and the NVIDIA rows
// from sysfs, and the daemon keeps serving (a second probe runs and answers too).
TEST(NvmlDaemon, CrashingNvmlCostsOnlyNvmlAndTheDaemonServes) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", Script("crash.txt"));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--nvml_library=" DEVPLACE_FAKE_NVML,
                               "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("event=probe result=ok"));
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  const v1::ProbeReport* report = FindReport(inv, "nvml");
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_THAT(report->message(), HasSubstr("SIGSEGV (Segmentation fault) in nvmlDeviceGetMemoryInfo (device 1)"));
  ASSERT_EQ(inv.backends_size(), 2);
  ASSERT_EQ(inv.backends(1).devices_size(), 2);
  EXPECT_TRUE(inv.backends(1).devices(0).usable());
  EXPECT_FALSE(inv.backends(1).devices(0).has_memory_free_bytes());  // nothing of NVML merged
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Inventory again;
  ASSERT_TRUE(stub->RefreshInventory(&ctx2, {}, &again).ok());
  EXPECT_EQ(FindReport(again, "nvml")->status(), v1::PROBE_STATUS_CRASHED);
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  grpc::ClientContext ctx3;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx3, req, &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(NvmlDaemon, CliProbeShowsNamesUuidsMemoryAndMigInstances) {
  const CommandResult r = RunCommand("FAKE_NVML_CONFIG=" + ShellQuote(Script("mig.txt")) + " " + ShellQuote(DEVPLACE_CLI_BINARY) +
                                     " probe --host_root=" + ShellQuote(FixtureHost("nvidia-mig")) +
                                     " --nvml_library=" + ShellQuote(DEVPLACE_FAKE_NVML));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("NVIDIA A100-SXM4-80GB"));
  EXPECT_THAT(r.out, HasSubstr("GPU-00000000-0000-4000-8000-000000000001"));
  EXPECT_THAT(r.out, HasSubstr("79.0 GiB"));  // free memory from NVML
  EXPECT_THAT(r.out, HasSubstr("MIG-00000000-0000-4000-8000-0000000000a1"));
  EXPECT_THAT(r.out, HasSubstr("3g.40gb"));
  // A never-returning NVML call: the CLI reports it and exits promptly with the rest.
  const absl::Time start = absl::Now();
  const CommandResult hung =
      RunCommand("FAKE_NVML_CONFIG=" + ShellQuote(Script("hang.txt")) + " timeout 10 " + ShellQuote(DEVPLACE_CLI_BINARY) +
                 " probe --probe_timeout=300ms --host_root=" + ShellQuote(FixtureHost("nvidia-2x-h100")) +
                 " --nvml_library=" + ShellQuote(DEVPLACE_FAKE_NVML));
  EXPECT_EQ(hung.exit_code, 0) << hung.err;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(hung.out, HasSubstr("TIMED_OUT"));
  EXPECT_THAT(hung.out, HasSubstr("0000:9a:00.0"));
}

}  // namespace
}  // namespace devplace::testing
