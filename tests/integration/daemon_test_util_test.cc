// The helpers the daemon's tests share against the real things: daemon_test_util.h (a stub, deadlines
// and a health check over a real devplaced's unix socket and TCP port, the build's CLI run as a
// process, the inventory from its JSON) and tests/common's FixtureHost (the tree the daemon probes)
// and ScopedEnv (the fake NVML's script, seen by the daemon's probe child).
#include "tests/integration/daemon_test_util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fixtures.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

TEST(TestHelpers, FixtureHostIsAFakeHostTree) {
  struct stat st;
  const std::string devices = FixtureHost("nvidia-2x-h100") + "/sys/bus/pci/devices";
  ASSERT_EQ(stat(devices.c_str(), &st), 0) << devices;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST(TestHelpers, ScopedEnvSetsOrUnsetsForChildProcessesAndRestoresAfter) {
  const char* name = "DEVPLACE_TEST_HELPER_VARIABLE";
  unsetenv(name);
  {
    ScopedEnv env(name, std::string("a value"));
    EXPECT_EQ(RunCommand(std::string("printenv ") + name).out, "a value\n");
    {
      ScopedEnv inner(name, nullptr);
      EXPECT_EQ(getenv(name), nullptr);
      EXPECT_EQ(RunCommand(std::string("printenv ") + name).exit_code, 1);
    }
    ASSERT_NE(getenv(name), nullptr);  // the value before the inner scope, restored
    EXPECT_STREQ(getenv(name), "a value");
  }
  EXPECT_EQ(getenv(name), nullptr);  // it had none
}

TEST(TestHelpers, RunCliRunsTheBuildsCliAfterItsPrefix) {
  CommandResult r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("devplace"));
  r = RunCli("inventory --address=unix:/nonexistent/d.sock");
  EXPECT_EQ(r.exit_code, 1);  // no daemon there
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  // The prefix's variable reaches the CLI: the cpu fallback answers instead of the missing daemon.
  r = RunCli("resolve --workload=training --address=unix:/nonexistent/d.sock", "env DEVPLACE_FALLBACK=cpu");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");
}

TEST(TestHelpers, StubDeadlinesHealthAndLookupsAgainstTheRealDaemon) {
  TempDir dir;
  ScopedEnv nvml("FAKE_NVML_CONFIG", FixtureFile("nvml/h100.txt"));
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--nvml_library=" DEVPLACE_FAKE_NVML});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  EXPECT_TRUE(HealthServes(d.unix_target(), absl::Seconds(5)));
  EXPECT_TRUE(HealthServes(d.tcp_target(), absl::Seconds(5)));
  EXPECT_FALSE(HealthServes("unix:" + dir.File("nothing.sock"), absl::Seconds(1)));

  v1::Inventory inv;
  ASSERT_TRUE(Stub(d.unix_target())->GetInventory(Ctx().get(), {}, &inv).ok());
  v1::ListBackendsResponse backends;
  ASSERT_TRUE(Stub(d.tcp_target())->ListBackends(Ctx(absl::Seconds(5)).get(), {}, &backends).ok());
  EXPECT_GT(backends.backends_size(), 0);

  // The fake NVML read its script from the variable ScopedEnv set: the probe child reported it and
  // the GPUs' free memory.
  const v1::ProbeReport* report = FindReport(inv, "nvml");
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_OK) << report->message();
  EXPECT_EQ(FindReport(inv, "no-such-prober"), nullptr);

  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 2);
  EXPECT_EQ(FindRow(inv, v1::ROW_CPU), &inv.backends(0));
  EXPECT_EQ(FindRow(inv, v1::ROW_NPU), nullptr);
  const v1::Device& second = cuda->devices(1);
  EXPECT_EQ(FindDevice(inv, second.pci_bus_id()), &second);
  EXPECT_TRUE(second.has_memory_free_bytes());  // NVML's figure, from the script
  EXPECT_EQ(FindDevice(inv, "0000:ff:1f.7"), nullptr);

  // `devplace inventory --json` of the same daemon parses to the same devices.
  const CommandResult json = RunCli("inventory --json --address=" + d.unix_target());
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const v1::Inventory parsed = ParseInventoryJson(json.out);
  ASSERT_NE(FindRow(parsed, v1::ROW_CUDA_NVIDIA), nullptr);
  EXPECT_EQ(FindRow(parsed, v1::ROW_CUDA_NVIDIA)->devices(1).pci_bus_id(), second.pci_bus_id());

  // A deadline that has passed fails the call.
  auto late = Ctx(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Stub(d.unix_target())->GetInventory(late.get(), {}, &inv).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);

  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(TestHelpers, TailKeepsTheLast3000Characters) {
  EXPECT_EQ(Tail("short"), "short");
  const std::string log = std::string(1000, 'a') + std::string(3000, 'b');
  EXPECT_EQ(Tail(log), std::string(3000, 'b'));
}

}  // namespace
}  // namespace devplace::testing
