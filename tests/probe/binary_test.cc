// The real devplace-probe binary on fixture hosts: --json output, serialized bytes, exit codes.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string output;
};

// Runs the binary with `args` (shell words) and captures stdout (and stderr when `with_stderr`).
Result RunProbe(const std::string& args, bool with_stderr = false) {
  const std::string command = std::string(DEVPLACE_PROBE_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(ProbeBinaryTest, JsonOutputParsesBack) {
  const Result r = RunProbe("--host_root=" + HostDir("nvidia-container") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.output, &inv).ok()) << r.output;
  EXPECT_TRUE(inv.has_probed_at());
  EXPECT_GT(inv.probed_at().seconds(), 0);
  EXPECT_EQ(inv.revision(), 0u);
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->devices_size(), 4);
  EXPECT_EQ(cuda->state_reason(), "2 of 4 devices usable");
  EXPECT_THAT(r.output, HasSubstr("\"pciBusId\": \"0000:ab:00.0\""));
}

TEST(ProbeBinaryTest, DefaultOutputIsSerializedInventory) {
  const Result r = RunProbe("--host_root=" + HostDir("amd-2x-mi210"));
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.output));
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
  const Result r = RunProbe("--host_root=" + host.dir());
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(inv.ParseFromString(r.output));
  EXPECT_EQ(FindReport(inv, "cpu")->status(), v1::PROBE_STATUS_ERROR);
}

TEST(ProbeBinaryTest, UnreadableHostRootExitsTwo) {
  const Result r = RunProbe("--host_root=/nonexistent/devplace", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--host_root"));
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/devplace"));
}

TEST(ProbeBinaryTest, BadFlagsExitTwo) {
  for (const char* args : {"--no_such_flag", "--json=maybe", "stray_argument", "--host_root"}) {
    const Result r = RunProbe(args, true);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("devplace-probe:")) << args;
  }
}

TEST(ProbeBinaryTest, HelpDescribesFlags) {
  const Result r = RunProbe("--help", true);
  EXPECT_THAT(r.output, HasSubstr("--host_root"));
  EXPECT_THAT(r.output, HasSubstr("--json"));
  EXPECT_THAT(r.output, HasSubstr("Exit status"));
}

TEST(ProbeBinaryTest, RunsOnThisHost) {
  const Result r = RunProbe("--json");
  ASSERT_EQ(r.exit_code, 0);
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.output, &inv).ok());
  ASSERT_GE(inv.backends_size(), 1);
  EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU);
  EXPECT_GT(inv.host().cpu().threads(), 0u);
}

}  // namespace
}  // namespace devplace::testing
