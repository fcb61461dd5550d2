// The host probers' vocabulary and runner: each prober reads one source of hardware facts
// (sysfs, procfs, devfs) through a HostRoot and records what it finds in HostFacts. RunProbers
// runs them in order, times each and turns its outcome into a v1::ProbeReport; a prober that fails
// is reported as PROBE_STATUS_ERROR and the others still run (whatever a failing prober recorded
// before failing is kept). Vendor-library probers build on this in server/probe/vendor_libs/.
#ifndef DEVPLACE_SERVER_PROBE_HOST_PROBER_H_
#define DEVPLACE_SERVER_PROBE_HOST_PROBER_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/host/facts.h"
#include "server/probe/host/host_root.h"

namespace devplace::probe {

// What a prober that did not fail reports: OK with what it found, or SKIPPED with why there was
// nothing to look at (e.g. no /proc/driver/nvidia).
struct ProbeOutcome {
  bool skipped = false;
  std::string message;
};
inline ProbeOutcome Found(std::string message) { return {false, std::move(message)}; }
inline ProbeOutcome Skipped(std::string message) { return {true, std::move(message)}; }

// A prober: records facts, returns its outcome, or an error status whose message says what
// could not be read or parsed.
using ProberFn = absl::StatusOr<ProbeOutcome> (*)(const HostRoot& root, HostFacts& facts);
struct Prober {
  absl::string_view name;  // ProbeReport.name
  ProberFn run;
  // Whether a usage refresh (devplace-probe --usage_only) runs it too: the PCI scan every other
  // prober matches devices by, and each prober that reads what moves between full probes (a
  // device's memory in use, from sysfs). A prober that records Device.memory_free_bytes or
  // Device.usage must be one, or each usage refresh would erase what the full probe read (the
  // daemon merges the usage read over the full probe's inventory: MergeUsage).
  bool reads_usage = false;
};

// Every prober, in run order: host, memory, cpu, numa, pci, modules, nvidia_proc, amd, neuron,
// tpu, hpu, npu, mlu, musa, drm, dev_nodes. Vendor probers need the pci scan's functions; later
// driver-version sources (/proc files, sysfs attributes) override `modules`' guesses; drm adds
// the DRM nodes after each row's own node; dev_nodes checks the nodes every earlier prober listed.
const std::vector<Prober>& AllProbers();
// The probers a usage refresh runs (reads_usage), in the same order: pci, amd, neuron.
const std::vector<Prober>& UsageProbers();

// The facts and the per-prober reports of one run.
struct ProbeRun {
  HostFacts facts;
  std::vector<v1::ProbeReport> reports;  // in run order; duration_ms is wall time
};

// Runs `probers` (default: AllProbers()) against `root`. Never fails: errors are in the reports
// (a prober that runs out of memory, std::bad_alloc, is reported RESOURCE_EXHAUSTED as an error).
ProbeRun RunProbers(const HostRoot& root);
ProbeRun RunProbers(const HostRoot& root, const std::vector<Prober>& probers);

// The name of the host prober RunProbers is running now (any thread may ask), or "" between runs:
// what a watchdog names when a read never returns.
absl::string_view RunningHostProber();

// torch.backends.cpu.get_cpu_capability() for a CPU with these /proc/cpuinfo features:
// x86_64 "AVX512" (avx512f+bw+vl+dq), "AVX2" (avx2+fma), else "NO AVX"; aarch64 "SVE256" when
// sve is present, else "DEFAULT"; other architectures "DEFAULT".
std::string TorchCpuCapability(absl::string_view architecture, const std::set<std::string>& features);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_PROBER_H_
