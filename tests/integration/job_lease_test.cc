// A job's launcher that picks and then starts its workers (Python's devplace.pick() with
// subprocess and multiprocessing, libdevplace's Client::Pick with fork), started as the leader of
// its own process group as an interactive shell starts a command, holds the lease for the job: when
// the launcher is SIGKILLed (what the OOM killer does) while its workers run, another user's pick
// does not get the device until the last worker has exited, and gets it then. Real parts: devplaced
// on a one-GPU fake host (SharedHost), the real Python client and libdevplace, real processes, the
// CLI as the other user (nobody, when this runs as root; else the same user, whom a lease bars alike).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/shared_host.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// A guard against a hang, never a wait for a duration: each step waits for its event.
constexpr absl::Duration kGuard = absl::Seconds(60);

// The launcher as a child process leading a process group of its own, its stdout and stdin pipes.
struct Launcher {
  pid_t pid = -1;
  int out = -1;  // its stdout
  int in = -1;   // its stdin: it runs until this is closed (or it is killed)
};

Launcher StartLeader(const std::vector<std::string>& argv, const std::string& stderr_path) {
  int out[2], in[2];
  Launcher launcher;
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) return launcher;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  launcher.pid = fork();
  if (launcher.pid == 0) {
    setpgid(0, 0);  // as a shell with job control starts a command: the leader of its own group
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(in[0]);
  launcher.out = out[0];
  launcher.in = in[1];
  return launcher;
}

// The first line the launcher prints ("" when it ended first, or after kGuard).
std::string ReadLine(int fd) {
  std::string line;
  const absl::Time give_up = absl::Now() + kGuard;
  char c;
  while (absl::Now() < give_up) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(fd, &c, 1) != 1 || c == '\n') break;
    line.push_back(c);
  }
  return line;
}

// Opened before the process can end, so its end is seen however soon it comes (-1 without pidfd_open).
int PidFd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// Whether `pid` (a process this test did not start: the launcher's orphaned worker) has ended.
bool Ended(int pidfd, pid_t pid) {
  const absl::Time give_up = absl::Now() + kGuard;
  while (absl::Now() < give_up) {
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) return true;
      continue;
    }
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || stat.substr(paren + 2, 1) == "Z") return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// Ends the worker reading `fifo` (its `cat` or open().read() sees the end of file) once it has
// opened it.
bool EndWorker(const std::string& fifo) {
  const absl::Time give_up = absl::Now() + kGuard;
  while (absl::Now() < give_up) {
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) return close(fd) == 0;
    if (errno != ENXIO) return false;  // ENXIO: no reader yet
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// The launcher's line, `holder=X lease_pid=N ...`, as a map.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> fields;
  for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    const std::vector<std::string> kv = absl::StrSplit(word, absl::MaxSplits('=', 1));
    if (kv.size() == 2) fields[kv[0]] = kv[1];
  }
  return fields;
}

// The other user's pick (a TTL lease: its holder is no process of the test's), `wait` as
// `devplace pick --wait` takes it ("" = none).
CommandResult OtherUsersPick(SharedHost& host, const std::string& as_other, const std::string& wait) {
  return RunCommand(absl::StrCat(as_other, host.Cli(), " pick --no_environment --ttl=1m --json",
                                 wait.empty() ? "" : " --wait=" + wait));
}

