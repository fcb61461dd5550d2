// devplaced with the fake AMD SMI (tests/fakes/fake_amdsmi.cc) and the fake Level Zero loader
// (fake_ze.cc) loaded by the real devplace-probe, each in its own vendor process: their memory
// figures become max_memory over the wire; a crashing
// AMD SMI costs only its own data while NVML's rows on the same host stay enriched and the daemon
// keeps serving; `devplace inventory` shows the enriched rows.
#include <signal.h>
#include <stdlib.h>

#include <string>

#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMi210Vram = 68702699520;

// Sets the fakes' script variables for the daemon (and so its probe child) started in this scope.
class FakeScripts {
 public:
  FakeScripts(const std::string& amdsmi, const std::string& nvml = "", const std::string& ze = "") {
    if (!amdsmi.empty()) setenv("FAKE_AMDSMI_CONFIG", FixtureFile("amdsmi/" + amdsmi).c_str(), 1);
    if (!nvml.empty()) setenv("FAKE_NVML_CONFIG", FixtureFile("nvml/" + nvml).c_str(), 1);
    if (!ze.empty()) setenv("FAKE_ZE_CONFIG", FixtureFile("level_zero/" + ze).c_str(), 1);
  }
  ~FakeScripts() {
    unsetenv("FAKE_AMDSMI_CONFIG");
    unsetenv("FAKE_NVML_CONFIG");
    unsetenv("FAKE_ZE_CONFIG");
  }
};

TEST(VendorDaemon, AmdSmiMemoryBecomesMaxMemory) {
  TempDir dir;
  FakeScripts scripts("mi210.txt");
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("amd-2x-mi210"), "--nvml_library=",
                               "--amd_smi_library=" DEVPLACE_FAKE_AMDSMI});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  ASSERT_NE(FindReport(inv, "amd_smi"), nullptr);
  EXPECT_EQ(FindReport(inv, "amd_smi")->status(), v1::PROBE_STATUS_OK) << FindReport(inv, "amd_smi")->message();
  const v1::Device* first = FindDevice(inv, "0000:63:00.0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->attributes().at("memory_source"), "amd_smi");
  EXPECT_EQ(first->attributes().at("compute_partition"), "SPX");
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx2, req, &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  EXPECT_EQ(answer.max_memory().at("0"), kMi210Vram - 1073741824);  // AMD SMI's used, not sysfs'
  EXPECT_EQ(answer.max_memory().at("1"), kMi210Vram - 4294967296);
  // The CLI against the daemon shows the enriched rows.
  const CommandResult cli = RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " --address=" + d.unix_target() +
                                       " inventory --json");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_THAT(cli.out, HasSubstr("\"amd_smi_uuid\": \"9aff740f-0000-1000-80ab-000000000001\""));
  EXPECT_THAT(cli.out, HasSubstr("\"memory_partition\": \"NPS1\""));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// The mixed host: AMD SMI crashes on the integrated GPU while NVML reads the RTX 4090.
TEST(VendorDaemon, CrashingAmdSmiCostsOnlyItsRowAndTheDaemonServes) {
  TempDir dir;
  FakeScripts scripts("mixed-crash.txt", "mixed-4090.txt");
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("mixed-nvidia-amd-igpu"), "--nvml_library=" DEVPLACE_FAKE_NVML,
                               "--amd_smi_library=" DEVPLACE_FAKE_AMDSMI, "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  ASSERT_NE(FindReport(inv, "amd_smi"), nullptr);
  EXPECT_EQ(FindReport(inv, "amd_smi")->status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_THAT(FindReport(inv, "amd_smi")->message(), HasSubstr("SIGSEGV"));
  ASSERT_NE(FindReport(inv, "nvml"), nullptr);
  EXPECT_EQ(FindReport(inv, "nvml")->status(), v1::PROBE_STATUS_OK) << FindReport(inv, "nvml")->message();
  const v1::Device* nvidia = FindDevice(inv, "0000:01:00.0");
  ASSERT_NE(nvidia, nullptr);
  EXPECT_EQ(nvidia->memory_free_bytes(), 24146608128u);
  const v1::Device* igpu = FindDevice(inv, "0000:0e:00.0");
  ASSERT_NE(igpu, nullptr);
  EXPECT_EQ(igpu->attributes().count("memory_source"), 0u);
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx2, req, &answer).ok());
  EXPECT_THAT(answer.device(), HasSubstr("cuda"));
  grpc::ClientContext ctx3;
  ctx3.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Inventory again;
  ASSERT_TRUE(stub->RefreshInventory(&ctx3, {}, &again).ok());
  EXPECT_EQ(FindReport(again, "amd_smi")->status(), v1::PROBE_STATUS_CRASHED);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(VendorDaemon, LevelZeroMemoryBecomesMaxMemoryOnXpu) {
  TempDir dir;
  FakeScripts scripts("", "", "arc.txt");
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("xpu-2x-arc"), "--nvml_library=", "--amd_smi_library=",
                               "--level_zero_library=" DEVPLACE_FAKE_ZE});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  ASSERT_NE(FindReport(inv, "level_zero"), nullptr);
  EXPECT_EQ(FindReport(inv, "level_zero")->status(), v1::PROBE_STATUS_OK) << FindReport(inv, "level_zero")->message();
  EXPECT_EQ(FindDevice(inv, "0000:03:00.0")->name(), "Intel(R) Arc(TM) A770 Graphics");
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  (*req.mutable_env())["ZE_AFFINITY_MASK"] = "1,2";  // the job hides the iGPU, as devplace advises
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(stub->ResolveDevice(&ctx2, req, &answer).ok());
  EXPECT_EQ(answer.device(), "xpu:0");
  EXPECT_EQ(answer.max_memory().at("0"), 16000000000u) << answer.DebugString();  // 03:00.0's free memory
  EXPECT_EQ(answer.max_memory().at("1"), 12884901888u);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace devplace::testing
