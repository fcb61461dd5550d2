// ProbeRunner against real child processes: devplace-probe on fixture hosts, and shell scripts
// that hang, crash, exit non-zero, write garbage or nothing, flood their pipes, or leave a
// grandchild holding stdout. Time bounds are generous: the point is "killed at the deadline, not
// never", on a loaded machine.
#include "server/inventory/probe_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/inventory/child_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using inventory::ProbeResult;
using inventory::ProbeRunner;
using inventory::ProbeRunnerOptions;
using ::testing::HasSubstr;
using ::testing::Not;

ProbeRunnerOptions WithTimeout(absl::Duration timeout) {
  ProbeRunnerOptions options;
  options.timeout = timeout;
  return options;
}

// The run failed with `code`, its message contains each of `parts`, and no child is left.
void ExpectError(const ProbeResult& r, absl::StatusCode code, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(r.inventory.ok());
  EXPECT_EQ(r.inventory.status().code(), code) << r.inventory.status();
  for (const char* part : parts) EXPECT_THAT(r.inventory.status().message(), HasSubstr(part));
  EXPECT_TRUE(NoChildren());
}

TEST(ProbeRunnerTest, RealProbeOnFixtureHost) {
  const ProbeResult r = ProbeRunner(ProbeCommand(HostDir("nvidia-2x-h100"))).Run();
  ASSERT_TRUE(r.inventory.ok()) << r.inventory.status();
  EXPECT_EQ(r.inventory->host().hostname(), "nvidia-2x-h100");
  ASSERT_NE(FindRow(*r.inventory, v1::ROW_CUDA_NVIDIA), nullptr);
  EXPECT_EQ(FindRow(*r.inventory, v1::ROW_CUDA_NVIDIA)->devices_size(), 2);
  EXPECT_GT(r.duration, absl::ZeroDuration());
  EXPECT_LT(r.duration, absl::Seconds(10));
  EXPECT_TRUE(NoChildren());
}

TEST(ProbeRunnerTest, BadFlagsExitCodeAndStderrInError) {
  const ProbeResult r = ProbeRunner({ProbeBinary(), "--host_root=/nonexistent/devplace"}).Run();
  // The path comes from its stderr.
  ExpectError(r, absl::StatusCode::kInternal, {"exited with code 2", "stderr: ", "/nonexistent/devplace"});
  EXPECT_FALSE(r.stderr_text.empty());
}

TEST(ProbeRunnerTest, ExitCodeAndStderrMessage) {
  TempDir dir;
  ExpectError(ProbeRunner(dir.Script("exit3.sh", "echo 'nvml: GPU 0000:17:00.0 has fallen off the bus' >&2\nexit 3")).Run(),
              absl::StatusCode::kInternal, {"exited with code 3", "nvml: GPU 0000:17:00.0 has fallen off the bus"});
}

TEST(ProbeRunnerTest, CrashBySignal) {
  TempDir dir;
  ExpectError(ProbeRunner(dir.Script("crash.sh", "echo 'probing nvml' >&2\nkill -SEGV $$")).Run(),
              absl::StatusCode::kInternal, {"killed by signal 11 (SIGSEGV)", "probing nvml"});
}

TEST(ProbeRunnerTest, HangIsKilledAtTheDeadline) {
  TempDir dir;
  const absl::Time start = absl::Now();
  const ProbeResult r =
      ProbeRunner(dir.Script("hang.sh", "echo 'waiting for the GPU' >&2\nsleep 1000"), WithTimeout(absl::Milliseconds(300)))
          .Run();
  const absl::Duration took = absl::Now() - start;
  ExpectError(r, absl::StatusCode::kDeadlineExceeded, {"probe timed out after 300 ms", "waiting for the GPU"});
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_GE(r.duration, absl::Milliseconds(290));
}

