// Device health with the real daemon and CLI on the fixture host nvidia-3x-h100-health (18:00.0 OK,
// 3b:00.0 DEGRADED: its PCIe link trained down, 9a:00.0 FAULT: a fatal AER error): a pick never
// leases the FAULT GPU and takes the OK one before the DEGRADED one, and `devplace inventory`
// shows each device's health with its reason (docs/PROBE.md "Device health"); on amd-2x-mi210-ras
// the same for an MI210 whose amdgpu RAS counters count uncorrectable errors; and with NVML's
// counters (the fake NVML by a real dlopen in the daemon's probe child): a row pending remap on
// nvidia-2x-h100's 9a:00.0 makes it FAULT in the inventory, the pick and /metrics; and a FAULT
// counter that a later probe cannot read keeps its reading until a probe reads it again; and the XID
// watcher (devplace-probe --watch_xid, a child of the daemon with its own session of the fake NVML,
// which reads XIDs from a file the test appends to): a critical XID makes its GPU FAULT, an
// application XID does not, and a watcher killed is started again and still reports.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/no_vendor_libraries.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kOk[] = "GPU-00000000-0000-4000-8000-000000000001";        // 18:00.0
constexpr char kDegraded[] = "GPU-00000000-0000-4000-8000-000000000003";  // 3b:00.0
constexpr char kFault[] = "GPU-00000000-0000-4000-8000-000000000002";     // 9a:00.0

v1::PickDevicesResponse PickAnswer(const CommandResult& r) {
  v1::PickDevicesResponse out;
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &out, lenient).ok()) << r.out;
  return out;
}

// On nvidia-2x-h100 with 9a:00.0 FAULT for `reason`: two GPUs cannot be had, one is, and it is
// 18:00.0; then none, 9a:00.0 set aside with its reason.
void PickOnlyTheOkGpu(const std::string& pick, const std::string& reason) {
  CommandResult r = RunCommand(pick + " --count=2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("2 cuda/nvidia device(s) wanted, but the job may use only 1"));
  r = RunCommand(pick);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), kOk);
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("host device 1 (0000:9a:00.0): not picked: not usable (" + reason));
}

TEST(DeviceHealth, PickNeverLeasesAFaultAndTakesOkBeforeDegraded) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-3x-h100-health",
                               "--nvml_library=", "--cuda_library="});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const std::string pick = cli + " pick --no_environment --ttl=120s --json";

  // Three are asked, two can be had: the FAULT GPU is not usable.
  CommandResult r = RunCommand(pick + " --count=3");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION: P-PICK 3 cuda/nvidia device(s) wanted, but the job may use only 2"));
  EXPECT_THAT(r.err, HasSubstr("usable devices; not usable: host device 2 (0000:9a:00.0)): "));

  // The job's mask lists the DEGRADED GPU first: the OK one is taken all the same.
  r = RunCommand(pick + " --env=CUDA_DEVICE_ORDER=PCI_BUS_ID --env=CUDA_VISIBLE_DEVICES=1,0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::PickDevicesResponse answer = PickAnswer(r);
  EXPECT_EQ(answer.env().at("CUDA_VISIBLE_DEVICES"), kOk);
  std::string explanation = absl::StrJoin(answer.explanation(), "\n");
  EXPECT_THAT(explanation, HasSubstr("degraded: current_link_width 8: PCIe link width x8 below its maximum x16"));


  // With the OK GPU leased, the DEGRADED one is still handed out; the FAULT one never, set aside
  // with its counter as the reason.
  r = RunCommand(pick);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), kDegraded);
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("host device 2 (0000:9a:00.0): not picked: not usable (aer_dev_fatal 1: uncorrectable "
                               "fatal PCIe errors since boot"));
  EXPECT_THAT(r.out + r.err, Not(HasSubstr(kFault)));
  // Counted as the refusal of --count=3 counts: the two usable GPUs, the FAULT one named apart; the
  // wait it suggests is this very command line with --wait=D.
  EXPECT_THAT(r.err, HasSubstr("1 free cuda/nvidia device(s) wanted, 0 free for this job now (2 it may use; not "
                               "usable: host device 2 (0000:9a:00.0)): "));
  EXPECT_THAT(r.err, HasSubstr(" pick --wait=D --no_environment --ttl=120s --json, Python wait=S"));
  r = RunCommand(cli + " run --no_environment --ttl=120s --wait 0s -- true");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("(2 it may use; not usable: host device 2 (0000:9a:00.0)): "));
  EXPECT_THAT(r.err, HasSubstr(" run --wait=D --no_environment --ttl=120s -- true, Python wait=S"));

  r = RunCommand(cli + " inventory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("HEALTH"));
  EXPECT_THAT(r.out, HasSubstr("degraded: current_link_width 8: PCIe link width x8 below its maximum x16"));
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia2 +fault +no: aer_dev_fatal 1: "));
  r = RunCommand(cli + " inventory --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"healthCounters\""));
  EXPECT_THAT(r.out, HasSubstr("\"source\": \"sysfs /sys/bus/pci/devices/0000:9a:00.0/aer_dev_fatal\""));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// amd-2x-mi210-ras: 63:00.0 counts 2 uncorrectable UMC errors in the amdgpu driver's RAS files
