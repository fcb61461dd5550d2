// Process isolation for vendor-library probers. Each VendorProber runs in
// its own short-lived child process, forked from devplace-probe once the sysfs/procfs probers have
// run: the child calls the prober's `read` and its merge on its own copy of the facts, then writes
// the facts it ended with back through a pipe and exits. The parent applies what the child changed
// (field by field, see ApplyVendorChanges) and reports the prober. A library that crashes the child
// (SIGSEGV, SIGABRT, a wrong ABI guess), never returns, or exits costs only that prober's data.
//
// Not part of the probers' API: vendor_prober.h (RunVendorProbers) calls it.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROCESS_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROCESS_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// Runs every prober of `probers` at once, each in its own child process forked from the current
// state of `run.facts` (so a vendor prober sees the sysfs/procfs facts, not another vendor
// prober's results), each under `timeout` from the common start. Appends one report per prober,
// in the order of `probers`, and applies the finished children's changes in that order (when two
// probers set the same field of the same device, the later one in `probers` wins):
//   OK / SKIPPED / ERROR  as the prober itself returned (an ERROR keeps what it merged first);
//   TIMED_OUT  not finished by `timeout`: the child is killed (SIGKILL) and the message names the
//              vendor call in progress ("... nvmlDeviceGetMemoryInfo (device 1) did not return");
//   CRASHED    the child died of a signal: the message names it and the call in progress
//              ("killed by signal SIGSEGV (Segmentation fault) in amdsmi_get_gpu_memory_usage
//              (device 0)");
//   ERROR      the child exited without a result (a library called exit()), wrote one that does
//              not parse, or could not be started (fork/pipe failed).
// Nothing of a timed-out, crashed or result-less prober is merged. A child writes nothing to
// devplace-probe's stdout (its stdout is redirected to stderr) and dies with devplace-probe
// (PR_SET_PDEATHSIG), so a hung library never outlives the probe.
// Forking copies only the calling thread: call it where no other thread may hold a lock the
// child needs (devplace-probe and `devplace probe` are single-threaded here); a child that blocks
// anyway is killed at `timeout` like a hung library. Measured on the dev machine: a run of
// devplace-probe with one vendor prober costs ~5 ms more than without (fork, pipe, facts round
// trip); two never-returning libraries cost one deadline together, not two. `ends_by`, when
// earlier than now + `timeout`, is the deadline instead (the whole probe's, probers.h); messages
// still name `timeout` as the --probe_timeout.
void RunVendorProbersIsolated(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout,
                              ProbeRun& run,
                              std::chrono::steady_clock::time_point ends_by = std::chrono::steady_clock::time_point::max());

// The wire form of HostFacts between a vendor child and devplace-probe (exposed for tests).
std::string EncodeFacts(const HostFacts& facts);
absl::StatusOr<HostFacts> DecodeFacts(const std::string& bytes);

// Applies to `target` what changed from `before` to `after`: per accelerator function (by bus
// id) each v1::Device field that differs (a repeated or map field as a whole), the other
// PciFunction members that differ; functions only in `after` are added; functions missing from
// `after` are kept (a vendor prober never drops a device sysfs found). Driver versions and
// backend attributes per key; v1::Host per field.
void ApplyVendorChanges(const HostFacts& before, const HostFacts& after, HostFacts& target);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROCESS_H_
