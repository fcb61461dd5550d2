// ProbeRunner: runs a probe program (devplace-probe, later devplace-torch-probe) as a child
// process under a deadline and reads the one serialized devplace.v1.Inventory it writes to
// stdout. Probe code never runs inside the daemon: a probe that hangs,
// crashes or writes garbage is killed and reported here, never taking the caller down.
#ifndef DEVPLACE_SERVER_INVENTORY_PROBE_RUNNER_H_
#define DEVPLACE_SERVER_INVENTORY_PROBE_RUNNER_H_

#include <sys/types.h>

#include <cstddef>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::inventory {

struct ProbeRunnerOptions {
  // Wall-clock limit from spawning the child until it has closed stdout and stderr and exited.
  // When it runs out the child's whole process group gets SIGKILL.
  absl::Duration timeout = absl::Seconds(10);
  // Most stdout bytes accepted; more is an error (the child is killed).
  size_t max_stdout_bytes = size_t{64} << 20;
  // Most stderr bytes kept (the rest is read and dropped so the child never blocks on it).
  size_t max_stderr_bytes = size_t{64} << 10;
  // When non-null and set to true (from any thread) while the child runs, the child's group is
  // killed within ~100 ms and Run() returns CANCELLED (used at daemon shutdown).
  const std::atomic<bool>* cancel = nullptr;
};

// Everything one run produced.
struct ProbeResult {
  // The parsed inventory, or why there is none:
  //   DEADLINE_EXCEEDED   "probe timed out after N ms" (child group killed with SIGKILL);
  //   INTERNAL            the child exited with a non-zero code or was killed by a signal
  //                       (the message names the code or signal and quotes the head of its
  //                       stderr), or stdout was empty or not a parseable Inventory;
  //   RESOURCE_EXHAUSTED  stdout exceeded max_stdout_bytes (child killed);
  //   FAILED_PRECONDITION the program could not be started (message has the errno text);
  //   INVALID_ARGUMENT    empty argv.
  absl::StatusOr<v1::Inventory> inventory;
  // From just before spawning until the child was reaped (or given up on after a kill).
  absl::Duration duration;
  // The first max_stderr_bytes of what the child wrote to stderr.
  std::string stderr_text;
};

// Runs one fixed command per Run() call. Thread-safe: Run() keeps no state between calls, so
// several threads may run concurrently (each gets its own child).
//
// Child process contract: argv[0] is the program path (no PATH search); stdin is /dev/null;
// stdout and stderr are pipes; every other inherited file descriptor is closed; signal
// dispositions are reset to default and the signal mask cleared; the child leads a new process
// group. Whatever the outcome, the group is sent SIGKILL before the child is reaped, so no
// grandchild outlives a run holding our pipes, and Run() never leaves a zombie: a child that
// does not die within a short grace after SIGKILL (uninterruptible sleep in a driver call) is
// reaped later by a detached thread, and Run() returns at the deadline regardless.
class ProbeRunner {
 public:
  ProbeRunner(std::vector<std::string> argv, ProbeRunnerOptions options = {});

  // Runs the command once and waits at most options.timeout (plus up to ~1 s of grace for the
  // kill to take effect). Never throws.
  ProbeResult Run() const;

  const std::vector<std::string>& argv() const { return argv_; }
  const ProbeRunnerOptions& options() const { return options_; }

 private:
  std::vector<std::string> argv_;
  ProbeRunnerOptions options_;
};

// A long-lived child (devplaced's XID watcher, xid_watcher.h): the contract of Run()'s children
// (argv[0] a path, stdin /dev/null, no other inherited descriptor, default signals, a new process
// group), with stdout and stderr on one pipe whose read end, `output`, is non-blocking and
// close-on-exec. It is registered as Run()'s children are, so the orphan sweep leaves it alone.
struct StreamingChild {
  pid_t pid = -1;
  int output = -1;
};
// FAILED_PRECONDITION when the program cannot be started; INTERNAL when no pipe can be made.
absl::StatusOr<StreamingChild> StartStreamingChild(const std::vector<std::string>& argv);
// Kills the child's group, reaps it (a child stuck in the kernel is left to a reaper thread),
// forgets it and closes `output`. Its wait status, or nullopt when it could not be reaped in time.
std::optional<int> EndStreamingChild(StreamingChild& child);

// Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER) and turns on the orphan
// sweep: a probe grandchild that escaped the process-group kill by calling setsid() is re-parented
// to this process when the probe child dies, and after every Run() each child of this process
// that is not a probe child still running is sent SIGKILL and reaped. Only for a process whose
// only children are ProbeRunner children (devplaced); call once at start, before any Run().
// Returns the prctl error, if any (then nothing is enabled).
absl::Status EnableOrphanCleanup();

// The sweep itself (a no-op unless EnableOrphanCleanup() succeeded): kills and reaps every child
// of this process that no Run() is waiting for. Returns how many it killed.
int KillEscapedProbeProcesses();

// The pids of this process's children: from /proc/self/task/*/children (a few reads, however many
// processes the host runs), or, where the kernel lacks those files, a scan of every
// /proc/PID/stat. Sorted, no duplicates; a child that ends meanwhile may or may not be listed.
std::vector<pid_t> ChildProcesses();

}  // namespace devplace::inventory

#endif  // DEVPLACE_SERVER_INVENTORY_PROBE_RUNNER_H_
