// group_leases_driver: what process-group leases whose leader has exited cost the real devplaced on
// a host that runs many idle processes. Such a lease is ordinary use: `devplace run -- sh -c
// 'sleep 3600 & exit 0'` ends while its job lives on in the run's process group, and the lease
// lasts while any process of the group runs (server/service/lease_holder.h). Two phases, each with
// a daemon of its own, over its unix socket:
//   base    no extra process, no lease;
//   loaded  --processes idle processes (children of this driver that pause) and --groups such
//           leases (made by the real CLI's `devplace run`).
// In each phase: GetInventory and PickDevices (a TTL lease of one device, released after each; the
// release is not timed), --calls of each, interleaved: their p50 and p99 in microseconds; then the
// daemon's CPU time over --idle_seconds with nothing asked, as a percentage of one core.
// Prints one line per phase:
//   phase=base processes=0 groups=0 inventory_p50_us=.. inventory_p99_us=.. pick_p50_us=..
//   pick_p99_us=.. idle_cpu_pct=..
// Usage: group_leases_driver --host_root=DIR (a host with more GPUs than --groups)
//        [--processes=10000] [--groups=8] [--calls=200] [--idle_seconds=5]
//        [--daemon=PATH] (another devplaced binary, e.g. an older build, for a before/after pair)
// Exit status 1 when a phase fails (its reason on stderr), 2 on bad usage.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/proc_status.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/daemon_process.h"

