// The MTML prober (Moore Threads): libmtml.so through dlopen (declarations in mtml_api.h). Reads
// per device: bus id, name, UUID and memory total/used. A device whose calls answer
// MTML_ERROR_DRIVER_FAILURE becomes HEALTH_FAULT with that call in the reason. On full probes it
// also reads the memory object's ECC counts, ECC mode and retired-pages pending flag
// (library_health.h; docs/PROBE.md "Device health", the MTML table).
// mtmlLibraryInit's MTML_ERROR_DRIVER_NOT_LOADED skips the prober.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/library_health.h"
#include "server/probe/vendor_libs/mtml_api.h"
#include "server/probe/host/parsers.h"

namespace devplace::probe {
namespace {

struct Mtml {
  decltype(&mtmlLibraryInit) init = nullptr;
  decltype(&mtmlLibraryShutDown) shutdown = nullptr;
  decltype(&mtmlLibraryCountDevice) count = nullptr;
  decltype(&mtmlLibraryInitDeviceByIndex) by_index = nullptr;
  decltype(&mtmlDeviceGetPciInfo) pci = nullptr;
  decltype(&mtmlDeviceGetName) name = nullptr;
  decltype(&mtmlDeviceGetUUID) uuid = nullptr;
  decltype(&mtmlDeviceInitMemory) memory = nullptr;
  decltype(&mtmlMemoryGetTotal) total = nullptr;
  decltype(&mtmlMemoryGetUsed) used = nullptr;
  decltype(&mtmlMemoryGetEccErrorCounter) ecc_count = nullptr;
  decltype(&mtmlMemoryGetEccMode) ecc_mode = nullptr;
  decltype(&mtmlMemoryGetRetiredPagesPendingStatus) retired_pending = nullptr;
  bool read_health = false;  // full probes only
};

std::string MtmlReturnName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {MTML_SUCCESS, "MTML_SUCCESS"},
      {MTML_ERROR_DRIVER_NOT_LOADED, "MTML_ERROR_DRIVER_NOT_LOADED"},
      {MTML_ERROR_DRIVER_FAILURE, "MTML_ERROR_DRIVER_FAILURE"},
      {MTML_ERROR_INVALID_ARGUMENT, "MTML_ERROR_INVALID_ARGUMENT"},
      {MTML_ERROR_NOT_SUPPORTED, "MTML_ERROR_NOT_SUPPORTED"},
      {MTML_ERROR_NO_PERMISSION, "MTML_ERROR_NO_PERMISSION"},
      {MTML_ERROR_INSUFFICIENT_SIZE, "MTML_ERROR_INSUFFICIENT_SIZE"},
      {MTML_ERROR_NOT_FOUND, "MTML_ERROR_NOT_FOUND"},
      {MTML_ERROR_INSUFFICIENT_MEMORY, "MTML_ERROR_INSUFFICIENT_MEMORY"},
      {MTML_ERROR_DRIVER_TOO_OLD, "MTML_ERROR_DRIVER_TOO_OLD"},
      {MTML_ERROR_DRIVER_TOO_NEW, "MTML_ERROR_DRIVER_TOO_NEW"},
      {MTML_ERROR_TIMEOUT, "MTML_ERROR_TIMEOUT"},
      {MTML_ERROR_RESOURCE_IS_BUSY, "MTML_ERROR_RESOURCE_IS_BUSY"},
      {MTML_ERROR_UNKNOWN, "MTML_ERROR_UNKNOWN"},
  };
  return NamedCode(kNames, "MTML", code);
}