// The case, for a launcher started with `argv` (its two FIFO arguments appended).
void LauncherKilledWhileItsWorkersRun(std::vector<std::string> argv) {
  SharedHost host(1, {});
  const std::string as_other = host.AsNobody();
  const std::string fifo[2] = {host.dir() + "/worker1.fifo", host.dir() + "/worker2.fifo"};
  for (const std::string& f : fifo) ASSERT_EQ(mkfifo(f.c_str(), 0666), 0) << f;
  argv.push_back(fifo[0]);
  argv.push_back(fifo[1]);
  Launcher launcher;
  {
    const ScopedEnv address("DEVPLACE_ADDRESS", host.daemon().unix_target());
    launcher = StartLeader(argv, host.dir() + "/launcher.err");
  }
  ASSERT_GT(launcher.pid, 0);
  const std::string line = ReadLine(launcher.out);
  std::map<std::string, std::string> got = Fields(line);
  ASSERT_EQ(got.size(), 6u) << line << ReadFile(host.dir() + "/launcher.err");
  EXPECT_EQ(got["holder"], "LEASE_HOLDER_PROCESS_GROUP") << "the lease is not held for the job";
  EXPECT_EQ(got["lease_pid"], absl::StrCat(launcher.pid));
  EXPECT_EQ(got["pid"], absl::StrCat(launcher.pid));
  EXPECT_EQ(got["warnings"], "0") << ReadFile(host.dir() + "/launcher.err");
  EXPECT_EQ(got["cvd"], Uuid(0));
  const std::vector<std::string> worker_words = absl::StrSplit(got["workers"], ',');
  ASSERT_EQ(worker_words.size(), 2u) << line;
  pid_t workers[2];
  int pidfds[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(absl::SimpleAtoi(worker_words[i], &workers[i])) << line;
    pidfds[i] = PidFd(workers[i]);
  }

  // The launcher is killed as the OOM killer kills: no handler runs, its workers live on.
  ASSERT_EQ(kill(launcher.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher.pid, &status, 0), launcher.pid);
  close(launcher.out);
  close(launcher.in);
  CommandResult second = OtherUsersPick(host, as_other, "");
  EXPECT_EQ(second.exit_code, 1) << "the other user got the device while the job's workers run: " << second.out;
  EXPECT_THAT(second.err, HasSubstr("a process group's lease")) << second.err;

  ASSERT_TRUE(EndWorker(fifo[0]));
  ASSERT_TRUE(Ended(pidfds[0], workers[0])) << "worker " << workers[0] << " did not end";
  second = OtherUsersPick(host, as_other, "");
  EXPECT_EQ(second.exit_code, 1) << "the other user got the device while the job's last worker runs: " << second.out;

  // Once the last worker has ended the lease ends (the daemon sees it a moment later: the pick waits).
  ASSERT_TRUE(EndWorker(fifo[1]));
  ASSERT_TRUE(Ended(pidfds[1], workers[1])) << "worker " << workers[1] << " did not end";
  second = OtherUsersPick(host, as_other, "60s");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  v1::PickDevicesResponse picked;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(second.out, &picked).ok()) << second.out;
  EXPECT_EQ(picked.env().at("CUDA_VISIBLE_DEVICES"), Uuid(0));
  for (int fd : pidfds) {
    if (fd >= 0) close(fd);
  }
}

// The launcher: devplace.pick() with its defaults, then a worker started with subprocess and one
// with multiprocessing's spawn (the start method of torch.multiprocessing.spawn).
constexpr char kPythonLauncher[] = R"(
import multiprocessing, os, subprocess, sys
import devplace

def worker(fifo):
    with open(fifo) as f:
        f.read()

if __name__ == "__main__":
    picked = devplace.pick(job=devplace.for_job({}))
    first = subprocess.Popen(["cat", sys.argv[1]], stdout=subprocess.DEVNULL)
    second = multiprocessing.get_context("spawn").Process(target=worker, args=(sys.argv[2],))
    second.start()
    holder = devplace.v1.devplace_pb2.LeaseHolder.Name(picked.lease.holder)
    print(f"holder={holder} lease_pid={picked.lease.pid} pid={os.getpid()} workers={first.pid},{second.pid} "
          f"cvd={os.environ['CUDA_VISIBLE_DEVICES']} warnings={len(picked.warnings)}", flush=True)
    sys.stdin.read()
)";

TEST(JobLease, APythonLauncherKilledWhileItsWorkersRunKeepsTheLeaseUntilTheLastWorkerExits) {
#ifndef DEVPLACE_PYTHON
  GTEST_SKIP() << "built without the Python client";
#else
  TempDir dir;
  const ScopedEnv path("PYTHONPATH", DEVPLACE_PYTHON_DIR);
  const ScopedEnv no_bytecode("PYTHONDONTWRITEBYTECODE", "1");
  LauncherKilledWhileItsWorkersRun({DEVPLACE_PYTHON, dir.Write("launcher.py", kPythonLauncher)});
#endif
}

TEST(JobLease, ACppLauncherKilledWhileItsWorkersRunKeepsTheLeaseUntilTheLastWorkerExits) {
  LauncherKilledWhileItsWorkersRun({DEVPLACE_JOB_LAUNCHER});
}

}  // namespace
}  // namespace devplace::testing