TEST(ProbeRunnerTest, ClosedStdoutButStillRunningIsKilledAtTheDeadline) {
  TempDir dir;
  const absl::Time start = absl::Now();
  ExpectError(ProbeRunner(dir.Script("close.sh", "exec >&- 2>&-\nsleep 1000"), WithTimeout(absl::Milliseconds(300))).Run(),
              absl::StatusCode::kDeadlineExceeded, {"timed out"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ProbeRunnerTest, GrandchildHoldingStdoutIsKilledAtTheDeadline) {
  TempDir dir;
  const std::string pid_file = dir.File("grandchild.pid");
  const absl::Time start = absl::Now();
  const ProbeResult r = ProbeRunner(dir.Script("fork.sh", "sleep 1000 &\necho $! > " + ShellQuote(pid_file) + "\nexit 0"),
                                    WithTimeout(absl::Milliseconds(300)))
                            .Run();
  ExpectError(r, absl::StatusCode::kDeadlineExceeded, {"timed out"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pid_file)), &grandchild));
  EXPECT_TRUE(ProcessDead(grandchild, absl::Seconds(3)));
}

TEST(ProbeRunnerTest, GarbageOutputIsAnError) {
  TempDir dir;
  for (const char* garbage : {"garbage\\n", "hello world, not a proto\\n", "{\\\"revision\\\": 3}\\n"}) {
    SCOPED_TRACE(garbage);
    ExpectError(ProbeRunner(dir.Script("garbage.sh", absl::StrCat("printf '", garbage, "'"))).Run(),
                absl::StatusCode::kInternal, {"is not a serialized devplace.v1.Inventory"});
  }
}

TEST(ProbeRunnerTest, EmptyOutputIsAnError) {
  TempDir dir;
  ExpectError(ProbeRunner(dir.Script("empty.sh", "exit 0")).Run(), absl::StatusCode::kInternal,
              {"wrote nothing to stdout"});
}

TEST(ProbeRunnerTest, TruncatedOutputIsAnError) {
  TempDir dir;
  // 40 bytes cut the inventory inside its `host` message, whose length prefix promises more.
  const std::string probe = ShellQuote(ProbeBinary()) + " --host_root=" + ShellQuote(HostDir("nvidia-2x-h100"));
  ExpectError(ProbeRunner(dir.Script("truncated.sh", probe + " | head -c 40")).Run(), absl::StatusCode::kInternal,
              {"(40 bytes) is not a serialized devplace.v1.Inventory"});
}

