// The probers: each reads one source of hardware facts through a HostRoot and records what it
// finds in HostFacts. RunProbers runs them all in order, times each and turns its outcome into a
// v1::ProbeReport; a prober that fails is reported as PROBE_STATUS_ERROR and the others still run
// (whatever a failing prober recorded before failing is kept). Vendor-library probers (NVML) run
// after them, each on its own thread under a deadline (see VendorProber).
#ifndef DEVPLACE_SERVER_PROBE_PROBERS_H_
#define DEVPLACE_SERVER_PROBE_PROBERS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/facts.h"
#include "server/probe/host_root.h"

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
};

// Every prober, in run order: host, memory, cpu, numa, pci, modules, nvidia_proc, amd, neuron,
// tpu, hpu, npu, mlu, musa, drm, dev_nodes. Vendor probers need the pci scan's functions; later
// driver-version sources (/proc files, sysfs attributes) override `modules`' guesses; drm adds
// the DRM nodes after each row's own node; dev_nodes checks the nodes every earlier prober listed.
const std::vector<Prober>& AllProbers();

// The facts and the per-prober reports of one run.
struct ProbeRun {
  HostFacts facts;
  std::vector<v1::ProbeReport> reports;  // in run order; duration_ms is wall time
  // A vendor prober timed out: its thread is still inside the vendor library, which stays
  // loaded. A program should end with _exit() once its output is written (exit() would run
  // static destructors under that thread).
  bool abandoned_thread = false;
};

// Runs `probers` (default: AllProbers()) against `root`. Never fails: errors are in the reports.
ProbeRun RunProbers(const HostRoot& root);
ProbeRun RunProbers(const HostRoot& root, const std::vector<Prober>& probers);

// The vendor library call a vendor prober is in, shared with the thread that waits for it, so a
// timeout report can name the call that did not return.
class VendorCall {
 public:
  // `call` must be a string literal (e.g. "nvmlDeviceGetMemoryInfo"); `device` the vendor's
  // device index, or -1 for a system-wide call.
  void Enter(const char* call, int device = -1) {
    device_.store(device);
    call_.store(call);
  }
  // "nvmlDeviceGetMemoryInfo (device 1)", "nvmlInit_v2", or "no call yet".
  std::string Describe() const;

 private:
  std::atomic<const char*> call_{nullptr};
  std::atomic<int> device_{-1};
};

// What a vendor prober's reading step hands back: applies what it read to the facts, on the
// caller's thread, and says what was found (or fails, as a Prober does).
using VendorMerge = std::function<absl::StatusOr<ProbeOutcome>(HostFacts& facts)>;

// A prober that calls into a vendor management library through dlopen. A library call can hang
// (NVML on a GPU that fell off the bus), so `read` runs on its own thread with a private copy of
// the facts gathered so far, keeps what it reads private, and returns the merge. The caller
// waits up to ProbeOptions::vendor_timeout: on time it runs the merge; otherwise the prober is
// reported PROBE_STATUS_TIMED_OUT naming the call in progress, nothing of it is merged, and the
// thread is abandoned (ProbeRun::abandoned_thread).
struct VendorProber {
  std::string name;  // ProbeReport.name, e.g. "nvml"
  std::function<VendorMerge(const HostFacts& facts, VendorCall& call)> read;
};

// Which vendor probers run, and their deadline.
struct ProbeOptions {
  // Path or soname of NVML, passed to dlopen; empty: the NVML prober does not run (no report).
  std::string nvml_library;
  // Paths or sonames of HLML (Gaudi), DCMI (Ascend), CNDev (Cambricon) and MTML (Moore Threads);
  // empty: that prober does not run (accel_library.h).
  std::string hlml_library, dcmi_library, cndev_library, mtml_library;
  // Deadline of each vendor prober (from its start to its merge).
  std::chrono::milliseconds vendor_timeout{5000};
};

// RunProbers(root), then the vendor probers that `options` enables (in order: nvml, hlml, dcmi,
// cndev, mtml), each after
// the previous one finished or timed out.
ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options);

// Runs one vendor prober under `timeout` and appends its report to `run`.
void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run);

// torch.backends.cpu.get_cpu_capability() for a CPU with these /proc/cpuinfo features:
// x86_64 "AVX512" (avx512f+bw+vl+dq), "AVX2" (avx2+fma), else "NO AVX"; aarch64 "SVE256" when
// sve is present, else "DEFAULT"; other architectures "DEFAULT".
std::string TorchCpuCapability(absl::string_view architecture, const std::set<std::string>& features);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_PROBERS_H_
