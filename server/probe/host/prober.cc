#include "server/probe/host/prober.h"

#include <atomic>
#include <chrono>
#include <new>

#include "server/probe/host/prober_util.h"

namespace devplace::probe {

const std::vector<Prober>& AllProbers() {
  static const std::vector<Prober>* probers = new std::vector<Prober>{
      {"host", ProbeHostIdentity},
      {"memory", ProbeMemory},
      {"cpu", ProbeCpu},
      {"numa", ProbeNuma},
      {"pci", ProbePci, /*reads_usage=*/true},
      {"modules", ProbeModules},
      {"nvidia_proc", ProbeNvidiaProc},
      {"amd", ProbeAmd, /*reads_usage=*/true},      // mem_info_vram_used
      {"neuron", ProbeNeuron, /*reads_usage=*/true},  // neuron_core<k> device memory
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

const std::vector<Prober>& UsageProbers() {
  static const std::vector<Prober>* probers = [] {
    auto* kept = new std::vector<Prober>;
    for (const Prober& p : AllProbers()) {
      if (p.reads_usage) kept->push_back(p);
    }
    return kept;
  }();
  return *probers;
}

ProbeRun RunProbers(const HostRoot& root) { return RunProbers(root, AllProbers()); }

namespace {

std::atomic<const char*> g_running{nullptr};

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
    g_running.store(prober.name.data());
    absl::StatusOr<ProbeOutcome> outcome;
    try {
      outcome = prober.run(root, run.facts);
    } catch (const std::bad_alloc&) {  // under the probe's address-space cap (probers.h)
      outcome = absl::ResourceExhaustedError("ran out of memory (the probe's address-space cap); not read");
    }
    Report(run, prober.name, start, outcome);
  }
  g_running.store(nullptr);
  return run;
}

absl::string_view RunningHostProber() {
  const char* name = g_running.load();
  return name == nullptr ? absl::string_view() : absl::string_view(name);
}

}  // namespace devplace::probe
