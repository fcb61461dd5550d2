// The real devplace-probe binary on fixture hosts: --json output, serialized bytes, exit codes.
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs the binary with `args` (shell words): `out` is its stdout, or stdout and stderr as one
// stream (2>&1) when `with_stderr`.
CommandResult RunProbe(const std::string& args, bool with_stderr = false) {
  return RunCommand(ShellQuote(DEVPLACE_PROBE_BINARY) + " " + args + (with_stderr ? " 2>&1" : ""));
}

TEST(ProbeBinaryTest, JsonOutputParsesBack) {
  const CommandResult r = RunProbe("--host_root=" + ShellQuote(HostDir("nvidia-container")) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok()) << r.out;
  EXPECT_TRUE(inv.has_probed_at());
  EXPECT_GT(inv.probed_at().seconds(), 0);
  EXPECT_EQ(inv.revision(), 0u);
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->devices_size(), 4);
  EXPECT_EQ(cuda->state_reason(), "2 of 4 devices usable");
  EXPECT_THAT(r.out, HasSubstr("\"pciBusId\": \"0000:ab:00.0\""));
}

TEST(ProbeBinaryTest, DefaultOutputIsSerializedInventory) {
  // No vendor library (empty library flags): the library's ProbeInventory runs no vendor prober either.
  const CommandResult r = RunProbe("--host_root=" + ShellQuote(HostDir("amd-2x-mi210")) + NoVendorLibraryFlags());
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.out));
  EXPECT_EQ(inv.host().hostname(), "amd-2x-mi210");
  const v1::Backend* amd = FindRow(inv, v1::ROW_CUDA_AMD);
  ASSERT_NE(amd, nullptr);
  ASSERT_EQ(amd->devices_size(), 2);
  EXPECT_EQ(amd->devices(1).pci_bus_id(), "0000:83:00.0");
  EXPECT_EQ(amd->devices(1).attributes().at("gfx_target_version"), "gfx90a");
  // Same content as the library gives (but for the timestamp and durations).
  inv.clear_probed_at();
  for (v1::ProbeReport& report : *inv.mutable_probe_reports()) report.set_duration_ms(0);
  EXPECT_EQ(inv.SerializeAsString(), ProbeHost("amd-2x-mi210").SerializeAsString());
}

TEST(ProbeBinaryTest, ExitsZeroWhenAProberFails) {
  ScratchHost host("cpu-only");
  host.Remove("proc/cpuinfo");
  const CommandResult r = RunProbe("--host_root=" + host.dir());
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.out));
  EXPECT_EQ(FindReport(inv, "cpu")->status(), v1::PROBE_STATUS_ERROR);
}

TEST(ProbeBinaryTest, UnreadableHostRootExitsTwo) {
  const CommandResult r = RunProbe("--host_root=/nonexistent/devplace", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--host_root"));
  EXPECT_THAT(r.out, HasSubstr("/nonexistent/devplace"));
}

TEST(ProbeBinaryTest, BadFlagsExitTwo) {
  for (const char* args : {"--no_such_flag", "--json=maybe", "stray_argument", "--host_root"}) {
    const CommandResult r = RunProbe(args, true);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_THAT(r.out, HasSubstr("devplace-probe:")) << args;
  }
}

// --help and -h print the usage and this binary's flags on stdout and exit 0, as devplaced and
// devplace do (absl's own handler exited 1 and knew no -h); --helpfull lists the other files' flags too.
TEST(ProbeBinaryTest, HelpDescribesFlags) {
  for (const char* args : {"--help", "-h", "-help", "--helpshort"}) {
    const CommandResult r = RunProbe(args);
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_THAT(r.out, HasSubstr("devplace-probe: Probes this host's accelerators")) << args;
    EXPECT_THAT(r.out, HasSubstr("  Flags from devplace-probe.cc:\n")) << args;
    EXPECT_THAT(r.out, HasSubstr("    --host_root (")) << args;
    EXPECT_THAT(r.out, HasSubstr("--json")) << args;
    EXPECT_THAT(r.out, HasSubstr("Exit status")) << args;
  }
  const CommandResult all = RunProbe("--helpfull");
  EXPECT_EQ(all.exit_code, 0);
  EXPECT_THAT(all.out, HasSubstr("  Flags from devplace-probe.cc:\n"));
  const CommandResult matched = RunProbe("--help=usage_only");
  EXPECT_EQ(matched.exit_code, 0);
  EXPECT_THAT(matched.out, HasSubstr("    --usage_only ("));
  EXPECT_THAT(matched.out, Not(HasSubstr("--host_root (")));
}

TEST(ProbeBinaryTest, RunsOnThisHost) {
  const CommandResult r = RunProbe("--json");
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok());
  ASSERT_GE(inv.backends_size(), 1);
  EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU);
  EXPECT_GT(inv.host().cpu().threads(), 0u);
}

}  // namespace
}  // namespace devplace::testing
