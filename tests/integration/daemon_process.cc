#include "tests/integration/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

extern char** environ;

namespace devplace::testing {

DaemonProcess::DaemonProcess(const std::string& dir, const std::vector<std::string>& extra_flags,
                             const std::vector<std::string>& prefix) {
  socket_path_ = dir + "/d.sock";
  unix_target_ = "unix:" + socket_path_;
  std::vector<std::string> args = {DEVPLACE_DAEMON_BINARY, absl::StrCat("--listen=", unix_target_, ",127.0.0.1:0")};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  // The libtorch view lands as a second revision shortly after start; tests that count revisions
  // must not race it, so it is off unless a test asks for it.
  if (std::none_of(extra_flags.begin(), extra_flags.end(),
                   [](const std::string& f) { return f.rfind("--torch_probe_command", 0) == 0; })) {
    args.push_back("--torch_probe_command=none");
  }
  // Tests run daemons side by side: none takes the default metrics port unless a test asks.
  if (std::none_of(extra_flags.begin(), extra_flags.end(),
                   [](const std::string& f) { return f.rfind("--metrics_listen", 0) == 0; })) {
    args.push_back("--metrics_listen=");
  }
  args.insert(args.begin(), prefix.begin(), prefix.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) abort();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    fprintf(stderr, "cannot start %s\n", argv[0]);
    abort();
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  reader_ = std::thread([this, fd = out[0]] { ReadLoop(fd); });

  // The listening lines as --log_format=text or =json writes them.
  const bool json = std::find(extra_flags.begin(), extra_flags.end(), "--log_format=json") != extra_flags.end();
  const std::string key = json ? "\"address\":\"" : "address=";
  if (!WaitForLog(key + "127.0.0.1:", absl::Seconds(20)) || !WaitForLog(key + "unix:", absl::Seconds(5))) {
    fprintf(stderr, "devplaced did not start listening; log:\n%s\n", Log().c_str());
    abort();
  }
  std::smatch m;
  const std::string log = Log();
  if (!std::regex_search(log, m, std::regex(json ? "\"address\":\"(127\\.0\\.0\\.1:[0-9]+)"
                                                 : "address=(127\\.0\\.0\\.1:[0-9]+)"))) {
    abort();
  }
  tcp_target_ = m[1];
}

std::string DaemonProcess::tls_target() {
  const std::string log = Log();
  const std::string needle = "event=listening address=tls:127.0.0.1:";
  const size_t found = log.find(needle);
  if (found == std::string::npos) return "";
  const size_t at = found + needle.size();
  return "127.0.0.1:" + log.substr(at, log.find_first_not_of("0123456789", at) - at);
}

std::string DaemonProcess::metrics_address() {
  const std::string needle = "event=metrics_listening url=http://";
  if (!WaitForLog(needle, absl::Seconds(10))) return "";
  const std::string log = Log();
  const size_t at = log.find(needle) + needle.size();
  return log.substr(at, log.find("/metrics", at) - at);
}

DaemonProcess::~DaemonProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (reader_.joinable()) reader_.join();
  // Under the tsan preset the daemon is instrumented too and reports a race on its stderr (this
  // log) without exiting; a test that ran it is only clean if the daemon was.
  const std::string log = Log();
  const size_t report = log.find("WARNING: ThreadSanitizer:");
  if (report != std::string::npos) {
    ADD_FAILURE() << "devplaced (pid " << pid_ << ") reported:\n" << log.substr(report, 16384);
  }
}

void DaemonProcess::ReadLoop(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    log_.append(buf, static_cast<size_t>(n));
  }
  close(fd);
}

bool DaemonProcess::WaitForLog(const std::string& needle, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto found = [this, &needle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return log_.find(needle) != std::string::npos; };
  return mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
}

std::string DaemonProcess::Log() {
  absl::MutexLock lock(&mu_);
  return log_;
}

void DaemonProcess::Signal(int sig) { kill(pid_, sig); }

int DaemonProcess::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

}  // namespace devplace::testing
