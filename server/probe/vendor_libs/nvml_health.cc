#include "server/probe/vendor_libs/nvml_health.h"

#include <dlfcn.h>

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/vendor_libs/nvml_prober.h"

namespace devplace::probe {
namespace {

// One ECC total: which errors, over which span, and the rule (docs/PROBE.md "Device health").
struct EccTotal {
  const char* name;
  nvmlMemoryErrorType_t type;
  nvmlEccCounterType_t span;
  const char* arguments;
  v1::Health if_nonzero;
  const char* rule;
};

// Uncorrectable errors since the driver loaded lost data in the GPU's memory: FAULT (DCGM's memory
// health watch fails a GPU on a volatile double-bit error). The lifetime totals and the corrected
// errors are raw counts: lifetime errors were contained by page retirement or row remapping, and
// corrected ones by the hardware.
constexpr EccTotal kEccTotals[] = {
    {"ecc.errors.uncorrected.volatile.total", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
     "NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC", v1::HEALTH_FAULT,
     "uncorrectable ECC errors since the driver loaded: data in the GPU's memory was lost; reset the GPU"},
    {"ecc.errors.uncorrected.aggregate.total", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC,
     "NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC", v1::HEALTH_OK,
     "uncorrectable ECC errors over the GPU's life, contained by page retirement or row remapping (a raw count, "
     "never a health change)"},
    {"ecc.errors.corrected.volatile.total", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
     "NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC", v1::HEALTH_OK,
     "corrected ECC errors since the driver loaded, corrected by the hardware (a raw count, never a health change)"},
    {"ecc.errors.corrected.aggregate.total", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
     "NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC", v1::HEALTH_OK,
     "corrected ECC errors over the GPU's life (a raw count, never a health change)"},
};

// One clocks-event reason: its bit, and what it means while active (nvml.h's descriptions).
struct ClocksReason {
  const char* name;
  unsigned long long bit;
  v1::Health if_active;
  const char* rule;
};

// A slowdown the GPU did not choose for its load is DEGRADED: usable, slower. Holding the power
// limit is what a GPU under full load does: a note.
constexpr ClocksReason kClocksReasons[] = {
    {"clocks_event_reasons.hw_slowdown", nvmlClocksThrottleReasonHwSlowdown, v1::HEALTH_DEGRADED,
     "hardware slowdown: core clocks cut by half or more (temperature, the power brake, or power draw too high)"},
    {"clocks_event_reasons.hw_thermal_slowdown", nvmlClocksThrottleReasonHwThermalSlowdown, v1::HEALTH_DEGRADED,
     "hardware thermal slowdown: core clocks cut by half or more, the GPU too hot"},
    {"clocks_event_reasons.sw_thermal_slowdown", nvmlClocksEventReasonSwThermalSlowdown, v1::HEALTH_DEGRADED,
     "software thermal slowdown: clocks lowered, the GPU or its memory above its maximum operating temperature"},
    {"clocks_event_reasons.hw_power_brake_slowdown", nvmlClocksThrottleReasonHwPowerBrakeSlowdown, v1::HEALTH_DEGRADED,
     "power brake slowdown: core clocks cut by half or more, the power brake asserted by the system's power supply"},
    {"clocks_event_reasons.sw_power_cap", nvmlClocksEventReasonSwPowerCap, v1::HEALTH_OK,
     "clocks held under the power limit, as under full load (a note, not a health change)"},
};

class HealthReader {
 public:
  HealthReader(NvmlHealthTarget target, LibraryStatus& status, std::vector<std::string>& notes)
      : target_(target), status_(status), notes_(notes) {}

  void Add(const char* name, std::string value, std::string source, v1::Health effect, std::string rule) {
    if (target_.counters.size() >= static_cast<size_t>(kMaxHealthCounters)) return;
    v1::HealthCounter& c = target_.counters.emplace_back();
    c.set_name(name);
    c.set_value(std::move(value));
    c.set_source(std::move(source));
    c.set_effect(effect);
    c.set_rule(std::move(rule));
  }