namespace devplace {
namespace {

using testing::DaemonProcess;

struct Options {
  std::string host_root;
  int processes = 10000;
  int groups = 8;
  int calls = 200;
  int idle_seconds = 5;
  std::string daemon;
};

// Children that pause until killed (they die with this driver: PR_SET_PDEATHSIG).
std::vector<pid_t> StartIdleProcesses(int n) {
  std::vector<pid_t> pids;
  pids.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {  // async-signal-safe calls only: this process has threads
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (;;) pause();
    }
    if (pid < 0) {
      perror("fork");
      break;
    }
    pids.push_back(pid);
  }
  return pids;
}

// `devplace run -- sh -c 'sleep 3600 & exit 0'`: the run ends, its job keeps the group's lease.
// The run's pid (the group's id), or -1.
pid_t LeaveGroupLease(const std::string& unix_target) {
  const std::string address = "--address=" + unix_target;
  const pid_t run = fork();
  if (run == 0) {
    // --no_environment: the fixture host's GPUs are not this machine's /dev nodes.
    execl(DEVPLACE_CLI_BINARY, "devplace", address.c_str(), "run", "--no_environment", "--", "/bin/sh", "-c",
          "sleep 3600 & exit 0", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (run < 0 || waitpid(run, &status, 0) != run || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return run;
}

int64_t Percentile(std::vector<int64_t> us, double p) {
  if (us.empty()) return -1;
  std::sort(us.begin(), us.end());
  return us[std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())))];
}

bool Phase(const Options& o, const char* name, int processes, int groups) {
  char tmpl[] = "/tmp/devplace-groups-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<std::string> prefix;
  // DaemonProcess runs its own devplaced; a shell in front swaps in the one asked for.
  if (!o.daemon.empty()) prefix = {"/bin/sh", "-c", "shift; exec \"$DEVPLACE_OTHER_DAEMON\" \"$@\"", "sh"};
  if (!o.daemon.empty()) setenv("DEVPLACE_OTHER_DAEMON", o.daemon.c_str(), 1);
  DaemonProcess daemon(dir, {"--host_root=" + o.host_root}, prefix);
  if (!daemon.WaitForLog("event=inventory revision=1", absl::Seconds(60))) {
    fprintf(stderr, "%s: devplaced did not read its inventory; its log:\n%s\n", name, daemon.Log().c_str());
    return false;
  }
  const std::vector<pid_t> idle = StartIdleProcesses(processes);
  std::vector<pid_t> runs;
  for (int g = 0; g < groups; ++g) {
    const pid_t run = LeaveGroupLease(daemon.unix_target());
    if (run < 0) {
      fprintf(stderr, "%s: devplace run failed; the daemon's log:\n%s\n", name, daemon.Log().c_str());
      break;
    }
    runs.push_back(run);
  }
  auto stub = v1::DevicePlacement::NewStub(grpc::CreateChannel(daemon.unix_target(), grpc::InsecureChannelCredentials()));
  std::vector<int64_t> inventory_us, pick_us;
  bool ok = static_cast<int>(runs.size()) == groups && static_cast<int>(idle.size()) == processes;
  for (int i = 0; ok && i < o.calls; ++i) {
    grpc::ClientContext ictx;
    v1::Inventory inventory;
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = stub->GetInventory(&ictx, {}, &inventory);
    auto t1 = std::chrono::steady_clock::now();
    inventory_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
    if (!s.ok() || inventory.leases_size() != groups) {
      fprintf(stderr, "%s: GetInventory: %s (%d leases, %d expected)\n", name, s.error_message().c_str(),
              inventory.leases_size(), groups);
      ok = false;
      break;
    }
    v1::PickDevicesRequest pick;
    pick.set_holder(v1::LEASE_HOLDER_TTL);
    pick.set_ttl_ms(60000);
    grpc::ClientContext pctx;
    v1::PickDevicesResponse picked;
    t0 = std::chrono::steady_clock::now();
    s = stub->PickDevices(&pctx, pick, &picked);
    t1 = std::chrono::steady_clock::now();
    pick_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
    if (!s.ok()) {
      fprintf(stderr, "%s: PickDevices: %s\n", name, s.error_message().c_str());
      ok = false;
      break;
    }
    v1::LeaseReleaseRequest release;
    release.set_lease_id(picked.lease().lease_id());
    grpc::ClientContext rctx;
    v1::LeaseReleaseResponse released;
    (void)stub->LeaseRelease(&rctx, release, &released);
  }
  const double cpu_before = CpuSeconds(daemon.pid());
  const absl::Time idle_from = absl::Now();
  absl::SleepFor(absl::Seconds(o.idle_seconds));
  const double idle_cpu_pct =
      100.0 * (CpuSeconds(daemon.pid()) - cpu_before) / absl::ToDoubleSeconds(absl::Now() - idle_from);
  if (ok) {
    printf("phase=%s processes=%d groups=%d inventory_p50_us=%lld inventory_p99_us=%lld pick_p50_us=%lld "
           "pick_p99_us=%lld idle_cpu_pct=%.3f\n",
           name, processes, groups, static_cast<long long>(Percentile(inventory_us, 0.5)),
           static_cast<long long>(Percentile(inventory_us, 0.99)), static_cast<long long>(Percentile(pick_us, 0.5)),
           static_cast<long long>(Percentile(pick_us, 0.99)), idle_cpu_pct);
    fflush(stdout);
  }
  for (const pid_t run : runs) {
    kill(-run, SIGKILL);  // the job the run left in its group: this driver's child now (a subreaper)
    while (waitpid(-run, nullptr, 0) > 0) {
    }
  }
  for (const pid_t pid : idle) kill(pid, SIGKILL);
  for (const pid_t pid : idle) waitpid(pid, nullptr, 0);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return ok;
}

bool Flag(const std::string& arg, const std::string& name, std::string* value) {
  if (!absl::StartsWith(arg, "--" + name + "=")) return false;
  *value = arg.substr(name.size() + 3);
  return true;
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) {
  devplace::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string v;
    bool good = true;
    if (devplace::Flag(arg, "host_root", &v)) {
      o.host_root = v;
    } else if (devplace::Flag(arg, "processes", &v)) {
      good = absl::SimpleAtoi(v, &o.processes) && o.processes >= 0;
    } else if (devplace::Flag(arg, "groups", &v)) {
      good = absl::SimpleAtoi(v, &o.groups) && o.groups >= 0;
    } else if (devplace::Flag(arg, "calls", &v)) {
      good = absl::SimpleAtoi(v, &o.calls) && o.calls > 0;
    } else if (devplace::Flag(arg, "idle_seconds", &v)) {
      good = absl::SimpleAtoi(v, &o.idle_seconds) && o.idle_seconds > 0;
    } else if (devplace::Flag(arg, "daemon", &v)) {
      o.daemon = v;
    } else {
      good = false;
    }
    if (!good) {
      fprintf(stderr,
              "group_leases_driver: %s: accepted: --host_root=DIR --processes=N (>= 0) --groups=N (>= 0) "
              "--calls=N (> 0) --idle_seconds=N (> 0) --daemon=PATH\n",
              arg.c_str());
      return 2;
    }
  }
  if (o.host_root.empty()) {
    fprintf(stderr, "group_leases_driver: --host_root=DIR is required (a host with more GPUs than --groups)\n");
    return 2;
  }
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // the jobs the runs leave behind are this driver's to reap
  signal(SIGPIPE, SIG_IGN);
  const bool base = devplace::Phase(o, "base", 0, 0);
  const bool loaded = devplace::Phase(o, "loaded", o.processes, o.groups);
  return base && loaded ? 0 : 1;
}
