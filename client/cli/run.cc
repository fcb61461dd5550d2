// `devplace run`: on a shared host, leases the least used devices (PickDevices, the flags of
// `devplace pick`), runs a command with the environment that makes it see exactly them, and
// returns its exit status. The command runs in this process's own process group (LeadOwnGroup),
// and the lease is held for the group (LEASE_HOLDER_PROCESS_GROUP): it lasts while any process of
// the job lives, even when this one was killed (over TCP: a TTL lease kept alive every third of its
// time to live); it is released when the command ends.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "devplace/client.h"

namespace devplace::cli {
namespace {

std::atomic<pid_t> g_child{0};

// SIGTERM / SIGHUP to this process go on to the command.
void Forward(int signal) {
  const pid_t child = g_child.load();
  if (child > 0) kill(child, signal);
}

// The terminal whose foreground this process's group had, and that group, to hand back at the end.
struct Foreground {
  int tty = -1;
  pid_t group = 0;
};

// Makes this process lead a process group of its own, so that the job (its child and every process
// the child starts, unless one leaves the group) is one group the daemon can hold the lease for. A
// process that leads its group already (started by an interactive shell, or a session leader such
// as a systemd service) keeps it. When the old group had the terminal's foreground, the new one gets
// it (so Ctrl-C and reads from the terminal reach the job); `restore` gives it back.
void LeadOwnGroup(Foreground& restore) {
  if (getpgrp() == getpid()) return;
  const pid_t old_group = getpgrp();
  const int tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  const bool foreground = tty >= 0 && tcgetpgrp(tty) == old_group;
  if (setpgid(0, 0) != 0) {
    if (tty >= 0) close(tty);
    return;  // the lease request says why (the daemon checks the caller leads its group)
  }
  if (!foreground) {
    if (tty >= 0) close(tty);
    return;
  }
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  sigprocmask(SIG_BLOCK, &block, &old);
  if (tcsetpgrp(tty, getpid()) == 0) {
    restore.tty = tty;
    restore.group = old_group;
  } else {
    close(tty);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

void RestoreForeground(Foreground& restore) {
  if (restore.tty < 0) return;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  sigprocmask(SIG_BLOCK, &block, &old);
  (void)tcsetpgrp(restore.tty, restore.group);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  close(restore.tty);
  restore.tty = -1;
}

// The command's exit status as a shell reports it: its code, or 128 + the signal that ended it.
int ExitStatusOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

// A command a signal ended is said on stderr, as a shell says it (not for SIGINT or SIGPIPE):
// 137 alone does not tell a user that the command was killed, or by what.
void SaySignal(int status) {
  if (!WIFSIGNALED(status) || WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGPIPE) return;
  const int sig = WTERMSIG(status);
  std::fprintf(stderr, "devplace run: the command was killed by signal %d (%s)%s; exit status %d\n", sig,
               strsignal(sig),
               sig == SIGKILL ? ": from another process, or the kernel's OOM killer when memory ran out (see "
                                "`journalctl -k` or `dmesg`)"
                              : "",
               128 + sig);
}

int RunRun() {
  if (g_arguments.empty()) return UsageError("run", "missing the command to run after --");
  absl::StatusOr<PickOptions> options = PickOptionsFromFlags(v1::LEASE_HOLDER_PROCESS_GROUP);
  if (!options.ok()) return UsageError("run", options.status().message());
  Foreground foreground;
  LeadOwnGroup(foreground);
  struct Restore {
    Foreground& f;
    ~Restore() { RestoreForeground(f); }
  } restore{foreground};
  return WithClient([&](Client& client) {
    // Over TCP a TTL lease, kept alive below.
    absl::StatusOr<v1::PickDevicesResponse> pick = PickOverAnyTransport(client, *options);
    if (!pick.ok()) return Fail(SpellWaitCommand(pick.status()));
    const v1::LeaseInfo& lease = pick->lease();
    std::vector<std::string> env;
    for (const auto& [name, value] : pick->env()) env.push_back(absl::StrCat(name, "=", value));
    std::fprintf(stderr, "devplace run: %s (the job's device %s; lease %s, %s)\n", absl::StrJoin(env, " ").c_str(),
                 pick->device().c_str(), lease.lease_id().c_str(),
                 lease.holder() == v1::LEASE_HOLDER_PROCESS_GROUP
                     ? absl::StrCat("held while any process of group ", lease.pid(), " runs").c_str()
                     : absl::StrCat("kept alive while this runs; over TCP it ends ",
                                    absl::FormatDuration(options->ttl), " after this process dies").c_str());
    for (const std::string& w : pick->warnings()) std::fprintf(stderr, "devplace run: warning: %s\n", w.c_str());

    // A TTL lease is renewed every third of its time to live while the command runs.
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    std::thread keeper;
    if (lease.holder() == v1::LEASE_HOLDER_TTL) {
      const int64_t ttl_ms = (lease.expires_at().seconds() - lease.created_at().seconds()) * 1000;
      const auto every = std::chrono::milliseconds(std::max<int64_t>(ttl_ms / 3, 500));
      keeper = std::thread([&, every] {
        std::unique_lock<std::mutex> lock(mu);
        while (!done_cv.wait_for(lock, every, [&] { return done; })) {
          lock.unlock();
          absl::StatusOr<v1::LeaseInfo> kept =
              client.KeepLeaseAlive(lease.lease_id(), absl::Milliseconds(std::max<int64_t>(ttl_ms, 1000)));
          if (!kept.ok()) {
            std::fprintf(stderr, "devplace run: keeping lease %s alive failed: %s\n", lease.lease_id().c_str(),
                         std::string(kept.status().message()).c_str());
          }
          lock.lock();
        }
      });
    }

    // The command's environment: this one without the variables the pick removes or sets, then
    // the pick's (built before fork: the child only execs).
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      const bool replaced = pick->env().contains(name) ||
                            std::find(pick->unset().begin(), pick->unset().end(), name) != pick->unset().end();
      if (!replaced) environment.push_back(entry);
    }
    environment.insert(environment.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (std::string& arg : g_arguments) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::string cannot = absl::StrCat("devplace: run: cannot run ", g_arguments[0], ": ");
    // Like system(): the terminal's SIGINT / SIGQUIT reach the command (same process group); this
    // process waits for it to end. SIGTERM / SIGHUP sent to this process are forwarded.
    struct sigaction ignore {}, forward {}, old_int {}, old_quit {}, old_term {}, old_hup {};
    ignore.sa_handler = SIG_IGN;
    forward.sa_handler = Forward;
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGQUIT, &ignore, &old_quit);
    sigaction(SIGTERM, &forward, &old_term);
    sigaction(SIGHUP, &forward, &old_hup);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child == 0) {
      // Should this process die without forwarding (SIGKILL, the OOM killer), the command dies with
      // it; processes it started that live on keep the group's lease until they end.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(kExitError);  // it died before prctl
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGQUIT, &old_quit, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      sigaction(SIGHUP, &old_hup, nullptr);
      execvpe(argv[0], argv.data(), envp.data());
      const int error = errno;
      const char* why = error == ENOENT ? "not found\n" : error == EACCES ? "permission denied\n" : "cannot execute\n";
      (void)!write(STDERR_FILENO, cannot.data(), cannot.size());
      (void)!write(STDERR_FILENO, why, std::strlen(why));
      _exit(error == ENOENT ? 127 : 126);
    }
    int exit_status = kExitError;
    if (child < 0) {
      std::fprintf(stderr, "devplace: run: cannot start the command: %s\n", std::strerror(errno));
    } else {
      g_child = child;
      int status = 0;
      pid_t got;
      do {
        got = waitpid(child, &status, 0);
      } while (got < 0 && errno == EINTR);
      exit_status = got == child ? ExitStatusOf(status) : kExitError;
      if (got == child) SaySignal(status);
    }
    g_child = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    done_cv.notify_all();
    if (keeper.joinable()) keeper.join();
    // A TTL lease is released now rather than when its TTL passes. The group's lease ends when the
    // last process of the group does (this one, unless the command left some running).
    if (lease.holder() == v1::LEASE_HOLDER_TTL) (void)client.ReleaseLease(lease.lease_id());
    return exit_status;
  });
}

}  // namespace

Command RunCommand() {
  Command command = {
      "run", "Shared hosts: run a command on the least used devices, leased while it runs.",
      "devplace run [--count=N] [--min_free=SIZE] [--shared] [--wait=D] -- COMMAND [ARGS...]",
      "Picks devices as `devplace pick` does (PickDevices with this process's environment), sets the\n"
      "variables that make COMMAND see exactly them, runs it and exits with its exit status (128 + N when\n"
      "signal N ended it; 127 when it cannot be found). COMMAND runs in this process's own process group\n"
      "(it leads a new one unless it leads its group already, and takes the terminal's foreground with it),\n"
      "and over the unix socket the lease is held for that group: it ends when COMMAND ends (released) or,\n"
      "if this process is killed (SIGKILL, the OOM killer: COMMAND is killed with it), when the last process\n"
      "of the group has ended, so no process of the job ever runs on a device whose lease ended. A process\n"
      "that leaves the group (setsid, a daemonizing fork) is not the job's any more. Over TCP a time to live\n"
      "(--ttl, default 1m) kept alive while COMMAND runs. Two runs started together never share a device.\n"
      DEVPLACE_PICK_HEALTH_HELP
      "One line on stderr names the variables and the lease.",
      PickFlagNames(), &RunRun};
  command.trailing_arguments = true;
  return command;
}

}  // namespace devplace::cli