CallResult ClassifyMtml(int code) {
  switch (code) {
    case MTML_SUCCESS: return CallResult::kOk;
    case MTML_ERROR_NOT_SUPPORTED: return CallResult::kNotSupported;
    case MTML_ERROR_NO_PERMISSION: return CallResult::kNoPermission;
    case MTML_ERROR_DRIVER_FAILURE: return CallResult::kFault;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kMtmlErrors = {"MTML", MtmlReturnName, ClassifyMtml};
constexpr LibraryInfo kMtmlInfo = {"mtml", "MTML", v1::ROW_MUSA, "Moore Threads GPU"};

// The DRAM's ECC counts (mtml.h: corrected are single-bit, uncorrected double-bit errors; volatile
// counts restart when the driver loads, aggregate ones last the device's life). An uncorrectable
// error since the driver loaded lost data in the device's memory: FAULT, as NVML's and HLML's
// volatile totals; the others are raw counts.
struct EccCount {
  CounterRule rule;
  MtmlMemoryErrorType type;
  MtmlEccCounterType span;
  const char* arguments;
};
constexpr EccCount kEccCounts[] = {
    {{"ecc.errors.uncorrected.volatile.total", v1::HEALTH_FAULT,
      "uncorrectable ECC errors since the driver loaded: data in the device's memory was lost"},
     MTML_MEMORY_ERROR_TYPE_UNCORRECTED, MTML_VOLATILE_ECC, "MTML_MEMORY_ERROR_TYPE_UNCORRECTED, MTML_VOLATILE_ECC"},
    {{"ecc.errors.uncorrected.aggregate.total", v1::HEALTH_OK,
      "uncorrectable ECC errors over the device's life (a raw count, never a health change)"},
     MTML_MEMORY_ERROR_TYPE_UNCORRECTED, MTML_AGGREGATE_ECC, "MTML_MEMORY_ERROR_TYPE_UNCORRECTED, MTML_AGGREGATE_ECC"},
    {{"ecc.errors.corrected.volatile.total", v1::HEALTH_OK,
      "corrected ECC errors since the driver loaded, corrected by the hardware (a raw count, never a health change)"},
     MTML_MEMORY_ERROR_TYPE_CORRECTED, MTML_VOLATILE_ECC, "MTML_MEMORY_ERROR_TYPE_CORRECTED, MTML_VOLATILE_ECC"},
    {{"ecc.errors.corrected.aggregate.total", v1::HEALTH_OK,
      "corrected ECC errors over the device's life (a raw count, never a health change)"},
     MTML_MEMORY_ERROR_TYPE_CORRECTED, MTML_AGGREGATE_ECC, "MTML_MEMORY_ERROR_TYPE_CORRECTED, MTML_AGGREGATE_ECC"},
};
constexpr CounterRule kEccMode[] = {{"ecc.mode.current", v1::HEALTH_OK, ""}, {"ecc.mode.pending", v1::HEALTH_OK, ""}};
// mtml.h: pages "awaiting retirement that require a reboot to complete the process": reset
// required, FAULT (as NVML's retired_pages.pending).
constexpr CounterRule kRetiredPending = {
    "retired_pages.pending", v1::HEALTH_FAULT,
    "pages wait to be retired, which completes only at the next reboot or reset (reset required)"};

void ReadHealth(const Mtml& lib, const MtmlMemory* memory, LibraryHealthReader& health) {
  for (const EccCount& ecc : kEccCounts) {
    const std::string source =
        absl::StrCat("MTML mtmlMemoryGetEccErrorCounter(", ecc.arguments, ", MTML_MEMORY_LOCATION_DRAM)");
    unsigned long long count = 0;
    if (health.Call("mtmlMemoryGetEccErrorCounter", lib.ecc_count != nullptr, source, {ecc.rule}, [&] {
          return lib.ecc_count(memory, ecc.type, ecc.span, MTML_MEMORY_LOCATION_DRAM, &count);
        })) {
      health.Add(ecc.rule, source, count);
    }
  }
  const std::string mode_source = "MTML mtmlMemoryGetEccMode";
  MtmlEccMode current = MTML_MEMORY_ECC_DISABLE, pending = MTML_MEMORY_ECC_DISABLE;
  if (health.Call("mtmlMemoryGetEccMode", lib.ecc_mode != nullptr, mode_source, kEccMode,
                  [&] { return lib.ecc_mode(memory, &current, &pending); })) {
    health.AddEccMode("ecc.mode.current", current == MTML_MEMORY_ECC_ENABLE, mode_source, "now");
    health.AddEccMode("ecc.mode.pending", pending == MTML_MEMORY_ECC_ENABLE, mode_source, "after the next reboot");
  }
  const std::string pending_source = "MTML mtmlMemoryGetRetiredPagesPendingStatus";
  MtmlRetiredPagesPendingState retired = MTML_RETIRED_PAGES_PENDING_STATE_FALSE;
  if (health.Call("mtmlMemoryGetRetiredPagesPendingStatus", lib.retired_pending != nullptr, pending_source,
                  {kRetiredPending}, [&] { return lib.retired_pending(memory, &retired); })) {
    health.Add(kRetiredPending, pending_source, retired == MTML_RETIRED_PAGES_PENDING_STATE_TRUE ? 1 : 0);
  }
}

void ReadDevice(const Mtml& lib, const MtmlDevice* handle, LibraryCalls& calls, LibraryDevice& dev) {
  char name[MTML_DEVICE_NAME_BUFFER_SIZE] = {};
  if (lib.name != nullptr && calls.Device(dev, "mtmlDeviceGetName", [&] { return lib.name(handle, name, sizeof name); })) {
    dev.name = BufferText(name, sizeof name);
  }
  char uuid[MTML_DEVICE_UUID_BUFFER_SIZE] = {};
  if (lib.uuid != nullptr && calls.Device(dev, "mtmlDeviceGetUUID", [&] { return lib.uuid(handle, uuid, sizeof uuid); })) {
    dev.uuid = BufferText(uuid, sizeof uuid);
  }
  if (lib.memory == nullptr) return;
  MtmlMemory* memory = nullptr;
  if (!calls.Device(dev, "mtmlDeviceInitMemory", [&] { return lib.memory(handle, &memory); })) return;
  unsigned long long total = 0, used = 0;
  if (lib.total != nullptr && calls.Device(dev, "mtmlMemoryGetTotal", [&] { return lib.total(memory, &total); })) {
    dev.memory_total_bytes = total;
    if (lib.used != nullptr && calls.Device(dev, "mtmlMemoryGetUsed", [&] { return lib.used(memory, &used); })) {
      dev.memory_used_bytes = used;
    }
  }
  if (lib.read_health) {
    LibraryHealthReader health(calls, dev);
    ReadHealth(lib, memory, health);
  }
}

LibrarySnapshot ReadMtml(const std::string& path, VendorCall& call, bool usage_only) {
  LibrarySnapshot out;
  LoadedLibrary loaded;
  Mtml lib;
  lib.read_health = !usage_only;
  call.Enter("dlopen");
  if (!loaded.Open(path, out)) return out;
  loaded.Required("mtmlLibraryInit", lib.init);
  loaded.Required("mtmlLibraryShutDown", lib.shutdown);
  loaded.Required("mtmlLibraryCountDevice", lib.count);
  loaded.Required("mtmlLibraryInitDeviceByIndex", lib.by_index);
  loaded.Required("mtmlDeviceGetPciInfo", lib.pci);
  loaded.Optional("mtmlDeviceGetName", lib.name);
  loaded.Optional("mtmlDeviceGetUUID", lib.uuid);
  loaded.Optional("mtmlDeviceInitMemory", lib.memory);
  loaded.Optional("mtmlMemoryGetTotal", lib.total);
  loaded.Optional("mtmlMemoryGetUsed", lib.used);
  if (lib.read_health) {
    loaded.Optional("mtmlMemoryGetEccErrorCounter", lib.ecc_count);
    loaded.Optional("mtmlMemoryGetEccMode", lib.ecc_mode);
    loaded.Optional("mtmlMemoryGetRetiredPagesPendingStatus", lib.retired_pending);
  }
  if (!loaded.CheckSymbols(path, "MTML", out)) return out;

  MtmlLibrary* library = nullptr;
  call.Enter("mtmlLibraryInit");
  if (const int init = lib.init(&library); init != MTML_SUCCESS) {
    out.skipped = init == MTML_ERROR_DRIVER_NOT_LOADED;
    out.unusable = absl::StrCat(out.skipped ? "Moore Threads driver not loaded: " : "", "mtmlLibraryInit: ",
                                MtmlReturnName(init));
    loaded.Close(call);
    return out;
  }
  LibraryCalls calls(kMtmlErrors, call, out);
  if (!calls.System("mtmlLibraryCountDevice", [&] { return lib.count(library, &out.count); })) out.count = 0;
  for (unsigned int i = 0; i < out.count; ++i) {
    LibraryDevice dev;
    dev.index = static_cast<int>(i);
    MtmlDevice* handle = nullptr;
    MtmlPciInfo pci = {};
    if (!calls.Device(dev, "mtmlLibraryInitDeviceByIndex", [&] { return lib.by_index(library, i, &handle); }) ||
        !calls.Device(dev, "mtmlDeviceGetPciInfo", [&] { return lib.pci(handle, &pci); })) {
      const std::string what = !dev.fault.empty() ? dev.fault : dev.no_permission;
      if (!what.empty()) out.notes.push_back(absl::StrCat("MTML device ", i, ": ", what));
      continue;
    }
    absl::StatusOr<std::string> bus_id = NormalizePciBusId(BufferText(pci.sbdf, sizeof pci.sbdf));
    if (!bus_id.ok()) {
      out.problems.push_back(absl::StrCat("MTML device ", i, ": unreadable bus id \"", BufferText(pci.sbdf, sizeof pci.sbdf),
                                          "\""));
      continue;
    }
    dev.bus_id = *bus_id;
    ReadDevice(lib, handle, calls, dev);
    AddLibraryDevice(std::move(dev), "MTML", out);
  }
  call.Enter("mtmlLibraryShutDown");
  if (const int r = lib.shutdown(library); r != MTML_SUCCESS) {
    out.problems.push_back(absl::StrCat("mtmlLibraryShutDown: ", MtmlReturnName(r)));
  }
  loaded.Close(call);
  return out;
}

}  // namespace

VendorProber prober_factory::mtml(std::string library, const ProbeOptions& options) {
  return LibraryProber(kMtmlInfo, std::move(library),
                       [usage_only = options.usage_only](const std::string& path, const std::vector<std::string>&,
                                                         VendorCall& call) { return ReadMtml(path, call, usage_only); });
}

}  // namespace devplace::probe
