// Who holds the lease of `devplace pick` (LEASE_HOLDER_PARENT): the process that evaluates its output
// and runs the job, found from the kernel's view of the pipe `$(...)` reads (/proc/<pid>/fd and
// fdinfo of this user's processes), never a wrapper that exits when the CLI does. The daemon checks
// what the CLI names (server/service/pick_service.cc HolderFor): an ancestor of the calling process
// that runs as the caller's user.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/common/bounded_read.h"

namespace devplace::cli {
namespace {

// At most this many open files of one process are looked at (a shell holds a handful).
constexpr int kMaxFds = 4096;

// /proc/<pid>/<name> of a process of this user (bounded; "" when it cannot be read).
std::string ProcText(pid_t pid, const std::string& name) {
  reading::ReadBudget budget(absl::Seconds(1), 64 << 10);
  return reading::ReadRegularFile(absl::StrCat("/proc/", pid, "/", name), 64 << 10, budget).value_or("");
}

std::string ProcLink(pid_t pid, const std::string& name) {
  char target[256];
  const ssize_t n = readlink(absl::StrCat("/proc/", pid, "/", name).c_str(), target, sizeof target - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

// Fields of /proc/<pid>/stat after the command: [0] state, [1] ppid, [2] pgrp, [3] session.
std::vector<std::string> StatFields(pid_t pid) {
  const std::string stat = ProcText(pid, "stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return {};
  return absl::StrSplit(stat.substr(paren + 1), ' ', absl::SkipEmpty());
}

// `pid`'s parent, or 0 when it cannot be read.
pid_t ParentOf(pid_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  int parent = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &parent)) return 0;
  return parent;
}

// The numbers of `pid`'s open files whose /proc link is `target` (e.g. "pipe:[123]").
std::vector<int> FdsOf(pid_t pid, const std::string& target) {
  std::vector<int> fds;
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return fds;
  int seen = 0;
  while (const dirent* entry = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry->d_name, &fd)) continue;
    if (++seen > kMaxFds) break;
    if (ProcLink(pid, absl::StrCat("fd/", fd)) == target) fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

// Whether `pid` holds `pipe` open for reading (fdinfo's `flags:`, octal, O_RDONLY in its access
// mode): the end a shell reads the output of `$(...)` from. A subshell or a wrapper between holds
// only the end it writes to (its stdout, O_WRONLY).
bool ReadsPipe(pid_t pid, const std::string& pipe) {
  for (int fd : FdsOf(pid, pipe)) {
    const std::string info = ProcText(pid, absl::StrCat("fdinfo/", fd));
    for (absl::string_view line : absl::StrSplit(info, '\n')) {
      if (!absl::ConsumePrefix(&line, "flags:")) continue;
      const absl::string_view octal = absl::StripAsciiWhitespace(line);
      uint64_t flags = 0;
      bool valid = !octal.empty() && octal.size() <= 20;
      for (char c : octal) {
        valid = valid && c >= '0' && c <= '7';
        flags = flags * 8 + static_cast<uint64_t>(c - '0');
      }
      if (valid && (flags & O_ACCMODE) == O_RDONLY) return true;
    }
  }
  return false;
}

// Whether `child` is a subshell that `parent` forked for `$(...)` and is reading: the same program
// (executable and command line: a fork that did not exec), the same session, and child's stdout a
// pipe whose other end `parent` holds. bash forks one to run the pipeline of `$(cmd | cat)`; it
// exits as soon as the pipeline does, so it cannot hold a lease.
bool IsSubshellOf(pid_t child, pid_t parent) {
  if (parent <= 1) return false;
  const std::vector<std::string> c = StatFields(child);
  const std::vector<std::string> p = StatFields(parent);
  if (c.size() < 4 || p.size() < 4 || c[3] != p[3]) return false;
  const std::string exe = ProcLink(child, "exe");
  const std::string cmdline = ProcText(child, "cmdline");
  if (exe.empty() || exe != ProcLink(parent, "exe") || cmdline != ProcText(parent, "cmdline")) return false;
  const std::string out = ProcLink(child, "fd/1");
  return absl::StartsWith(out, "pipe:") && !FdsOf(parent, out).empty();
}

// Programs that run a command and end when it does (or replace themselves with it): a lease held
// by one would end with the pick. By /proc/<pid>/comm, the name the program was started as.
constexpr absl::string_view kWrappers[] = {
    "timeout", "flock",   "nice",    "stdbuf", "env",   "time",  "nohup", "setsid",
    "ionice",  "taskset", "chrt",    "numactl", "prlimit", "setpriv", "strace", "ltrace",
    "script",  "unbuffer", "xargs",  "watch",  "sudo",  "doas",  "su",    "runuser"};

bool IsWrapper(absl::string_view comm) {
  for (absl::string_view wrapper : kWrappers) {
    if (comm == wrapper) return true;
  }
  return false;
}

std::string CommOf(pid_t pid) { return std::string(absl::StripAsciiWhitespace(ProcText(pid, "comm"))); }

// Whether `pid` is a shell started to run one command string (`sh -c '...'`, `bash -lc '...'`):
// its first argument is an option cluster holding c.
bool RunsACommandString(pid_t pid) {
  const std::string cmdline = ProcText(pid, "cmdline");
  const std::vector<absl::string_view> args = absl::StrSplit(cmdline, '\0');
  if (args.size() < 3) return false;
  const absl::string_view first = args[1];
  return first.size() >= 2 && first[0] == '-' && first[1] != '-' && absl::StrContains(first, 'c');
}

}  // namespace

pid_t EvaluatingShell() {
  const pid_t parent = getppid();
  pid_t writer = getpid();
  pid_t up = parent;
  for (int step = 0; step < 16 && up > 1; ++step) {
    const std::string out = ProcLink(writer, "fd/1");
    if (!absl::StartsWith(out, "pipe:")) break;
    if (ReadsPipe(up, out)) return up;  // `up` reads the output: it evaluates it
    // Climb only past a process that writes where `writer` does (a subshell forked for a
    // redirection, a wrapper such as timeout or flock that waits for its command), or past the
    // subshell that runs the pipeline of `$(devplace pick | cat)` for the shell that reads it.
    const pid_t above = ParentOf(up);
    if (ProcLink(up, "fd/1") != out && !IsSubshellOf(up, above)) break;
    writer = up;
    up = above;
  }
  return parent;  // no ancestor reads the output (a file, a terminal): the process that ran the pick
}

absl::StatusOr<pid_t> PickHolder() {
  pid_t holder = EvaluatingShell();
  std::string comm = CommOf(holder);
  // A shell that a wrapper started to run the pick's command string and that writes where the pick
  // does ends with the pick as the wrapper does: `script -c` runs `$SHELL -c` on a terminal, and
  // where that is sh (dash, which waits for the last command where bash replaces itself with it),
  // the shell would hold the lease. The wrapper is named.
  if (!IsWrapper(comm) && RunsACommandString(holder) && ProcLink(holder, "fd/1") == ProcLink(getpid(), "fd/1")) {
    const pid_t above = ParentOf(holder);
    if (std::string above_comm = CommOf(above); IsWrapper(above_comm)) {
      holder = above;
      comm = std::move(above_comm);
    }
  }
  if (IsWrapper(comm)) {
    // No backquote, $, ( or " outside single quotes: where stderr reaches the evaluated text too (a
    // pty wrapper such as script), this line runs as a command that is not found, and the lines
    // of PrintPickFailClosed after it still empty the mask and fail the eval.
    return absl::FailedPreconditionError(absl::StrCat(
        "the lease would be held by ", comm, ", pid ", holder, ", which runs devplace pick and ends when it does: the "
        "lease would end at once and the next pick would get the same devices. The holder must be the process that "
        "evaluates the output and runs the job: put the wrapper around the job, 'eval \"$(devplace pick)\" && ",
        comm, " ... job', or use 'devplace run -- ", comm, " ... job', or --ttl=D for a lease with a time to live"));
  }
  return holder;
}

}  // namespace devplace::cli
