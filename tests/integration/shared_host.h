// A shared host for the tests of `devplace pick` and `devplace run`: devplaced as a child process on
// a fake host of n H100s (a copy of the nvidia-2x-h100 fixture, as scripts/bench makes its hosts)
// whose fake NVML reports the memory and processes the test gives, and bash scripts that run the real
// CLI against it.
#ifndef DEVPLACE_TESTS_INTEGRATION_SHARED_HOST_H_
#define DEVPLACE_TESTS_INTEGRATION_SHARED_HOST_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {

inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kTotal = 80 * kGiB;  // each card's memory

// Host device i's PCI address (0000:20:00.0, 0000:21:00.0, ...) and UUID.
std::string Bus(int i);
std::string Uuid(int i);

// What the fake NVML reports for one card.
struct GpuUse {
  uint64_t used = kGiB;  // what the driver holds on an idle card
  std::vector<std::pair<int, uint64_t>> processes;  // pid, bytes
  int compute_mode = 0;
};

// A daemon on an n-GPU host with that NVML (cards not in `use` idle); its probe child inherits
// FAKE_NVML_CONFIG. It waits for the first inventory; the destructor stops it with SIGTERM and
// expects exit status 0.
class SharedHost {
 public:
  SharedHost(int n, const std::map<int, GpuUse>& use, std::vector<std::string> flags = {});
  ~SharedHost();
  DaemonProcess& daemon() { return *daemon_; }
  const std::string& dir() const { return dir_.path(); }
  // `devplace --address=<unix socket>`.
  std::string Cli() const;
  // A script's first line: `devplace` on PATH (a link in this host's directory) and
  // DEVPLACE_ADDRESS naming this daemon, as a user's shell has them. Commands nested in
  // `bash -c '...'` then name no path, whose quotes would end the outer ones (the checkout's
  // path may hold a space).
  std::string ShellEnv() const;
  // GetInventory over the unix socket (EXPECTs it answers).
  v1::Inventory Inventory();
  // The number of leases still held once every lease has ended or `within` has passed. A lease
  // whose holder exited ends when the daemon sees it exit (a pidfd, then a /proc pass for a process
  // group), a moment after the exit.
  int LeasesLeft(absl::Duration within = absl::Seconds(10));
  // Bash(script) in this host's directory, after ShellEnv().
  CommandResult Script(const std::string& script) const;
  // Stops the daemon as a package upgrade does (SIGTERM, expecting exit status 0; its log is kept
  // in previous_log()) and starts it again with the same flags in the same directory (its socket
  // and lease file), waiting for its first inventory. `while_down` (may be empty) runs between.
  void Restart(const std::function<void()>& while_down = {});
  // The log of the daemon Restart stopped.
  const std::string& previous_log() const { return previous_log_; }
  // The words that run a command as nobody (setpriv, "... " to prepend) once this host's directory
  // is open to others (mode 0755, the socket's directory); "" when this is not root, setpriv is
  // missing or nobody cannot run the CLI (the checkout's path).
  std::string AsNobody() const;

 private:
  void Start();

  TempDir dir_;
  std::vector<std::string> flags_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::string previous_log_;
};

// Waits (at most 60 s) until devplace_picks_waiting shows `n` picks waiting (placeholders of a
// restart included); needs --metrics_listen=127.0.0.1:0.
bool AwaitPicksWaiting(DaemonProcess& d, int n);

// `script` run by `bash -euo pipefail -c`, stderr into stdout.
CommandResult Bash(const std::string& script);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_INTEGRATION_SHARED_HOST_H_
