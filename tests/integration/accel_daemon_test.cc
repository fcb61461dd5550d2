// devplaced with the HLML, DCMI, CNDev and MTML fakes (tests/fakes) loaded by the real
// devplace-probe child on the Gaudi, Ascend, Cambricon and Moore Threads fixture hosts:
// device_map="auto" gets max_memory from the libraries' figures over the wire, with the library
// named in the explanation; the CLI shows them; an uncorrectable ECC count the library reports
// makes the device FAULT (shown, never picked, warned about); a library that crashes leaves the
// daemon serving.
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
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

using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

struct Library {
  const char* prober;      // the --<prober>_library flag and ProbeReport.name
  const char* config_env;  // FAKE_<LIB>_CONFIG
  const char* fake;
  const char* host;
  const char* script;      // tests/fixtures/<prober>/<script>.txt
  const char* type;        // the row's PyTorch device type
  v1::Row row;
};

const Library kLibraries[] = {
    {"hlml", "FAKE_HLML_CONFIG", DEVPLACE_FAKE_HLML, "hpu-2x-gaudi2", "gaudi2", "hpu", v1::ROW_HPU},
    {"dcmi", "FAKE_DCMI_CONFIG", DEVPLACE_FAKE_DCMI, "npu-2x-910b", "910b", "npu", v1::ROW_NPU},
    {"cndev", "FAKE_CNDEV_CONFIG", DEVPLACE_FAKE_CNDEV, "mlu-2x-mlu370", "mlu370", "mlu", v1::ROW_MLU},
    {"mtml", "FAKE_MTML_CONFIG", DEVPLACE_FAKE_MTML, "musa-2x-s4000", "s4000", "musa", v1::ROW_MUSA},
};

void PrintTo(const Library& l, std::ostream* os) { *os << l.prober; }

std::string Script(const Library& l, const std::string& name) {
  return absl::StrCat(DEVPLACE_FIXTURES_DIR, "/", l.prober, "/", name, ".txt");
}

class AccelDaemonTest : public ::testing::TestWithParam<Library> {};

TEST_P(AccelDaemonTest, AutoDeviceMapGetsMaxMemoryFromTheLibrary) {
  const Library& l = GetParam();
  TempDir dir;
  ScopedEnv config(l.config_env, Script(l, l.script));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost(l.host), absl::StrCat("--", l.prober, "_library=", l.fake),
                               "--nvml_library="});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  const v1::ProbeReport* report = FindReport(inv, l.prober);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_OK) << report->message();
  const v1::Backend* row = FindRow(inv, l.row);
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->devices_size(), 2);
  for (const v1::Device& device : row->devices()) ASSERT_TRUE(device.has_memory_free_bytes()) << device.pci_bus_id();

  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  grpc::ClientContext ctx2;
  v1::ResolveDeviceResponse answer;
  const grpc::Status status = stub->ResolveDevice(&ctx2, req, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answer.device(), absl::StrCat(l.type, ":0"));
  // Two devices, no model size: each one's free memory, as the library reported it.
  ASSERT_EQ(answer.max_memory().count("0"), 1u) << answer.DebugString();
  EXPECT_EQ(answer.max_memory().at("0"), row->devices(0).memory_free_bytes());
  EXPECT_EQ(answer.max_memory().at("1"), row->devices(1).memory_free_bytes());
  EXPECT_GT(answer.max_memory().at("cpu"), 0u);
  EXPECT_THAT(answer.explanation(),
              Contains(absl::StrCat("I-MEM memory of ", l.type, ":0, ", l.type, ":1 from ", l.prober)));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST_P(AccelDaemonTest, CliProbeShowsNamesUuidsAndMemory) {
  const Library& l = GetParam();
  const CommandResult r = RunCommand(absl::StrCat(l.config_env, "=", ShellQuote(Script(l, l.script)), " ",
                                                  ShellQuote(DEVPLACE_CLI_BINARY), " probe --json --nvml_library= --host_root=",
                                                  ShellQuote(FixtureHost(l.host)), " --", l.prober, "_library=", ShellQuote(l.fake)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("\"memory_source\": \"", l.prober, "\"")));
  EXPECT_THAT(r.out, HasSubstr("\"memoryTotalBytes\": \""));
  EXPECT_THAT(r.out, ContainsRegex(absl::StrCat("\"name\": \"", l.prober, "\",[[:space:]]*\"status\": \"PROBE_STATUS_OK\"")));
}

INSTANTIATE_TEST_SUITE_P(Libraries, AccelDaemonTest, ::testing::ValuesIn(kLibraries),
                         [](const ::testing::TestParamInfo<Library>& info) { return std::string(info.param.prober); });

// The library's ECC call on a fixture whose host device 0 counts uncorrectable errors (FAULT).
struct EccFault {
  const Library* library;
  const char* script;   // tests/fixtures/<prober>/<script>.txt
  const char* faulty;   // host device 0's bus id
  const char* reading;  // "<counter> <value>"
};

