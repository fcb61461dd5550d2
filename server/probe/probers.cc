#include "server/probe/probers.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/probe/accel_library.h"
#include "server/probe/nvml_prober.h"
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

std::string VendorCall::Describe() const {
  const char* call = call_.load();
  if (call == nullptr) return "no call yet";
  const int device = device_.load();
  return device < 0 ? std::string(call) : absl::StrCat(call, " (device ", device, ")");
}

void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run) {
  // Owned jointly by this function and the prober's thread, which may outlive it.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    VendorMerge merge;
    VendorCall call;
    HostFacts facts;  // the prober's private copy
  };
  const auto start = std::chrono::steady_clock::now();
  auto shared = std::make_shared<Shared>();
  shared->facts = run.facts;
  std::thread thread;
  try {
    thread = std::thread([shared, read = prober.read] {
      VendorMerge merge = read(shared->facts, shared->call);
      const std::lock_guard<std::mutex> lock(shared->mu);
      shared->merge = std::move(merge);
      shared->done = true;
      shared->cv.notify_all();
    });
  } catch (const std::system_error& e) {
    Report(run, prober.name, start, absl::ResourceExhaustedError(absl::StrCat("cannot start a thread: ", e.what())));
    return;
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, timeout, [&shared] { return shared->done; })) {
    lock.unlock();
    thread.detach();  // blocked in the library: never joined, the library never unloaded
    run.abandoned_thread = true;
    v1::ProbeReport& report = run.reports.emplace_back();
    report.set_name(prober.name);
    report.set_status(v1::PROBE_STATUS_TIMED_OUT);
    report.set_duration_ms(MillisecondsSince(start));
    report.set_message(absl::StrCat("gave up after ", timeout.count(), " ms (--probe_timeout): ",
                                    shared->call.Describe(), " did not return; nothing of ", prober.name,
                                    " merged"));
    return;
  }
  const VendorMerge merge = std::move(shared->merge);
  lock.unlock();
  thread.join();  // it has finished: only its return is left
  Report(run, prober.name, start,
         merge ? merge(run.facts) : absl::StatusOr<ProbeOutcome>(absl::InternalError("the prober returned no result")));
}

ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options) {
  ProbeRun run = RunProbers(root);
  if (!options.nvml_library.empty()) RunVendorProber(NvmlProber(options.nvml_library), options.vendor_timeout, run);
  for (const VendorProber& prober : AcceleratorLibraryProbers(options)) RunVendorProber(prober, options.vendor_timeout, run);
  return run;
}

}  // namespace devplace::probe
