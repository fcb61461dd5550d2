#include "server/inventory/probe_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "server/common/host_file.h"
#include "server/common/status_macros.h"

extern char** environ;

namespace devplace::inventory {
namespace {

using Clock = std::chrono::steady_clock;

// /proc/<pid>/stat is one line of about 300 bytes (comm is at most 16); the fields read here
// (pid, comm, state, ppid) come first.
constexpr size_t kProcStatMaxBytes = 4096;
// /proc/self/task/TID/children: up to 4 MiB of "pid " entries (far more children than devplaced has).
constexpr size_t kChildrenMaxBytes = 4 << 20;

// Probe children that a Run() still owns (spawned, not yet reaped), for the orphan sweep.
ABSL_CONST_INIT absl::Mutex g_children_mu(absl::kConstInit);
std::set<pid_t>& LiveChildren() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_children_mu) {
  static std::set<pid_t>* const children = new std::set<pid_t>;
  return *children;
}
std::atomic<bool> g_orphan_cleanup{false};

// How long Run() waits for a SIGKILLed child to be reapable before leaving it to a reaper thread.
constexpr auto kKillGrace = std::chrono::seconds(1);
constexpr size_t kReadChunk = 64 * 1024;
// Stderr quoted in error messages: at most this many lines and characters.
constexpr int kStderrQuoteLines = 3;
constexpr size_t kStderrQuoteChars = 400;

std::string ErrnoText(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof(buf));  // GNU variant: returns the message
}

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  // Gives the descriptor up (the caller closes it).
  int Release() { return std::exchange(fd_, -1); }
  bool valid() const { return fd_ >= 0; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec pipe whose ends are both >= 3, so dup2 onto 1 and 2 in the child can never
// clobber the other pipe (a daemon may run with fds 0-2 closed).
absl::Status MakePipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  Fd ends[2] = {Fd(fds[0]), Fd(fds[1])};
  for (Fd& end : ends) {
    if (end.get() >= 3) continue;
    const int moved = fcntl(end.get(), F_DUPFD_CLOEXEC, 3);
    if (moved < 0) return absl::InternalError(absl::StrCat("fcntl(F_DUPFD_CLOEXEC): ", ErrnoText(errno)));
    end.Reset(moved);
  }
  if (fcntl(ends[0].get(), F_SETFL, O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("fcntl(O_NONBLOCK): ", ErrnoText(errno)));
  }
  read_end = std::move(ends[0]);
  write_end = std::move(ends[1]);
  return absl::OkStatus();
}

// Spawns argv with stdin=/dev/null, stdout/stderr onto the pipes' write ends, no other fds, default
// signal dispositions, empty signal mask, in a new process group. Returns the pid.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd) {
  std::vector<char*> c_argv;
  c_argv.reserve(argv.size() + 1);
  for (const std::string& arg : argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
  c_argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = -1;
  const int err = posix_spawn(&pid, c_argv[0], &actions, &attr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot start probe ", argv[0], ": ", ErrnoText(err)));
  }
  return pid;
}

// Sleeps a little (backing off from 1 ms to 20 ms) but never past `until`.
void Nap(std::chrono::milliseconds& backoff, Clock::time_point until) {
  const auto now = Clock::now();
  if (now >= until) return;
  std::this_thread::sleep_for(std::min<Clock::duration>(backoff, until - now));
  backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
}

// Whether the child has exited (left unreaped: WNOWAIT keeps its pid, and so its process group
// id, from being reused until we reap it). ECHILD (someone else reaped it, e.g. SIGCHLD ignored)
// counts as exited.
bool HasExited(pid_t pid) {
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0) return info.si_pid == pid;
    if (errno == EINTR) continue;
    return true;
  }
}

// Kills the child's process group, then reaps the child. Returns its wait status, or nullopt when
// it was reaped elsewhere or did not die within kKillGrace (then a detached thread reaps it when
// it finally dies, so it never stays a zombie).
std::optional<int> KillAndReap(pid_t pid) {
  kill(-pid, SIGKILL);  // the group: the child and any grandchild still holding our pipes
  const auto give_up = Clock::now() + kKillGrace;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    int status = 0;
    const pid_t rc = waitpid(pid, &status, WNOHANG);
    if (rc == pid) return status;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return std::nullopt;  // ECHILD: not ours to reap any more
    if (Clock::now() >= give_up) break;
    Nap(backoff, give_up);
  }
  try {
    std::thread([pid] {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }).detach();
  } catch (...) {
    // No thread to spare: the zombie stays until the process exits. Nothing better to do.
  }
  return std::nullopt;
}

