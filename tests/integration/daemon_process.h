// Runs the real devplaced binary as a child process for integration tests: a unix socket in a
// given (temporary, see tests/common/temp_dir.h) directory plus 127.0.0.1:0, the bound TCP port
// read from its log, and SIGTERM/exit status checks.
#ifndef DEVPLACE_TESTS_INTEGRATION_DAEMON_PROCESS_H_
#define DEVPLACE_TESTS_INTEGRATION_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace devplace::testing {

class DaemonProcess {
 public:
  // Starts devplaced with `--listen=unix:<dir>/d.sock,127.0.0.1:0` plus `extra_flags` (and
  // `--torch_probe_command=none` and `--metrics_listen=` unless they name them), and waits
  // (up to 20 s) until it logged both listen addresses. Aborts the test binary on failure.
  // `prefix`, when given, is the command that runs devplaced and must exec it in place (so that the
  // pid is the daemon's), e.g. {"/usr/bin/prlimit", "--nofile=256:256", "--"}.
  DaemonProcess(const std::string& dir, const std::vector<std::string>& extra_flags,
                const std::vector<std::string>& prefix = {});
  // SIGKILLs the daemon if it still runs.
  ~DaemonProcess();

  const std::string& unix_target() const { return unix_target_; }  // "unix:/tmp/.../d.sock"
  const std::string& tcp_target() const { return tcp_target_; }    // "127.0.0.1:<port>"
  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_; }

  // "127.0.0.1:<port>" of the tls:127.0.0.1:0 listener as logged (event=listening); "" without one.
  std::string tls_target();
  // "127.0.0.1:<port>" of /metrics (--metrics_listen=127.0.0.1:0) once logged (event=metrics_listening),
  // waiting up to 10 s; "" when it was not.
  std::string metrics_address();
  // Waits until the log contains `needle` (true) or `timeout` passes (false).
  bool WaitForLog(const std::string& needle, absl::Duration timeout);
  std::string Log();
  // Sends `sig`.
  void Signal(int sig);
  // Waits for exit; returns the exit status (or 128 + signal), -1 on timeout.
  int WaitExit(absl::Duration timeout);

 private:
  void ReadLoop(int fd);

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string socket_path_, unix_target_, tcp_target_;
  std::thread reader_;
  absl::Mutex mu_;
  std::string log_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_INTEGRATION_DAEMON_PROCESS_H_