TEST(ProbeRunnerTest, StdoutOverTheCapIsAnError) {
  TempDir dir;
  ProbeRunnerOptions options;
  options.max_stdout_bytes = 100000;
  const absl::Time start = absl::Now();
  ExpectError(ProbeRunner(dir.Script("flood.sh", "exec cat /dev/zero"), options).Run(),
              absl::StatusCode::kResourceExhausted, {"more than 100000 bytes"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(ProbeRunnerTest, LargeStderrNeitherBlocksNorGrowsWithoutBound) {
  TempDir dir;
  ProbeRunnerOptions options;
  options.max_stderr_bytes = 1000;
  const std::string probe = ShellQuote(ProbeBinary()) + " --host_root=" + ShellQuote(HostDir("cpu-only"));
  // 1 MiB of stderr, far beyond a pipe's buffer, before the real output.
  const ProbeResult r =
      ProbeRunner(dir.Script("noisy.sh", "head -c 1048576 /dev/zero | tr '\\0' x >&2\nexec " + probe), options).Run();
  ASSERT_TRUE(r.inventory.ok()) << r.inventory.status();
  EXPECT_EQ(r.inventory->host().hostname(), "cpu-only");
  EXPECT_EQ(r.stderr_text, std::string(1000, 'x'));
}

TEST(ProbeRunnerTest, MissingProgramCannotStart) {
  ExpectError(ProbeRunner({"/nonexistent/devplace-probe"}).Run(), absl::StatusCode::kFailedPrecondition,
              {"cannot start probe /nonexistent/devplace-probe: No such file"});
  EXPECT_EQ(ProbeRunner({}).Run().inventory.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProbeRunnerTest, ChildGetsDevNullStdinAndNoInheritedFds) {
  TempDir dir;
  // An fd the test leaves open without close-on-exec: the child must not see it.
  const int opened = open("/dev/null", O_RDONLY);
  const int leaked = fcntl(opened, F_DUPFD, 57);
  close(opened);
  ASSERT_GE(leaked, 57);
  // The script reports its own open fds on stderr, then fails (so the runner keeps stderr).
  const ProbeResult r = ProbeRunner(dir.Script("fds.sh", "readlink /proc/$$/fd/0 >&2\nls /proc/$$/fd >&2\nexit 1")).Run();
  close(leaked);
  ASSERT_FALSE(r.inventory.ok());
  const std::vector<std::string> lines = absl::StrSplit(r.stderr_text, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "/dev/null");
  EXPECT_THAT(lines, Not(::testing::Contains(absl::StrCat(leaked))));
}

TEST(ProbeRunnerTest, ConcurrentRunsAreIndependent) {
  TempDir dir;
  const ProbeRunner good(ProbeCommand(HostDir("cpu-only")));
  const ProbeRunner bad(dir.Script("exit3.sh", "exit 3"));
  std::vector<std::thread> threads;
  std::vector<ProbeResult> results(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] { results[i] = (i % 2 == 0 ? good : bad).Run(); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(results[i].inventory.ok(), i % 2 == 0) << i;
  EXPECT_TRUE(NoChildren());
}

// The sweep's listing of this process's children names each live child (it reads
// /proc/self/task/*/children where the kernel has it, else every /proc/PID/stat), and not an
// exited and reaped one.
TEST(ProbeRunnerTest, ChildProcessesListsEachLiveChild) {
  std::vector<pid_t> started;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      pause();
      _exit(0);
    }
    started.push_back(pid);
  }
  const std::vector<pid_t> listed = inventory::ChildProcesses();
  for (pid_t pid : started) {
    EXPECT_TRUE(std::binary_search(listed.begin(), listed.end(), pid)) << pid << " not in " << absl::StrJoin(listed, " ");
  }
  kill(started[0], SIGKILL);
  ASSERT_EQ(waitpid(started[0], nullptr, 0), started[0]);
  const std::vector<pid_t> after = inventory::ChildProcesses();
  EXPECT_FALSE(std::binary_search(after.begin(), after.end(), started[0]));
  EXPECT_TRUE(std::binary_search(after.begin(), after.end(), started[1]));
  for (size_t i = 1; i < started.size(); ++i) {
    kill(started[i], SIGKILL);
    waitpid(started[i], nullptr, 0);
  }
}

// A grandchild that leaves the probe's process group and session (setsid) is not reached by the
// group kill; with EnableOrphanCleanup (devplaced calls it at start) it is re-parented to this
// process when the probe dies, and the sweep after Run() kills and reaps it. (ctest runs each test
// in its own process, so the subreaper setting stays in this one.)
TEST(ProbeRunnerTest, GrandchildThatCalledSetsidIsKilledWithOrphanCleanup) {
  ASSERT_TRUE(inventory::EnableOrphanCleanup().ok());
  TempDir dir;
  const std::string pid_file = dir.File("escaped.pid"), sid_file = dir.File("escaped.sid");
  const ProbeResult r = ProbeRunner(dir.Script("escape.sh", "setsid sleep 1000 >/dev/null 2>&1 </dev/null &\n"
                                                            "echo $! > " + ShellQuote(pid_file) + "\nsleep 0.3\n"
                                                            "cut -d' ' -f6 /proc/$!/stat > " + ShellQuote(sid_file) +
                                                            "\nexit 4"))
                            .Run();
  ExpectError(r, absl::StatusCode::kInternal, {"exit"});
  int escaped = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pid_file)), &escaped));
  EXPECT_TRUE(ProcessDead(escaped, absl::Seconds(3)));
  int session = 0;  // it had left the probe's session and group: only the sweep could reach it
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(sid_file)), &session));
  EXPECT_EQ(session, escaped);
  EXPECT_EQ(inventory::KillEscapedProbeProcesses(), 0);  // nothing left, and no probe child of a Run() touched
}

}  // namespace
}  // namespace devplace::testing