// (FAULT), 83:00.0 only corrected ones. A pick never leases the faulty MI210; inventory and the
// table show the counter, its value and source; Prometheus carries the raw RAS counters.
TEST(DeviceHealth, AnMi210WithUncorrectableUmcErrorsIsNeverPickedAndItsCounterIsShown) {
  TempDir dir;
  std::vector<std::string> flags = {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/amd-2x-mi210-ras",
                                    "--metrics_listen=127.0.0.1:0"};
  for (const std::string& f : NoVendorLibraryFlagList()) flags.push_back(f);  // the real ROCm SMI reads /sys
  DaemonProcess d(dir.path(), flags);
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const std::string pick = cli + " pick --no_environment --ttl=120s --json";

  CommandResult r = RunCommand(pick + " --count=2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("2 cuda/amd device(s) wanted, but the job may use only 1"));
  r = RunCommand(pick);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("0000:83:00.0"));
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("(0000:63:00.0): not picked: not usable (ras/umc_err_count ue 2: uncorrectable errors in "
                               "the GPU's UMC block"));

  r = RunCommand(cli + " inventory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("fault +no: ras/umc_err_count ue 2: uncorrectable errors"));
  r = RunCommand(cli + " inventory --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"source\": \"sysfs /sys/bus/pci/devices/0000:63:00.0/ras/umc_err_count\""));

  const std::string metrics = d.metrics_address();
  ASSERT_FALSE(metrics.empty()) << d.Log();
  r = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health_reading\\{counter=\"ras/umc_err_count ue\",effect=\"fault\",[^}]*"
                                   "pci_bus_id=\"0000:63:00.0\"[^}]*\\} 2\n"));
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health_reading\\{counter=\"ras/umc_err_count ce\",effect=\"ok\",[^}]*"
                                   "pci_bus_id=\"0000:83:00.0\"[^}]*\\} 3\n"));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// devplaced on nvidia-2x-h100 with the fake NVML (its script named by FAKE_NVML_CONFIG) and /metrics.
std::vector<std::string> FakeNvmlH100Flags() {
  return {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
          "--nvml_library=" DEVPLACE_FAKE_NVML, "--cuda_library=", "--metrics_listen=127.0.0.1:0"};
}

TEST(DeviceHealth, NvmlRowPendingRemapIsShownSkippedAndScraped) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/h100-remap-pending.txt");
  DaemonProcess d(dir.path(), FakeNvmlH100Flags());
  const std::string metrics = d.metrics_address();
  ASSERT_FALSE(metrics.empty()) << d.Log();
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const std::string pick = cli + " pick --no_environment --ttl=120s --json";

  CommandResult r = RunCommand(cli + " inventory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +fault +no: remapped_rows.pending 1: rows are pending remapping"));
  r = RunCommand(cli + " inventory --json");
  EXPECT_THAT(r.out, HasSubstr("\"source\": \"NVML nvmlDeviceGetRemappedRows\""));

  PickOnlyTheOkGpu(pick, "remapped_rows.pending 1: ");

  // Prometheus: the health and the raw counters, from the daemon's own /metrics.
  r = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health\\{[^}]*pci_bus_id=\"0000:9a:00.0\"[^}]*state=\"fault\"\\} 1"));
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health_reading\\{counter=\"remapped_rows.pending\",effect=\"fault\","
                                   "[^}]*pci_bus_id=\"0000:9a:00.0\"[^}]*\\} 1\n"));
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health_reading\\{counter=\"ecc.errors.corrected.aggregate.total\","
                                   "effect=\"ok\",[^}]*pci_bus_id=\"0000:18:00.0\"[^}]*\\} 5\n"));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// A copy of nvidia-3x-h100-health whose 9a:00.0 counts a fatal AER error (FAULT): at the next
