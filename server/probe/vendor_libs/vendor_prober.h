// Vendor-library probers: a prober that reads a vendor management library (one of the registry's,
// server/common/vendor_libraries.h) through dlopen, after the host probers, each in its own child
// process under a deadline (vendor_process.h); which of them run (ProbeOptions) and each registered
// library's prober factory.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROBER_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROBER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/vendor_libraries.h"
#include "server/probe/host/facts.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {

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

// What a vendor prober's reading step hands back: applies what it read to the facts (in the
// prober's child process, on its copy; see VendorProber) and says what was found (or fails, as a
// Prober does).
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
  // The row the library completes (it is skipped when the PCI scan found none); ROW_UNSPECIFIED
  // when it says so itself. A usage refresh (ProbeOptions::usage_only) runs no process for a
  // prober whose row is absent.
  v1::Row row = v1::ROW_UNSPECIFIED;
};

// Which vendor probers run, and their deadline. The base holds one path or soname per registered
// library (nvml_library, cuda_library, ...), passed to dlopen by its prober; empty (the default):
// that prober does not run (no report).
struct ProbeOptions : VendorLibraryPaths {
  // Deadline of the whole probe (--probe_timeout): RunProbers(root, options) gives the vendor
  // probers, which run at once, what the host probers left of it.
  std::chrono::milliseconds vendor_timeout{5000};
  // devplaced's usage refresh (devplace-probe --usage_only): only the libraries that report
  // memory (a registry memory_source) run, and they may skip what does not move (NVML's driver
  // and CUDA driver versions).
  bool usage_only = false;
  // The sysfs the vendor libraries themselves read: this process's /sys, which --host_root does
  // not move (a real library knows nothing of it). A prober that checks it before loading its
  // library (ROCm SMI, for the KFD topology) looks here. No flag sets it: the probe tests that load
  // a fake library on a fixture host name the fixture's sys/ directory.
  std::string library_sysfs = "/sys";
};

// Each registered library's prober factory, prober_factory::<name>(library, options) (nvml,
// cuda, ...), defined in its <lib>_prober.cc: the VendorProber named <name> that reads `library`
// (a non-empty dlopen path or soname) under `options`' deadline.
namespace prober_factory {
#define DEVPLACE_DECLARE_PROBER_FACTORY(name, ...) \
  VendorProber name(std::string library, const ProbeOptions& options);
DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_DECLARE_PROBER_FACTORY)
#undef DEVPLACE_DECLARE_PROBER_FACTORY
}  // namespace prober_factory

// The probers of the libraries `options` names (a non-empty path), in the registry's order; with
// options.usage_only, only those with a memory_source.
std::vector<VendorProber> VendorProbers(const ProbeOptions& options);

// Runs `probers` at once, each in its own child process under `timeout`, and appends their
// reports to `run` in order (vendor_process.h says what each outcome means).
// `ends_by`, when earlier than now + `timeout`, is their deadline instead (the whole probe's).
void RunVendorProbers(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout, ProbeRun& run,
                      std::chrono::steady_clock::time_point ends_by = std::chrono::steady_clock::time_point::max());
// RunVendorProbers with one prober.
void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_PROBER_H_