// The first lines of the child's stderr, for an error message; empty when it wrote none.
std::string StderrQuote(const std::string& text) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    lines.emplace_back(absl::StripAsciiWhitespace(line));
    if (static_cast<int>(lines.size()) == kStderrQuoteLines) break;
  }
  std::string quote = absl::StrJoin(lines, " | ");
  if (quote.size() > kStderrQuoteChars) quote = absl::StrCat(quote.substr(0, kStderrQuoteChars), "...");
  return quote.empty() ? "" : absl::StrCat("; stderr: ", quote);
}

// Why the wait status is a failure, or "" for a clean exit 0.
std::string ExitProblem(int status) {
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status) == 0 ? "" : absl::StrCat("probe exited with code ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return absl::StrCat("probe killed by signal ", WTERMSIG(status), abbrev ? absl::StrCat(" (SIG", abbrev, ")") : "");
  }
  return absl::StrCat("probe ended with wait status ", status);
}

absl::StatusOr<v1::Inventory> ParseInventory(const std::string& bytes) {
  if (bytes.empty()) return absl::InternalError("probe wrote nothing to stdout (expected a serialized devplace.v1.Inventory)");
  v1::Inventory inventory;
  // Random bytes often parse as unknown fields; the probe is built from the same proto as the
  // daemon, so an unknown top-level field means the output is not an Inventory.
  if (!inventory.ParseFromString(bytes) || !inventory.GetReflection()->GetUnknownFields(inventory).empty()) {
    return absl::InternalError(
        absl::StrCat("probe output (", bytes.size(), " bytes) is not a serialized devplace.v1.Inventory"));
  }
  return inventory;
}

bool Cancelled(const ProbeRunnerOptions& options) { return options.cancel != nullptr && options.cancel->load(); }

absl::Status CancelledStatus(const std::string& program) {
  return absl::CancelledError(absl::StrCat("probe cancelled (", program, ", killed)"));
}

// Spawns argv (Spawn) and registers the child under one lock, so an orphan sweep never takes a new
// child for an orphan.
absl::StatusOr<pid_t> SpawnRegistered(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd)
    ABSL_LOCKS_EXCLUDED(g_children_mu) {
  absl::MutexLock lock(&g_children_mu);
  absl::StatusOr<pid_t> spawned = Spawn(argv, stdout_fd, stderr_fd);
  if (spawned.ok()) LiveChildren().insert(*spawned);
  return spawned;
}

// What draining the child's pipes came to.
struct Drained {
  std::string out;        // stdout, at most max_stdout_bytes
  bool timed_out = false;  // the deadline passed first
  absl::Status failure;   // cancelled, poll failed, or too much stdout
};

// Reads what `fd` (non-blocking) holds now: stdout into `drained.out` (RESOURCE_EXHAUSTED past
// max_stdout_bytes), stderr into `err` (kept up to max_stderr_bytes, the rest read and dropped).
// Closes `fd` at end of file or on a read error.
void ReadReady(Fd& fd, bool is_stdout, std::vector<char>& chunk, const ProbeRunnerOptions& options, Drained& drained,
               std::string& err) {
  char* const buf = chunk.data();
  for (;;) {
    const ssize_t got = read(fd.get(), buf, chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (got <= 0) {  // EOF, or a read error we treat as EOF
      fd.Reset();
      break;
    }
    const size_t n_got = static_cast<size_t>(got);
    if (!is_stdout) {
      err.append(buf, std::min(n_got, options.max_stderr_bytes - std::min(err.size(), options.max_stderr_bytes)));
    } else if (drained.out.size() + n_got > options.max_stdout_bytes) {
      drained.failure = absl::ResourceExhaustedError(
          absl::StrCat("probe wrote more than ", options.max_stdout_bytes, " bytes to stdout"));
      break;
    } else {
      drained.out.append(buf, n_got);
    }
  }
}

// Drains both pipes until EOF on both, the deadline, a cancel, or too much stdout.
Drained DrainPipes(Fd& out_read, Fd& err_read, Clock::time_point deadline, const ProbeRunnerOptions& options,
                   const std::string& program, std::string& err) {
  Drained drained;
  std::vector<char> chunk(kReadChunk);
  while ((out_read.valid() || err_read.valid()) && drained.failure.ok()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      drained.timed_out = true;
      break;
    }
    if (Cancelled(options)) {
      drained.failure = CancelledStatus(program);
      break;
    }
    pollfd fds[2];
    Fd* owners[2];
    nfds_t n = 0;
    for (Fd* fd : {&out_read, &err_read}) {
      if (!fd->valid()) continue;
      fds[n] = {fd->get(), POLLIN, 0};
      owners[n++] = fd;
    }
    // Short slices when cancellable, so a cancel is seen within ~100 ms.
    const long long slice = options.cancel != nullptr ? std::min<long long>(left, 100) : left;
    const int ready = poll(fds, n, static_cast<int>(std::min<long long>(slice, 1 << 30)));
    if (ready < 0 && errno != EINTR) drained.failure = absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    if (ready <= 0) continue;
    for (nfds_t i = 0; i < n && drained.failure.ok(); ++i) {
      if (fds[i].revents == 0) continue;
      ReadReady(*owners[i], owners[i] == &out_read, chunk, options, drained, err);
    }
  }
  return drained;
}