// probe its aer_dev_fatal cannot be read (a directory where the file was: unknown), and the device
// stays FAULT with the reading kept, saying from which probe and why it is unknown now, so a pick
// still skips it; once a probe reads the file again (0), the new reading decides.
TEST(DeviceHealth, AFaultCounterThatTurnsUnreadableKeepsTheDeviceFaultUntilReadAgain) {
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string host = dir.path() + "/host";
  fs::copy(FixtureHost("nvidia-3x-h100-health"), host, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  DaemonProcess d(dir.path(), {"--host_root=" + host, "--nvml_library=", "--cuda_library=", "--refresh_interval=0s",
                               "--refresh_min_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const std::string pick = cli + " pick --no_environment --ttl=120s --json";

  const std::string fatal = host + "/sys/bus/pci/devices/0000:9a:00.0/aer_dev_fatal";
  ASSERT_TRUE(fs::remove(fatal));
  ASSERT_TRUE(fs::create_directory(fatal));
  CommandResult r = RunCommand(cli + " refresh");  // the daemon probes again, now
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia2 +fault +no: aer_dev_fatal 1: kept from the probe at "
                                   "20[0-9][0-9]-[0-9-]+T[0-9:]+Z: uncorrectable fatal PCIe errors since boot"));
  r = RunCommand(cli + " inventory --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("\"rule\": \"kept from the probe at [^\"]*; unknown now: [^\"]+\""));
  EXPECT_THAT(r.out, HasSubstr("\"stateReason\": \"2 of 3 devices usable\""));

  r = RunCommand(pick);  // the OK GPU
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), kOk);
  r = RunCommand(pick);  // the DEGRADED one
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), kDegraded);
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("host device 2 (0000:9a:00.0): not picked: not usable (aer_dev_fatal 1: kept from the "
                               "probe at "));
  EXPECT_THAT(r.out + r.err, Not(HasSubstr(kFault)));

  // Read again, as 0: the device is OK.
  ASSERT_TRUE(fs::remove(fatal));
  std::ofstream(fatal) << "TOTAL_ERR_FATAL 0\n";
  r = RunCommand(cli + " refresh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia2 +ok +yes"));
  EXPECT_THAT(r.out, Not(HasSubstr("kept from the probe")));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// Writes `dir`/nvml.txt: the fake NVML script `fixture` (under tests/fixtures/nvml/) plus `extra`
// lines; returns its path.
std::string NvmlScript(const std::string& dir, const std::string& fixture, const std::string& extra = "") {
  std::ifstream in(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/" + fixture);
  std::ofstream out(dir + "/nvml.txt", std::ios::trunc);
  out << in.rdbuf() << "\n" << extra;
  return dir + "/nvml.txt";
}

// Corrected errors rising: nvidia-2x-h100 healthy (h100.txt, no corrected error since the driver
// loaded); then 18:00.0 (/dev/nvidia0) counts 4: the next probe shows it DEGRADED (usable, the
// earlier count named) and a pick of one GPU takes 9a:00.0; a probe with no further rise: OK again.
TEST(DeviceHealth, CorrectedErrorsThatRiseMakeTheGpuDegradedUntilTheyStopRising) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", NvmlScript(dir.path(), "h100.txt"));
  std::vector<std::string> flags = FakeNvmlH100Flags();
  flags.push_back("--refresh_min_interval=0s");
  DaemonProcess d(dir.path(), flags);
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  CommandResult r = RunCommand(cli + " inventory");
  ASSERT_THAT(r.out, ContainsRegex("/dev/nvidia0 +ok +yes")) << r.out << r.err;
  NvmlScript(dir.path(), "h100.txt", "device 1 ecc corrected volatile 4\n");
  r = RunCommand(cli + " refresh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +degraded: ecc.errors.corrected.volatile.total 4: rising since the "
                                   "probe at [0-9T:Z-]+ \\(0 then\\): corrected errors pile up.* yes\n"))
      << r.out;
  r = RunCommand(cli + " pick --no_environment --ttl=120s --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), "GPU-00000000-0000-4000-8000-000000000002");  // 9a:00.0
  r = RunCommand(cli + " refresh");  // still 4: no longer rising
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +ok +yes")) << r.out;
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0) << d.Log();
}

