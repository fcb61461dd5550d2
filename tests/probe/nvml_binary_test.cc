// The real devplace-probe binary with the fake NVML: its flags, and its own deadline on a call
// that never returns (it gives up on the nvml prober, still writes the rest and exits promptly).
#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/common/vendor_libraries.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

std::string Probe() { return ShellQuote(DEVPLACE_PROBE_BINARY); }

// Runs devplace-probe on fixture host `host` with the fake NVML answering from `script`; `env`
// is more VAR=value words for its environment.
CommandResult RunProbeWithNvml(const std::string& host, const std::string& script, const std::string& args,
                               const std::string& env = "") {
  return RunCommand(env + " FAKE_NVML_CONFIG=" + ShellQuote(NvmlScript(script)) + " " + Probe() + " --host_root=" +
                    ShellQuote(HostDir(host)) + " --nvml_library=" + ShellQuote(DEVPLACE_FAKE_NVML) + " " + args);
}

// Runs devplace-probe with `args`; the inventory it wrote (a failure when it did not exit 0 or
// wrote no inventory).
v1::Inventory ProbeOutput(const std::string& args) {
  const CommandResult r = RunCommand(Probe() + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  v1::Inventory inv;
  EXPECT_TRUE(inv.ParseFromString(r.out));
  return inv;
}

TEST(NvmlBinaryTest, UsageOnlyReadsThePciScanAndTheLibrariesOfItsRowsOnly) {
  TempDir tmp;
  const CommandResult r = RunProbeWithNvml("nvidia-2x-h100", "shared", "--usage_only --cuda_library=libcuda.so.1",
                                           "FAKE_NVML_LOG=" + tmp.File("calls"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.out));
  std::vector<std::string> reports;
  for (const v1::ProbeReport& report : inv.probe_reports()) reports.push_back(report.name());
  // No cpu, numa, dev_nodes, ... prober (amd and neuron read memory in use from sysfs, and skip a
  // host without their devices); no libcuda; no process for AMD SMI, Level Zero, ... (no such
  // hardware on the bus).
  EXPECT_THAT(reports, ::testing::ElementsAre("pci", "amd", "neuron", "nvml"));
  EXPECT_EQ(FindReport(inv, "amd")->status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(FindDevice(inv, "0000:9a:00.0")->usage().process_count(), 3u);
  EXPECT_TRUE(FindDevice(inv, "0000:18:00.0")->usage().busy());
  // NVML's system-wide calls (nvmlSystemGetCudaDriverVersion_v2 loads libcuda) are left out.
  EXPECT_THAT(ReadFile(tmp.File("calls")), ::testing::Not(HasSubstr("nvmlSystemGet")));
  // Nor the health counters: the daemon keeps the full probe's health.
  EXPECT_THAT(ReadFile(tmp.File("calls")), ::testing::Not(HasSubstr("nvmlDeviceGetTotalEccErrors")));
  EXPECT_TRUE(FindDevice(inv, "0000:9a:00.0")->health_counters().empty());
}

TEST(NvmlBinaryTest, NeverReturningCallTimesOutAndTheRestIsWritten) {
  TempDir tmp;
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r =
      RunProbeWithNvml("nvidia-2x-h100", "hang", "--probe_timeout=500ms", "FAKE_NVML_LOG=" + tmp.File("calls"));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(500));
  EXPECT_LT(elapsed, std::chrono::seconds(4));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.out));
  const v1::ProbeReport* nvml = FindReport(inv, "nvml");
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_EQ(nvml->message(), "gave up after 500 ms (--probe_timeout): nvmlDeviceGetMemoryInfo (device 1) did not "
                             "return; nothing of nvml merged");
  // The child's own time, start to reap: the 500 ms deadline is the whole probe's, whose clock
  // started before the child did (the sysfs scan, the fork), so a little under 500 ms (499 seen).
  EXPECT_GE(nvml->duration_ms(), 400u);
  EXPECT_LE(nvml->duration_ms(), 4000u);
  // The fake was reached and is stuck where the script says.
  EXPECT_THAT(ReadFile(tmp.File("calls")), ::testing::EndsWith("nvmlDeviceGetMemoryInfo 1\n"));
  // The rest: the cpu row and the NVIDIA row from sysfs and /proc, nothing from NVML (device 0
  // was read completely before the hang; its NVML name and memory are not merged).
  ASSERT_GE(inv.backends_size(), 2);
  EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU);
  EXPECT_GT(inv.host().cpu().threads(), 0u);
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 2);
  EXPECT_EQ(cuda->devices(0).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_FALSE(cuda->devices(0).has_memory_total_bytes());
  EXPECT_TRUE(cuda->devices(0).usable());
  EXPECT_TRUE(cuda->devices(1).usable());
  EXPECT_EQ(FindReport(inv, "pci")->status(), v1::PROBE_STATUS_OK);
}