  // The counters `names` are unknown: "unknown: <why>".
  void Unknown(absl::Span<const char* const> names, const std::string& source, const std::string& why) {
    for (const char* name : names) Add(name, "", source, v1::HEALTH_UNSPECIFIED, absl::StrCat("unknown: ", why));
  }

  // Makes one call unless the GPU is lost: true when it answered NVML_SUCCESS. Otherwise the
  // counters `names` are unknown; a lost GPU is marked lost, and an error other than
  // NOT_SUPPORTED is also a note.
  template <typename Fn>
  bool Call(const char* call, const std::string& source, absl::Span<const char* const> names, Fn fn) {
    if (!target_.lost.empty()) return false;
    status_.call().Enter(call, target_.index);
    const nvmlReturn_t r = fn();
    if (r == NVML_SUCCESS) return true;
    if (r == NVML_ERROR_GPU_IS_LOST) {
      status_.DeviceResult({target_.index, target_.bus_id, target_.lost}, call, r);
      return false;
    }
    const bool unsupported = r == NVML_ERROR_NOT_SUPPORTED;
    Unknown(names, source, absl::StrCat(NvmlReturnName(r), unsupported ? " (this GPU does not offer it)" : ""));
    if (!unsupported) {
      notes_.push_back(absl::StrCat(target_.bus_id, ": ", call, ": ", NvmlReturnName(r),
                                    " (its health counters unknown, not a health change)"));
    }
    return false;
  }

  void ReadEcc(const NvmlHealthCalls& calls, nvmlDevice_t device) {
    for (const EccTotal& total : kEccTotals) {
      const std::string source = absl::StrCat("NVML nvmlDeviceGetTotalEccErrors(", total.arguments, ")");
      if (calls.total_ecc == nullptr) {
        Unknown({total.name}, source, "the library lacks nvmlDeviceGetTotalEccErrors");
        continue;
      }
      unsigned long long count = 0;
      if (!Call("nvmlDeviceGetTotalEccErrors", source, {total.name},
                [&] { return calls.total_ecc(device, total.type, total.span, &count); })) {
        continue;
      }
      Add(total.name, absl::StrCat(count), source, count > 0 ? total.if_nonzero : v1::HEALTH_OK, total.rule);
    }
  }

  // Pages pending retirement are retired only when the GPU is reset or the driver reloads (NVIDIA's
  // dynamic page retirement guide): until then the GPU needs a reset, FAULT.
  void ReadRetiredPages(const NvmlHealthCalls& calls, nvmlDevice_t device) {
    constexpr char kName[] = "retired_pages.pending";
    const std::string source = "NVML nvmlDeviceGetRetiredPagesPendingStatus";
    if (calls.retired_pages_pending == nullptr) {
      return Unknown({kName}, source, "the library lacks nvmlDeviceGetRetiredPagesPendingStatus");
    }
    nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
    if (!Call("nvmlDeviceGetRetiredPagesPendingStatus", source, {kName},
              [&] { return calls.retired_pages_pending(device, &pending); })) {
      return;
    }
    const bool yes = pending == NVML_FEATURE_ENABLED;
    Add(kName, yes ? "1" : "0", source, yes ? v1::HEALTH_FAULT : v1::HEALTH_OK,
        yes ? "pages are pending retirement: they are retired when the GPU is reset (reset required)"
            : "no page is pending retirement");
  }