// nvidia-2x-h100 with an uncorrectable ECC error on 18:00.0 (/dev/nvidia0): FAULT. Then NVML
// cannot read its ECC counters (NVML_ERROR_UNKNOWN): the reading is kept. devplaced is stopped and
// started again on the same state directory, the counter still unreadable: the first inventory
// already shows the kept reading, and a pick never leases the GPU. Then the slot holds another
// card (another UUID), its counter unreadable: it starts clean, OK.
TEST(DeviceHealth, AKeptFaultReadingSurvivesARestartUntilTheCardIsReplaced) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", NvmlScript(dir.path(), "h100-uncorrectable-ecc.txt"));
  std::vector<std::string> flags = FakeNvmlH100Flags();
  flags.push_back("--refresh_min_interval=0s");
  constexpr char kKept[] = "/dev/nvidia0 +fault +no: ecc.errors.uncorrected.volatile.total 1: kept from the probe at "
                           "20[0-9][0-9]-[0-9-]+T[0-9:]+Z: uncorrectable ECC errors since the driver loaded";
  {
    DaemonProcess d(dir.path(), flags);
    ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
    const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
    CommandResult r = RunCommand(cli + " inventory");
    ASSERT_THAT(r.out, ContainsRegex("/dev/nvidia0 +fault +no: ecc.errors.uncorrected.volatile.total 1: uncorrectable"))
        << r.out << r.err;
    NvmlScript(dir.path(), "h100-uncorrectable-ecc.txt", "fail nvmlDeviceGetTotalEccErrors 1 UNKNOWN\n");
    r = RunCommand(cli + " refresh");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_THAT(r.out, ContainsRegex(kKept)) << r.out;
    d.Signal(SIGTERM);
    ASSERT_EQ(d.WaitExit(absl::Seconds(30)), 0) << d.Log();
    EXPECT_THAT(d.Log(), HasSubstr("event=health_state_written file=" + dir.path() + "/health.state"));
  }
  {
    DaemonProcess d(dir.path(), flags);
    ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
    EXPECT_THAT(d.Log(), HasSubstr("event=health_state file=" + dir.path() + "/health.state found=true readings=1"));
    const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
    CommandResult r = RunCommand(cli + " inventory --json");  // the first inventory, before any pick
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, ContainsRegex("\"rule\": \"kept from the probe at [^\"]*; unknown now: NVML_ERROR_UNKNOWN"));
    r = RunCommand(cli + " inventory");
    EXPECT_THAT(r.out, ContainsRegex(kKept)) << r.out;
    const std::string pick = cli + " pick --no_environment --ttl=120s --json";
    r = RunCommand(pick);  // the other GPU, 9a:00.0
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(PickAnswer(r).env().at("CUDA_VISIBLE_DEVICES"), kFault);
    r = RunCommand(pick);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_THAT(r.err, HasSubstr("host device 0 (0000:18:00.0): not picked: not usable "
                                 "(ecc.errors.uncorrected.volatile.total 1: kept from the probe at "));
    r = RunCommand(cli + " slurm health-check");
    EXPECT_NE(r.exit_code, 0) << r.out;
    d.Signal(SIGTERM);
    ASSERT_EQ(d.WaitExit(absl::Seconds(30)), 0) << d.Log();
  }
  // Another card in 18:00.0: the kept reading was the old card's.
  std::string script;
  {
    std::ifstream in(NvmlScript(dir.path(), "h100-uncorrectable-ecc.txt", "fail nvmlDeviceGetTotalEccErrors 1 UNKNOWN\n"));
    script.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string old_uuid = "device 1 uuid GPU-00000000-0000-4000-8000-000000000001";
  ASSERT_NE(script.find(old_uuid), std::string::npos);
  script.replace(script.find(old_uuid), old_uuid.size(), "device 1 uuid GPU-00000000-0000-4000-8000-0000000000aa");
  std::ofstream(dir.path() + "/nvml.txt", std::ios::trunc) << script;
  DaemonProcess d(dir.path(), flags);
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  CommandResult r = RunCommand(cli + " inventory");
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +ok +yes")) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("kept from the probe")));
  ASSERT_TRUE(d.WaitForLog("event=health_state_written file=" + dir.path() + "/health.state revision=1 readings=0",
                           absl::Seconds(30)))
      << d.Log();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0);
}

