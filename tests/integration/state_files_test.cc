// devplaced's state files beside the lease file (docs/OPERATOR.md "Leases outlive the daemon",
// docs/PROBE.md "A reading that survives a restart") with real daemons: a second devplaced on the
// same --lease_state_file refuses to start, naming the file, the first one's pid and the fix,
// and leaves the first one's kept FAULT reading as it was; the lock ends with the daemon that
// held it; a clean stop leaves no temporary file beside the lease file.
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// 9a:00.0 is FAULT on this fixture host (a fatal AER error): health.state keeps one reading.
std::vector<std::string> FaultHostFlags(const std::string& lease_file) {
  return {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-3x-h100-health", "--nvml_library=",
          "--cuda_library=", "--lease_state_file=" + lease_file};
}

TEST(StateFiles, ASecondDaemonOnTheSameLeaseFileRefusesAndTheFirstKeepsItsFaultReading) {
  TempDir dir;
  const std::string lease_file = dir.File("leases.state"), health_file = dir.File("health.state");
  DaemonProcess first(dir.path(), FaultHostFlags(lease_file));
  ASSERT_TRUE(first.WaitForLog("event=health_state_written file=" + health_file + " revision=1 readings=1",
                               absl::Seconds(30)))
      << first.Log();
  const std::string kept = ReadFile(health_file);

  // The second one on a host where nothing is FAULT would have written readings=0 over it. The
  // timeout only ends a daemon that (wrongly) started.
  const std::string second = absl::StrCat(
      "timeout 60 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=", ShellQuote("unix:" + dir.File("second.sock")),
      " --metrics_listen= --torch_probe_command=none --nvml_library= --cuda_library= --host_root=",
      ShellQuote(std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100"));
  for (const std::string& lease : {lease_file, dir.File("other.state")}) {  // the same directory: one health file
    const CommandResult r = RunCommand(second + " --lease_state_file=" + ShellQuote(lease));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("error event=lease_state_locked file=", lease, " error=\"--lease_state_file=",
                                              lease, " is in use by another devplaced (pid ", first.pid(), ", holding ",
                                              dir.File("devplaced.lock"), "): stop that daemon, or give this one "
                                              "another --lease_state_file")));
    int problems = 0;
    for (absl::string_view line : absl::StrSplit(r.err, '\n')) problems += absl::StrContains(line, " error event=") ||
                                                                            absl::StrContains(line, " warning event=");
    EXPECT_EQ(problems, 1) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("event=health_state ")));  // nothing read before the lock
  }
  EXPECT_EQ(ReadFile(health_file), kept);
  EXPECT_FALSE(fs::exists(dir.File("second.sock")));
  EXPECT_FALSE(fs::exists(dir.File("other.state")));

  // The lock ends with its daemon: the next one takes it and carries the FAULT reading.
  first.Signal(SIGTERM);
  ASSERT_EQ(first.WaitExit(absl::Seconds(30)), 0) << first.Log();
  DaemonProcess next(dir.path(), FaultHostFlags(lease_file));
  EXPECT_TRUE(next.WaitForLog("event=health_state file=" + health_file + " found=true readings=1", absl::Seconds(30)))
      << next.Log();
  EXPECT_THAT(next.Log(), HasSubstr("event=lease_state_lock file=" + dir.File("devplaced.lock")));
  next.Signal(SIGTERM);
  EXPECT_EQ(next.WaitExit(absl::Seconds(30)), 0) << next.Log();

  // --lease_state_file=none: no state file, no lock.
  TempDir memory_only;
  DaemonProcess none(memory_only.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
                                          "--lease_state_file=none"});
  none.Signal(SIGTERM);
  EXPECT_EQ(none.WaitExit(absl::Seconds(30)), 0) << none.Log();
  EXPECT_FALSE(fs::exists(memory_only.File("devplaced.lock")));
  EXPECT_THAT(none.Log(), Not(HasSubstr("event=lease_state_lock")));
}

// At a clean stop the waiting picks' worker writes the lease file one last time (the waiters for
// the next daemon); the daemon exits only once that write is renamed into place. A race lost
// only now and then before: several stops.
TEST(StateFiles, ACleanStopLeavesNoTemporaryFile) {
  TempDir dir;
  for (int stop = 1; stop <= 5; ++stop) {
    DaemonProcess d(dir.path(), FaultHostFlags(dir.File("leases.state")));
    ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
    d.Signal(SIGTERM);
    ASSERT_EQ(d.WaitExit(absl::Seconds(30)), 0) << d.Log();
    EXPECT_THAT(d.Log(), Not(HasSubstr("event=lease_state_temporary_removed")));
    for (const fs::directory_entry& entry : fs::directory_iterator(dir.path())) {
      EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".tmp-"))) << "after stop " << stop;
    }
  }
}

}  // namespace
}  // namespace devplace::testing