const EccFault kEccFaults[] = {
    {&kLibraries[0], "gaudi2-uncorrectable-ecc", "0000:33:00.0", "ecc.errors.uncorrected.volatile.total 2"},
    {&kLibraries[1], "910b-uncorrectable-ecc", "0000:01:00.0", "hbm_ecc.double_bit_error_cnt 2"},
    {&kLibraries[3], "s4000-uncorrectable-ecc", "0000:2a:00.0", "ecc.errors.uncorrected.volatile.total 2"},
};

void PrintTo(const EccFault& f, std::ostream* os) { *os << f.library->prober; }

class AccelEccDaemonTest : public ::testing::TestWithParam<EccFault> {};

// devplaced shows the fault and its counter in `devplace inventory`, a pick skips the device, and
// an answer that uses it (training takes every device, as the job's runtime enumerates them) warns
// naming the device and the counter; strict refuses it.
TEST_P(AccelEccDaemonTest, AnUncorrectableCountIsShownSkippedWarnedAndRefusedUnderStrict) {
  const EccFault& f = GetParam();
  const Library& l = *f.library;
  TempDir dir;
  ScopedEnv config(l.config_env, Script(l, f.script));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost(l.host), absl::StrCat("--", l.prober, "_library=", l.fake),
                               "--nvml_library="});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  CommandResult r = RunCommand(cli + " inventory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex(absl::StrCat(f.faulty, " .* fault +no: ", f.reading, ": uncorrectable")));

  const std::string pick = cli + " pick --no_environment --ttl=120s --json";
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 0) << r.err;  // the healthy device
  r = RunCommand(pick);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("host device 0 (", f.faulty, "): not picked: not usable (", f.reading, ": ")));

  auto stub = Stub(d.unix_target());
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  grpc::ClientContext ctx;
  v1::ResolveDeviceResponse answer;
  const grpc::Status status = stub->ResolveDevice(&ctx, req, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(answer.warnings(),
              Contains(HasSubstr(absl::StrCat("H-HEALTH ", l.type, ":0 is host device 0 (", f.faulty,
                                              "), whose health is FAULT (", f.reading, ": "))));
  req.set_strict(true);
  grpc::ClientContext ctx2;
  const grpc::Status strict = stub->ResolveDevice(&ctx2, req, &answer);
  EXPECT_EQ(strict.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(strict.error_message(), HasSubstr(absl::StrCat("strict: H-HEALTH ", l.type, ":0")));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

INSTANTIATE_TEST_SUITE_P(Libraries, AccelEccDaemonTest, ::testing::ValuesIn(kEccFaults),
                         [](const ::testing::TestParamInfo<EccFault>& info) {
                           return std::string(info.param.library->prober);
                         });

// A vendor library that crashes (SIGSEGV inside the library) must not take the daemon down. The
// probe child dies with it, or, where the vendor library runs in a process of its own
// (server/probe/vendor_libs/vendor_process.h), the child survives and reports the prober: both
// outcomes are accepted below; the daemon serving throughout is not negotiable.
TEST(AccelDaemon, CrashingLibraryLeavesTheDaemonServing) {
  const Library& l = kLibraries[3];  // mtml
  TempDir dir;
  const std::string script =
      dir.Write("crash.txt", "crash mtmlMemoryGetTotal 1\n" + ReadFile(Script(l, l.script)));
  ScopedEnv config(l.config_env, script);
  ScopedEnv log("FAKE_MTML_LOG", dir.File("calls"));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost(l.host), absl::StrCat("--mtml_library=", l.fake),
                               "--nvml_library=", "--refresh_interval=0s"});
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (ReadFile(dir.File("calls")).find("mtmlMemoryGetTotal 1") == std::string::npos && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_THAT(ReadFile(dir.File("calls")), HasSubstr("mtmlMemoryGetTotal 1"));  // the crashing call was reached
  ASSERT_TRUE(d.WaitForLog("event=probe result=", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::ListBackendsResponse backends;
  EXPECT_TRUE(stub->ListBackends(&ctx, {}, &backends).ok());
  grpc::ClientContext ctx2;
  v1::Inventory inv;
  const grpc::Status status = stub->GetInventory(&ctx2, {}, &inv);
  if (status.ok()) {  // the crash cost only the mtml prober
    const v1::ProbeReport* report = FindReport(inv, "mtml");
    ASSERT_NE(report, nullptr);
    EXPECT_NE(report->status(), v1::PROBE_STATUS_OK);
    ASSERT_NE(FindRow(inv, v1::ROW_MUSA), nullptr);
    EXPECT_EQ(FindRow(inv, v1::ROW_MUSA)->devices_size(), 2);
  } else {  // the crash cost the probe run; the reason is served
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(status.error_message(), HasSubstr("the last probe of this host failed"));
  }
  EXPECT_EQ(kill(d.pid(), 0), 0);  // still running
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace devplace::testing