// Runs `command` until its output matches `pattern` (the daemon publishes an event's inventory a
// probe after it); the last result either way.
CommandResult RunUntil(const std::string& command, const std::string& pattern, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  for (;;) {
    CommandResult r = RunCommand(command);
    if (::testing::Value(r.out, ContainsRegex(pattern)) || absl::Now() >= give_up) return r;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

// The number after `prefix` in the daemon's log (the last such line), or 0.
int LoggedNumber(const std::string& log, const std::string& prefix) {
  const size_t at = log.rfind(prefix);
  int n = 0;
  if (at == std::string::npos) return 0;
  const size_t start = at + prefix.size();
  return absl::SimpleAtoi(log.substr(start, log.find_first_not_of("0123456789", start) - start), &n) ? n : 0;
}

// A fake NVML script for nvidia-2x-h100 (NVML index 0: 9a:00.0, 1: 18:00.0) whose XIDs come from
// `dir`/xid, plus `extra` lines.
std::string XidScript(const std::string& dir, const std::string& extra = "") {
  std::ifstream in(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/h100.txt");
  std::ofstream out(dir + "/nvml.txt");
  out << in.rdbuf() << "xid_events " << dir << "/xid\n" << extra;
  std::ofstream(dir + "/xid").flush();
  return dir + "/nvml.txt";
}

void InjectXid(const std::string& dir, int nvml_index, int xid) {
  std::ofstream(dir + "/xid", std::ios::app) << nvml_index << " " << xid << "\n";
}

// How often `needle` occurs in `text`.
int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

TEST(XidWatcher, ACriticalXidMakesItsGpuFaultAnApplicationXidDoesNotAndAKilledWatcherIsStartedAgain) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", XidScript(dir.path()));
  DaemonProcess d(dir.path(), FakeNvmlH100Flags());
  const std::string metrics = d.metrics_address();
  ASSERT_FALSE(metrics.empty()) << d.Log();
  ASSERT_TRUE(d.WaitForLog("event=xid_watcher_watching gpus=2 of=2 pid=", absl::Seconds(60))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const std::string pick = cli + " pick --no_environment --ttl=120s --json";
  // The watcher's phase is telemetry: it runs no probe, a refresh shows it.
  CommandResult r = RunUntil(cli + " refresh --json", "watching 2 of 2 GPUs", absl::Seconds(60));
  ASSERT_THAT(r.out, HasSubstr("\"name\": \"nvml_xid\"")) << r.out << r.err;
  r = RunCommand(cli + " inventory");
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +ok +yes")) << r.out;

  EXPECT_EQ(Occurrences(d.Log(), "event=refresh kind=xid"), 0) << d.Log();  // no XID yet

  // XID 79, "GPU has fallen off the bus", on 9a:00.0: FAULT with its count, and never picked.
  InjectXid(dir.path(), 0, 79);
  r = RunUntil(cli + " inventory", "/dev/nvidia1 +fault", absl::Seconds(60));
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +fault +no: xid.79 1: critical XID 79 since devplaced started"))
      << r.out << d.Log();
  r = RunCommand(cli + " inventory --json");
  EXPECT_THAT(r.out, HasSubstr("\"source\": \"NVML nvmlEventSetWait_v2\""));
  PickOnlyTheOkGpu(pick, "xid.79 1: critical XID 79");
  r = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics"));
  EXPECT_THAT(r.out, ContainsRegex("devplace_device_health_reading\\{counter=\"xid.79\",effect=\"fault\","
                                   "[^}]*pci_bus_id=\"0000:9a:00.0\"[^}]*\\} 1\n"));

  // XID 13, a graphics engine exception (a job's error), on 18:00.0: counted, the GPU stays OK.
  InjectXid(dir.path(), 1, 13);
  r = RunUntil(cli + " inventory --json", "xid.13", absl::Seconds(60));
  EXPECT_THAT(r.out, HasSubstr("\"name\": \"xid.13\"")) << r.out << d.Log();
  r = RunCommand(cli + " inventory");
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +ok +yes")) << r.out;

  // The watcher killed: started again, the count kept, and a new XID counted.
  const int first = LoggedNumber(d.Log(), "event=xid_watcher_watching gpus=2 of=2 pid=");
  ASSERT_GT(first, 0) << d.Log();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(d.WaitForLog("event=xid_watcher_restarted pid=", absl::Seconds(60))) << d.Log();
  const int second = LoggedNumber(d.Log(), "event=xid_watcher_restarted pid=");
  ASSERT_TRUE(d.WaitForLog(absl::StrCat("event=xid_watcher_watching gpus=2 of=2 pid=", second), absl::Seconds(60)))
      << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("event=xid_watcher_exited how=\"killed by signal 9\""));
  // The watcher's end and new start ran no probe: the refreshes are those of the two XIDs.
  const int refreshes = Occurrences(d.Log(), "event=refresh kind=xid");
  EXPECT_GE(refreshes, 1) << d.Log();
  EXPECT_LE(refreshes, 2) << d.Log();
  r = RunUntil(cli + " refresh --json", absl::StrCat("--watch_xid pid ", second, ", started 1 time"), absl::Seconds(60));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("devplace-probe --watch_xid pid ", second, ", started 1 time(s) again")));
  EXPECT_EQ(Occurrences(d.Log(), "event=refresh kind=xid"), refreshes) << d.Log();
  InjectXid(dir.path(), 0, 79);
  r = RunUntil(cli + " inventory", "xid.79 2:", absl::Seconds(60));
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +fault +no: xid.79 2: critical XID 79")) << r.out << d.Log();
  r = RunCommand(cli + " inventory --json");
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("devplace-probe --watch_xid pid ", second, ", started 1 time(s) again")));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0);
}

