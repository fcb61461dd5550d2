// NVML's health counters of one GPU (docs/PROBE.md "Device health", the NVML table: each counter,
// its rule and the rule's source): ECC error totals, pages pending retirement, remapped rows and
// the clocks-event reasons, read in the NVML prober's session (nvml_prober.h) during a full probe.
//
// Every call is optional: a library without it, a GPU that answers NVML_ERROR_NOT_SUPPORTED and
// any other error make its counters unknown (effect HEALTH_UNSPECIFIED, the rule saying why),
// never a health change; an error other than NOT_SUPPORTED is also a note. Only
// NVML_ERROR_GPU_IS_LOST changes the GPU, as for every NVML call (HEALTH_LOST, no later call).
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_HEALTH_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_HEALTH_H_

#include <string>
#include <vector>

#include "devplace/v1/devplace.pb.h"
#include "server/probe/vendor_libs/library_status.h"
#include "server/probe/vendor_libs/nvml_api.h"

namespace devplace::probe {

// The health entry points of a loaded NVML library; null when it lacks one.
struct NvmlHealthCalls {
  decltype(&nvmlDeviceGetTotalEccErrors) total_ecc = nullptr;
  decltype(&nvmlDeviceGetRetiredPagesPendingStatus) retired_pages_pending = nullptr;
  decltype(&nvmlDeviceGetRemappedRows) remapped_rows = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons, else the older nvmlDeviceGetCurrentClocksThrottleReasons
  // (same signature and bits); `clocks_call` names the one found.
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) clocks_event_reasons = nullptr;
  const char* clocks_call = "nvmlDeviceGetCurrentClocksEventReasons";
};

// Looks the calls up in the dlopen handle `library`; each one missing is appended to `missing`.
void ResolveNvmlHealthCalls(void* library, NvmlHealthCalls& calls, std::vector<std::string>& missing);

// The GPU whose counters are read, as the NVML reader holds it.
struct NvmlHealthTarget {
  int index;                  // NVML index, -1 when found by bus id
  const std::string& bus_id;  // canonical
  std::string& lost;          // set when a call says NVML_ERROR_GPU_IS_LOST; no call is made once set
  std::vector<v1::HealthCounter>& counters;
};

// Appends the GPU's counters (names in nvidia-smi's --query-gpu terms, e.g.
// "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending"; values as NVML answered, flags
// and reasons 0 or 1; source "NVML <call>(<arguments>)") to target.counters. Each call is
// announced on status.call() first; notes go to `notes`.
void ReadNvmlHealth(const NvmlHealthCalls& calls, nvmlDevice_t device, NvmlHealthTarget target,
                    LibraryStatus& status, std::vector<std::string>& notes);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_HEALTH_H_