// The real binary with a library that crashes (SIGSEGV in a call): devplace-probe itself
// survives, reports nvml CRASHED and writes the rest of the inventory.
TEST(NvmlBinaryTest, CrashingLibraryIsReportedAndTheRestIsWritten) {
  const CommandResult r = RunProbeWithNvml("nvidia-2x-h100", "crash", "--probe_timeout=5s");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.out));
  const v1::ProbeReport* nvml = FindReport(inv, "nvml");
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_THAT(nvml->message(), HasSubstr("SIGSEGV"));
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 2);
  EXPECT_TRUE(cuda->devices(0).usable());
  EXPECT_EQ(FindReport(inv, "pci")->status(), v1::PROBE_STATUS_OK);
}

TEST(NvmlBinaryTest, JsonShowsNamesUuidsMemoryAndMig) {
  const CommandResult r = RunProbeWithNvml("nvidia-mig", "mig", "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"memoryFreeBytes\": \"84825604096\""));
  EXPECT_THAT(r.out, HasSubstr("\"uuid\": \"MIG-00000000-0000-4000-8000-0000000000a1\""));
  EXPECT_THAT(r.out, HasSubstr("\"profile\": \"3g.40gb\""));
  EXPECT_THAT(r.out, HasSubstr("\"cuda_driver_version\": \"12.4\""));
}

TEST(NvmlBinaryTest, MissingLibraryIsSkipped) {
  const v1::Inventory inv =
      ProbeOutput("--host_root=" + ShellQuote(HostDir("nvidia-2x-h100")) + " --nvml_library=/nonexistent/libnvidia-ml.so.1");
  ASSERT_NE(FindReport(inv, "nvml"), nullptr);
  EXPECT_EQ(FindReport(inv, "nvml")->status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_NVIDIA)->devices_size(), 2);
}

TEST(NvmlBinaryTest, EmptyNvmlLibraryGivesTheLibrarysInventory) {
  v1::Inventory inv = ProbeOutput("--host_root=" + ShellQuote(HostDir("nvidia-mig")) + NoVendorLibraryFlags());
  inv.clear_probed_at();
  for (v1::ProbeReport& report : *inv.mutable_probe_reports()) report.set_duration_ms(0);
  EXPECT_EQ(inv.SerializeAsString(), ProbeHost("nvidia-mig").SerializeAsString());
}

TEST(NvmlBinaryTest, FlagsAreDocumentedAndChecked) {
  const CommandResult help = RunCommand(Probe() + " --help 2>&1");
  EXPECT_THAT(help.out, HasSubstr("--nvml_library"));
  for (const VendorLibrary& library : kVendorLibraries) {
    EXPECT_THAT(help.out, HasSubstr(std::string("--") + library.flag));
  }
  EXPECT_THAT(help.out, HasSubstr("--probe_timeout"));
  EXPECT_THAT(help.out, HasSubstr("safety net"));
  for (const char* bad : {"--probe_timeout=0s", "--probe_timeout=soon", "--probe_timeout"}) {
    const CommandResult r = RunCommand(Probe() + " " + bad + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("--probe_timeout")) << bad;
  }
}

}  // namespace
}  // namespace devplace::testing