// A GPU with a dozen different critical XIDs has a reason longer than the CLI prints whole: a
// refused pick still ends with its advice (the device's line is cut, saying where the rest is).
TEST(XidWatcher, ARefusalBesideAGpuWithManyXidsKeepsItsAdvice) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", XidScript(dir.path()));
  DaemonProcess d(dir.path(), FakeNvmlH100Flags());
  ASSERT_TRUE(d.WaitForLog("event=xid_watcher_watching gpus=2 of=2 pid=", absl::Seconds(60))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  for (int xid : {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}) InjectXid(dir.path(), 0, xid);
  CommandResult r = RunUntil(cli + " inventory --json", "xid.120", absl::Seconds(60));
  ASSERT_THAT(r.out, HasSubstr("\"name\": \"xid.48\"")) << r.out << d.Log();
  r = RunCommand(cli + " pick --no_environment --ttl=120s --json");  // the OK GPU, 18:00.0
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCommand(cli + " pick --no_environment --ttl=120s");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("0 free for this job now (1 it may use; not usable: host device 1 (0000:9a:00.0))"));
  EXPECT_THAT(r.err, ContainsRegex("host device 1 \\(0000:9a:00.0\\): not picked: not usable \\(xid\\.[0-9]+ 1: "
                                   "critical XID .*\\.\\.\\. \\(devplace inventory shows the rest\\); retry later"));
  EXPECT_THAT(r.err, HasSubstr("retry later or wait for one (devplace --address="));
  EXPECT_THAT(r.err, HasSubstr(" --wait=D"));
  EXPECT_THAT(r.err, HasSubstr("ask for fewer"));
  EXPECT_THAT(r.err, Not(HasSubstr("characters left out")));
}