// Both pipes closed: waits (still under the deadline) for the child itself to exit.
void AwaitExit(pid_t pid, Clock::time_point deadline, const ProbeRunnerOptions& options, const std::string& program,
               Drained& drained) {
  auto backoff = std::chrono::milliseconds(1);
  while (!HasExited(pid)) {
    if (Clock::now() >= deadline) {
      drained.timed_out = true;
      return;
    }
    if (Cancelled(options)) {
      drained.failure = CancelledStatus(program);
      return;
    }
    Nap(backoff, deadline);
  }
}

// Kills the child's group and reaps it (KillAndReap), forgets it, and sweeps escaped processes.
std::optional<int> ReapAndForget(pid_t pid) ABSL_LOCKS_EXCLUDED(g_children_mu) {
  const std::optional<int> status = KillAndReap(pid);
  {
    absl::MutexLock lock(&g_children_mu);
    LiveChildren().erase(pid);
  }
  KillEscapedProbeProcesses();
  return status;
}

// The run's inventory, or why there is none (ProbeResult::inventory), from how it ended: `status`
// is the child's wait status (nullopt: reaped elsewhere or not at all); `err` its stderr.
absl::StatusOr<v1::Inventory> Verdict(const Drained& drained, const std::optional<int>& status,
                                      const ProbeRunnerOptions& options, const std::string& program,
                                      const std::string& err) {
  if (drained.timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("probe timed out after ",
                                                    absl::ToInt64Milliseconds(options.timeout), " ms (", program,
                                                    ", killed)", StderrQuote(err)));
  }
  if (!drained.failure.ok()) return drained.failure;
  if (status.has_value()) {
    if (std::string problem = ExitProblem(*status); !problem.empty()) {
      return absl::InternalError(absl::StrCat(problem, " (", program, ")", StderrQuote(err)));
    }
  }
  absl::StatusOr<v1::Inventory> parsed = ParseInventory(drained.out);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(), absl::StrCat(parsed.status().message(), StderrQuote(err)));
  }
  return parsed;
}

// One run of argv under `deadline`: spawned, drained, reaped, judged. `err` gets its stderr.
absl::StatusOr<v1::Inventory> RunProbe(const std::vector<std::string>& argv, const ProbeRunnerOptions& options,
                                       Clock::time_point deadline, std::string& err) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("empty probe command");
  Fd out_read, out_write, err_read, err_write;
  RETURN_IF_ERROR(MakePipe(out_read, out_write));
  RETURN_IF_ERROR(MakePipe(err_read, err_write));
  ASSIGN_OR_RETURN(const pid_t pid, SpawnRegistered(argv, out_write.get(), err_write.get()));
  out_write.Reset();
  err_write.Reset();
  Drained drained = DrainPipes(out_read, err_read, deadline, options, argv[0], err);
  out_read.Reset();
  err_read.Reset();
  if (!drained.timed_out && drained.failure.ok()) AwaitExit(pid, deadline, options, argv[0], drained);
  const std::optional<int> status = ReapAndForget(pid);
  return Verdict(drained, status, options, argv[0], err);
}

}  // namespace

absl::Status EnableOrphanCleanup() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("prctl(PR_SET_CHILD_SUBREAPER): ", ErrnoText(errno)));
  }
  g_orphan_cleanup = true;
  return absl::OkStatus();
}

