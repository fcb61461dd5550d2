// The probers: each reads one source of hardware facts through a HostRoot and records what it
// finds in HostFacts. RunProbers runs them all in order, times each and turns its outcome into a
// v1::ProbeReport; a prober that fails is reported as PROBE_STATUS_ERROR and the others still run
// (whatever a failing prober recorded before failing is kept). Vendor-library probers (NVML) run
// after them, each in its own child process under a deadline (see VendorProber).
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
};

// Runs `probers` (default: AllProbers()) against `root`. Never fails: errors are in the reports.
ProbeRun RunProbers(const HostRoot& root);
ProbeRun RunProbers(const HostRoot& root, const std::vector<Prober>& probers);

// The vendor library call a vendor prober is in, shared with the process that waits for it, so a
// timeout or crash report can name the call that did not return. The runner places it in memory
// shared with the prober's child process; Enter copies the name (at most 95 bytes are kept).
class VendorCall {
 public:
  // `call` names the library function (e.g. "nvmlDeviceGetMemoryInfo"); `device` the vendor's
  // device index, or -1 for a system-wide call.
  void Enter(const char* call, int device = -1);
  // "nvmlDeviceGetMemoryInfo (device 1)", "nvmlInit_v2", or "no call yet".
  std::string Describe() const;

 private:
  static constexpr size_t kMaxName = 96;
  std::atomic<char> name_[kMaxName] = {};
  std::atomic<int> device_{-1};
};

// What a vendor prober's reading step hands back: applies what it read to the facts, on the
// caller's thread, and says what was found (or fails, as a Prober does).
using VendorMerge = std::function<absl::StatusOr<ProbeOutcome>(HostFacts& facts)>;

// A prober that calls into a vendor management library through dlopen. A library call can hang
// (NVML on a GPU that fell off the bus) or crash (a wrong ABI guess), so each vendor prober runs
// in its own short-lived child process (vendor_process.h): `read` gets the child's copy of the
// facts gathered by the sysfs/procfs probers, reads the library, and returns the merge, which the
// child runs on its copy; what the merge changed is sent back and applied. The runner waits up to
// ProbeOptions::vendor_timeout: a child that has not finished is killed and the prober reported
// PROBE_STATUS_TIMED_OUT naming the call in progress; one that died of a signal is
// PROBE_STATUS_CRASHED naming the signal and the call; nothing of either is merged. `read` and
// the merge run in the child: they must not rely on changing the caller's memory.
struct VendorProber {
  std::string name;  // ProbeReport.name, e.g. "nvml"
  std::function<VendorMerge(const HostFacts& facts, VendorCall& call)> read;
};

// Which vendor probers run, and their deadline.
struct ProbeOptions {
  // Path or soname of NVML, passed to dlopen; empty: the NVML prober does not run (no report).
  std::string nvml_library;
  // Path or soname of libcuda (the "cuda" prober: the CUDA runtime's enumeration order, see
  // cuda_prober.h); empty: the prober does not run (no report).
  std::string cuda_library;
  // Path or soname of AMD SMI (libamd_smi.so); empty: the amd_smi prober does not run.
  std::string amd_smi_library;
  // Path or soname of the Level Zero loader (libze_loader.so.1); empty: level_zero does not run.
  std::string level_zero_library;
  // Paths or sonames of HLML (Gaudi), DCMI (Ascend), CNDev (Cambricon) and MTML (Moore Threads);
  // empty: that prober does not run (accel_library.h).
  std::string hlml_library, dcmi_library, cndev_library, mtml_library;
  // Deadline of the vendor probers, which run at once (from their start to their merge).
  std::chrono::milliseconds vendor_timeout{5000};
};

// RunProbers(root), then the vendor probers that `options` enables (in order: nvml, cuda, amd_smi,
// level_zero, hlml, dcmi, cndev, mtml), all at once, each in its own process under
// options.vendor_timeout (RunVendorProbers).
ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options);

// Runs `probers` at once, each in its own child process under `timeout`, and appends their
// reports to `run` in order (vendor_process.h says what each outcome means).
void RunVendorProbers(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout, ProbeRun& run);
// RunVendorProbers with one prober.
void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run);

// torch.backends.cpu.get_cpu_capability() for a CPU with these /proc/cpuinfo features:
// x86_64 "AVX512" (avx512f+bw+vl+dq), "AVX2" (avx2+fma), else "NO AVX"; aarch64 "SVE256" when
// sve is present, else "DEFAULT"; other architectures "DEFAULT".
std::string TorchCpuCapability(absl::string_view architecture, const std::set<std::string>& features);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_PROBERS_H_