// An XID storm: 20 XIDs one after another, each appended once the daemon has read the one before
// (its event=xid line), then 50 at once. Every count arrives, and the XID-triggered refreshes (probe
// runs) are at most one per second: never one per XID.
TEST(XidWatcher, AnXidStormCostsAtMostOneRefreshPerSecondAndLosesNoCount) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", XidScript(dir.path()));
  DaemonProcess d(dir.path(), FakeNvmlH100Flags());
  ASSERT_TRUE(d.WaitForLog("event=xid_watcher_watching gpus=2 of=2 pid=", absl::Seconds(60))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  ASSERT_THAT(RunUntil(cli + " refresh --json", "watching 2 of 2 GPUs", absl::Seconds(60)).out,
              HasSubstr("watching 2 of 2 GPUs"));
  const size_t before = d.Log().size();
  const absl::Time start = absl::Now();
  constexpr char kSeen79[] = "event=xid pci_bus_id=0000:9a:00.0 xid=79";
  for (int i = 1; i <= 20; ++i) {
    InjectXid(dir.path(), 0, 79);
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (Occurrences(d.Log(), kSeen79) < i && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(Occurrences(d.Log(), kSeen79), i) << d.Log();
  }
  {
    std::ofstream burst(dir.path() + "/xid", std::ios::app);
    for (int i = 0; i < 50; ++i) burst << "1 48\n";
  }
  const CommandResult r = RunUntil(cli + " inventory", "xid.48 50:", absl::Seconds(60));
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +fault +no: xid.48 50: critical XID 48")) << r.out << d.Log();
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +fault +no: xid.79 20: critical XID 79")) << r.out;
  const int64_t seconds = absl::ToInt64Seconds(absl::Now() - start) + 1;
  const int refreshes = Occurrences(d.Log().substr(before), "event=refresh kind=xid");
  EXPECT_GE(refreshes, 1);
  EXPECT_LE(refreshes, seconds + 1) << "in " << seconds << " s\n" << d.Log();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0);
}

// A library whose GPUs do not offer the XID event: the watcher says unknown, once, and no GPU is
// FAULT for it.
TEST(XidWatcher, GpusWithoutTheXidEventAreUnknownNeverFault) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", XidScript(dir.path(), "device 0 event_types 0\ndevice 1 event_types 0x3\n"));
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
                               "--nvml_library=" DEVPLACE_FAKE_NVML, "--cuda_library="});
  ASSERT_TRUE(d.WaitForLog("event=xid_watcher_unknown why=\"no GPU offers the XID event (GPU 0 0000:9a:00.0: "
                           "NVML_ERROR_NOT_SUPPORTED",
                           absl::Seconds(60)))
      << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  CommandResult r = RunUntil(cli + " refresh --json", "unknown: no GPU offers", absl::Seconds(60));
  EXPECT_THAT(r.out, ContainsRegex("\"name\": \"nvml_xid\",\\s*\"status\": \"PROBE_STATUS_SKIPPED\",[^}]*"
                                   "unknown: no GPU offers the XID event")) << r.out;
  r = RunCommand(cli + " inventory");
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia0 +ok +yes")) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("/dev/nvidia1 +ok +yes")) << r.out;
  EXPECT_EQ(Occurrences(d.Log(), "event=refresh kind=xid"), 0) << d.Log();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0);
}

// devplaced with its default --nvml_library on a host without an NVIDIA GPU: the watcher says
// unknown (no driver here; on a host with one it watches the real GPUs) and ends, and no probe runs
// for it: `kind=xid` is for a new XID count only. A refresh (a probe run, long after the watcher's
// child ended) shows its phase in the nvml_xid report.
TEST(XidWatcher, WithoutAnXidTheWatcherRunsNoProbe) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/cpu-only",
                               "--refresh_interval=0", "--usage_interval=0", "--torch_probe_command=none"});
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(d.Log(), "event=xid_watcher_unknown") &&
         !absl::StrContains(d.Log(), "event=xid_watcher_watching") && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(d.Log(), ContainsRegex("event=xid_watcher_(unknown|watching)")) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const CommandResult r = RunUntil(cli + " refresh --json", "\"name\": \"nvml_xid\",\\s*\"status\": \"PROBE_STATUS_(OK|SKIPPED)\"",
                                   absl::Seconds(60));
  EXPECT_THAT(r.out, ContainsRegex("(unknown|watching)")) << r.out << r.err;
  EXPECT_EQ(Occurrences(d.Log(), "event=refresh kind=xid"), 0) << d.Log();
  EXPECT_EQ(Occurrences(d.Log(), "event=xid_watcher_exited"), 0) << d.Log();  // an unknown child's end is no news
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(30)), 0);
}

}  // namespace
}  // namespace devplace::testing
