// devplaced: the per-host device placement daemon. Probes the host through the devplace-probe
// child process, keeps the inventory snapshot, and serves the DevicePlacement gRPC service with
// server reflection and the grpc.health.v1 health service. See README.md and docs/ARCHITECTURE.md.
//
// This file is the process around server/daemon/: the command line (flags.h), the log set-up,
// one Daemon (daemon.h), and the exit. Exit status 0 after --help or --version; 2: bad flags or
// configuration, one line `devplaced: <message> (see --help)`; 1: could not listen, or a listener died.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/daemon/config.h"
#include "server/daemon/daemon.h"
#include "server/daemon/flags.h"
#include "spdlog/spdlog.h"

namespace devplace {
namespace {

int Usage(const std::string& message) {
  fprintf(stderr, "devplaced: %s (see --help)\n", message.c_str());
  return 2;
}

int Run(int argc, char** argv) {
  // Before any thread exists (gRPC's, the TLS certificate watcher's, the log set-up's): every
  // thread inherits the mask, so SIGHUP/SIGTERM/SIGINT reach only Daemon::Wait()'s sigtimedwait
  // and never the default action (death, which systemd counts as a clean exit for SIGHUP).
  daemon::BlockDaemonSignals();
#ifdef NDEBUG
  // Debian builds libabsl without NDEBUG, so every absl::Mutex (gRPC's included) runs lock-order
  // deadlock detection and aborts on a cycle it suspects. Release builds of the daemon pay
  // neither (~3% of the daemon's CPU per call); Debug builds, the tests', keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  daemon::SetUpFlagUsage();
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (std::optional<std::string> help = daemon::HelpText(args)) {
    fputs(help->c_str(), stdout);
    return 0;
  }
  std::vector<std::string> checked = {argv[0]};  // what absl parses: the names with underscores
  if (std::optional<std::string> error = daemon::CheckFlags(args, &checked)) {
    return Usage(*error);
  }
  std::vector<char*> checked_argv;
  for (std::string& arg : checked) checked_argv.push_back(arg.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(checked_argv.size()), checked_argv.data());
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected argument '", rest[1], "'"));
  absl::StatusOr<daemon::ValidConfig> config = daemon::ConfigFromFlags();
  if (!config.ok()) return Usage(std::string(config.status().message()));

  daemon::ConfigureLogging(*config);

  daemon::Daemon d(*std::move(config));
  if (const absl::Status s = d.Start(); !s.ok()) {
    if (s.code() == absl::StatusCode::kInvalidArgument) return Usage(std::string(s.message()));
    return daemon::ExitStatus(s);
  }
  const int status = d.Wait();
  spdlog::shutdown();
  fflush(stdout);
  fflush(stderr);
  // Every call is finished and every watch ended; what is left is gRPC's global shutdown, which
  // can wait up to ~10 s on a poller, and the refresh worker's probe in flight. Neither
  // holds state worth keeping: leave now.
  std::_Exit(status);
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) { return devplace::Run(argc, argv); }
