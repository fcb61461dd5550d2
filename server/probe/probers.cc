#include "server/probe/probers.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/probe/cuda_prober.h"
#include "server/probe/amdsmi_prober.h"
#include "server/probe/level_zero_prober.h"
#include "server/probe/accel_library.h"
#include "server/probe/nvml_prober.h"
#include "server/probe/prober_util.h"
#include "server/probe/vendor_process.h"

namespace devplace::probe {

const std::vector<Prober>& AllProbers() {
  static const std::vector<Prober>* probers = new std::vector<Prober>{
      {"host", ProbeHostIdentity},
      {"memory", ProbeMemory},
      {"cpu", ProbeCpu},
      {"numa", ProbeNuma},
      {"pci", ProbePci},
      {"modules", ProbeModules},
      {"nvidia_proc", ProbeNvidiaProc},
      {"amd", ProbeAmd},
      {"neuron", ProbeNeuron},
      {"tpu", ProbeTpu},
      {"hpu", ProbeHpu},
      {"npu", ProbeNpu},
      {"mlu", ProbeMlu},
      {"musa", ProbeMusa},
      {"drm", ProbeDrm},
      {"dev_nodes", ProbeDeviceNodes},
  };
  return *probers;
}

ProbeRun RunProbers(const HostRoot& root) { return RunProbers(root, AllProbers()); }

namespace {

uint32_t MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
}

// Appends the report of a prober that finished with `outcome`.
void Report(ProbeRun& run, absl::string_view name, std::chrono::steady_clock::time_point start,
            const absl::StatusOr<ProbeOutcome>& outcome) {
  v1::ProbeReport& report = run.reports.emplace_back();
  report.set_name(std::string(name));
  report.set_duration_ms(MillisecondsSince(start));
  if (outcome.ok()) {
    report.set_status(outcome->skipped ? v1::PROBE_STATUS_SKIPPED : v1::PROBE_STATUS_OK);
    report.set_message(outcome->message);
  } else {
    report.set_status(v1::PROBE_STATUS_ERROR);
    report.set_message(std::string(outcome.status().message()));
  }
}

}  // namespace

ProbeRun RunProbers(const HostRoot& root, const std::vector<Prober>& probers) {
  ProbeRun run;
  for (const Prober& prober : probers) {
    const auto start = std::chrono::steady_clock::now();
    const absl::StatusOr<ProbeOutcome> outcome = prober.run(root, run.facts);
    Report(run, prober.name, start, outcome);
  }
  return run;
}

void VendorCall::Enter(const char* call, int device) {
  device_.store(device, std::memory_order_relaxed);
  size_t i = 0;
  for (; call != nullptr && call[i] != '\0' && i + 1 < kMaxName; ++i) name_[i].store(call[i], std::memory_order_relaxed);
  name_[i].store('\0', std::memory_order_release);
}

std::string VendorCall::Describe() const {
  std::string call;
  for (size_t i = 0; i < kMaxName; ++i) {
    const char c = name_[i].load(std::memory_order_acquire);
    if (c == '\0') break;
    call.push_back(c);
  }
  if (call.empty()) return "no call yet";
  const int device = device_.load(std::memory_order_relaxed);
  return device < 0 ? call : absl::StrCat(call, " (device ", device, ")");
}

void RunVendorProbers(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout, ProbeRun& run) {
  RunVendorProbersIsolated(probers, timeout, run);
}

void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run) {
  RunVendorProbers({prober}, timeout, run);
}

ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options) {
  ProbeRun run = RunProbers(root);
  std::vector<VendorProber> vendor;
  if (!options.nvml_library.empty()) vendor.push_back(NvmlProber(options.nvml_library));
  if (!options.cuda_library.empty()) vendor.push_back(CudaProber(options.cuda_library, options.vendor_timeout));
  if (!options.amd_smi_library.empty()) vendor.push_back(AmdSmiProber(options.amd_smi_library));
  if (!options.level_zero_library.empty()) vendor.push_back(LevelZeroProber(options.level_zero_library));
  for (VendorProber& prober : AcceleratorLibraryProbers(options)) vendor.push_back(std::move(prober));
  RunVendorProbers(vendor, options.vendor_timeout, run);
  return run;
}

}  // namespace devplace::probe