  // A pending remap takes effect at the next reset (reset required: FAULT); a failed remap means
  // the memory had no spare row for the error (NVIDIA's memory error management guide: the GPU
  // needs service): FAULT. The remapped rows themselves are raw counts.
  void ReadRemappedRows(const NvmlHealthCalls& calls, nvmlDevice_t device) {
    constexpr char kCorrectable[] = "remapped_rows.correctable", kUncorrectable[] = "remapped_rows.uncorrectable",
                   kPending[] = "remapped_rows.pending", kFailure[] = "remapped_rows.failure";
    const std::string source = "NVML nvmlDeviceGetRemappedRows";
    const char* const names[] = {kCorrectable, kUncorrectable, kPending, kFailure};
    if (calls.remapped_rows == nullptr) return Unknown(names, source, "the library lacks nvmlDeviceGetRemappedRows");
    unsigned int correctable = 0, uncorrectable = 0, pending = 0, failure = 0;
    if (!Call("nvmlDeviceGetRemappedRows", source, names,
              [&] { return calls.remapped_rows(device, &correctable, &uncorrectable, &pending, &failure); })) {
      return;
    }
    Add(kCorrectable, absl::StrCat(correctable), source, v1::HEALTH_OK,
        "rows remapped for correctable errors, spare rows in use (a raw count, never a health change)");
    Add(kUncorrectable, absl::StrCat(uncorrectable), source, v1::HEALTH_OK,
        "rows remapped for uncorrectable errors, spare rows in use (a raw count, never a health change)");
    Add(kPending, pending != 0 ? "1" : "0", source, pending != 0 ? v1::HEALTH_FAULT : v1::HEALTH_OK,
        pending != 0 ? "rows are pending remapping: the remap takes effect when the GPU is reset (reset required)"
                     : "no row is pending remapping");
    Add(kFailure, failure != 0 ? "1" : "0", source, failure != 0 ? v1::HEALTH_FAULT : v1::HEALTH_OK,
        failure != 0 ? "a row remapping failed: no spare row was left for the error; the GPU needs service"
                     : "no row remapping has failed");
  }

  // The reasons are a reading of the moment (a slowdown ends when the GPU cools): never FAULT.
  void ReadClocks(const NvmlHealthCalls& calls, nvmlDevice_t device) {
    const std::string source = absl::StrCat("NVML ", calls.clocks_call);
    std::vector<const char*> names;
    for (const ClocksReason& reason : kClocksReasons) names.push_back(reason.name);
    if (calls.clocks_event_reasons == nullptr) {
      return Unknown(names, source, "the library lacks nvmlDeviceGetCurrentClocksEventReasons");
    }
    unsigned long long mask = 0;
    if (!Call(calls.clocks_call, source, names, [&] { return calls.clocks_event_reasons(device, &mask); })) return;
    for (const ClocksReason& reason : kClocksReasons) {
      const bool active = (mask & reason.bit) != 0;
      Add(reason.name, active ? "1" : "0", source, active ? reason.if_active : v1::HEALTH_OK,
          active ? absl::StrCat("active: ", reason.rule) : "not active");
    }
  }

 private:
  NvmlHealthTarget target_;
  LibraryStatus& status_;
  std::vector<std::string>& notes_;
};

}  // namespace

void ResolveNvmlHealthCalls(void* library, NvmlHealthCalls& calls, std::vector<std::string>& missing) {
  auto resolve = [&](const char* symbol, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, symbol));
    if (fn == nullptr) missing.emplace_back(symbol);
  };
  resolve("nvmlDeviceGetTotalEccErrors", calls.total_ecc);
  resolve("nvmlDeviceGetRetiredPagesPendingStatus", calls.retired_pages_pending);
  resolve("nvmlDeviceGetRemappedRows", calls.remapped_rows);
  calls.clocks_event_reasons =
      reinterpret_cast<decltype(calls.clocks_event_reasons)>(dlsym(library, "nvmlDeviceGetCurrentClocksEventReasons"));
  if (calls.clocks_event_reasons == nullptr) {
    // Drivers before the Event name: the Throttle name, the same call.
    calls.clocks_call = "nvmlDeviceGetCurrentClocksThrottleReasons";
    resolve(calls.clocks_call, calls.clocks_event_reasons);
  }
}

void ReadNvmlHealth(const NvmlHealthCalls& calls, nvmlDevice_t device, NvmlHealthTarget target, LibraryStatus& status,
                    std::vector<std::string>& notes) {
  HealthReader reader(target, status, notes);
  reader.ReadEcc(calls, device);
  reader.ReadRetiredPages(calls, device);
  reader.ReadRemappedRows(calls, device);
  reader.ReadClocks(calls, device);
}

}  // namespace devplace::probe
