#include "server/probe/probers.h"

#include <chrono>

#include "server/probe/prober_util.h"

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

ProbeRun RunProbers(const HostRoot& root, const std::vector<Prober>& probers) {
  ProbeRun run;
  for (const Prober& prober : probers) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ProbeOutcome> outcome = prober.run(root, run.facts);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    v1::ProbeReport& report = run.reports.emplace_back();
    report.set_name(std::string(prober.name));
    report.set_duration_ms(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
    if (outcome.ok()) {
      report.set_status(outcome->skipped ? v1::PROBE_STATUS_SKIPPED : v1::PROBE_STATUS_OK);
      report.set_message(outcome->message);
    } else {
      report.set_status(v1::PROBE_STATUS_ERROR);
      report.set_message(std::string(outcome.status().message()));
    }
  }
  return run;
}

}  // namespace devplace::probe