namespace {

// The children of `self` by reading every process's /proc/PID/stat (one read per process on the
// host: the fallback where the kernel has no /proc/PID/task/TID/children).
std::vector<pid_t> ChildrenByScanningProc(pid_t self) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid == self) continue;
    // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses. A process
    // that ends while this runs fails the read (ESRCH, NOT_FOUND here): not one to kill.
    const absl::StatusOr<std::string> read =
        ReadHostFile(absl::StrCat("/proc/", entry->d_name, "/stat"), kProcStatMaxBytes, HostFileLimit::kTruncate);
    if (!read.ok()) continue;
    const std::string& stat = *read;
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
    pid_t ppid = 0;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid) || ppid != self) continue;
    children.push_back(pid);
  }
  closedir(proc);
  return children;
}

}  // namespace

std::vector<pid_t> ChildProcesses() {
  // /proc/self/task/TID/children (proc(5), CONFIG_PROC_CHILDREN) lists each thread's children: a
  // few reads however many processes the host runs. A child re-parented to this subreaper is
  // listed under the thread it was given to, so every thread is read.
  std::vector<pid_t> children;
  DIR* tasks = opendir("/proc/self/task");
  bool listed = tasks != nullptr;
  while (listed) {
    const dirent* entry = readdir(tasks);
    if (entry == nullptr) break;
    if (entry->d_name[0] == '.') continue;
    const absl::StatusOr<std::string> read = ReadHostFile(absl::StrCat("/proc/self/task/", entry->d_name, "/children"),
                                                          kChildrenMaxBytes, HostFileLimit::kTruncate);
    if (absl::IsNotFound(read.status())) {
      // A thread that ended since readdir, or a kernel without the file: the scan decides.
      listed = access(absl::StrCat("/proc/self/task/", getpid(), "/children").c_str(), R_OK) == 0;
      continue;
    }
    if (!read.ok()) continue;
    for (absl::string_view field : absl::StrSplit(*read, ' ', absl::SkipWhitespace())) {
      pid_t pid = 0;
      if (absl::SimpleAtoi(field, &pid) && pid > 0) children.push_back(pid);
    }
  }
  if (tasks != nullptr) closedir(tasks);
  if (!listed) return ChildrenByScanningProc(getpid());
  std::sort(children.begin(), children.end());
  children.erase(std::unique(children.begin(), children.end()), children.end());
  return children;
}

int KillEscapedProbeProcesses() {
  if (!g_orphan_cleanup.load()) return 0;
  const std::vector<pid_t> orphans = ChildProcesses();
  int killed = 0;
  for (pid_t pid : orphans) {
    {
      absl::MutexLock lock(&g_children_mu);
      if (LiveChildren().count(pid) > 0) continue;  // a probe child a Run() still owns
    }
    kill(pid, SIGKILL);
    ++killed;
    // Reap it (it is our child now); a process stuck in the kernel is left to a reaper thread.
    const auto give_up = Clock::now() + kKillGrace;
    auto backoff = std::chrono::milliseconds(1);
    bool reaped = false;
    while (!reaped && Clock::now() < give_up) {
      const pid_t rc = waitpid(pid, nullptr, WNOHANG);
      if (rc == pid || (rc < 0 && errno != EINTR)) reaped = true;
      if (!reaped) Nap(backoff, give_up);
    }
    if (!reaped) {
      try {
        std::thread([pid] {
          while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
          }
        }).detach();
      } catch (...) {
      }
    }
  }
  return killed;
}

absl::StatusOr<StreamingChild> StartStreamingChild(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty probe command");
  Fd read_end, write_end;
  RETURN_IF_ERROR(MakePipe(read_end, write_end));
  ASSIGN_OR_RETURN(const pid_t pid, SpawnRegistered(argv, write_end.get(), write_end.get()));
  StreamingChild child;
  child.pid = pid;
  child.output = read_end.Release();
  return child;
}

std::optional<int> EndStreamingChild(StreamingChild& child) {
  std::optional<int> status;
  if (child.pid > 0) status = ReapAndForget(child.pid);
  if (child.output >= 0) close(child.output);
  child = StreamingChild();
  return status;
}

ProbeRunner::ProbeRunner(std::vector<std::string> argv, ProbeRunnerOptions options)
    : argv_(std::move(argv)), options_(options) {}

ProbeResult ProbeRunner::Run() const {
  ProbeResult result;
  const auto start = Clock::now();
  result.inventory = RunProbe(argv_, options_, start + absl::ToChronoNanoseconds(options_.timeout), result.stderr_text);
  result.duration = absl::FromChrono(Clock::now() - start);
  return result;
}

}  // namespace devplace::inventory
