// The HLML prober (Intel Gaudi): libhlml.so through dlopen (declarations in hlml_api.h). Reads
// per device: bus id, name, UUID, serial, module id and memory total/used, plus the driver
// version; a device HLML says is lost (HLML_ERROR_AIP_IS_LOST) becomes HEALTH_LOST. A Gaudi of
// the PCI scan that no index yields is looked up by bus id, so that a lost one is attributed.
// On full probes it also reads the health counters of hlml.h's ECC and row-replacement calls
// (library_health.h; docs/PROBE.md "Device health", the HLML table).
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/hlml_api.h"
#include "server/probe/vendor_libs/library_health.h"
#include "server/probe/host/parsers.h"

namespace devplace::probe {
namespace {

struct Hlml {
  decltype(&hlml_init) init = nullptr;
  decltype(&hlml_shutdown) shutdown = nullptr;
  decltype(&hlml_device_get_count) count = nullptr;
  decltype(&hlml_device_get_handle_by_index) by_index = nullptr;
  decltype(&hlml_device_get_pci_info) pci_info = nullptr;
  decltype(&hlml_get_driver_version) driver_version = nullptr;
  decltype(&hlml_device_get_handle_by_pci_bus_id) by_bus_id = nullptr;
  decltype(&hlml_device_get_name) name = nullptr;
  decltype(&hlml_device_get_uuid) uuid = nullptr;
  decltype(&hlml_device_get_serial) serial = nullptr;
  decltype(&hlml_device_get_module_id) module_id = nullptr;
  decltype(&hlml_device_get_memory_info) memory = nullptr;
  decltype(&hlml_device_get_total_ecc_errors) total_ecc = nullptr;
  decltype(&hlml_device_get_ecc_mode) ecc_mode = nullptr;
  decltype(&hlml_device_get_replaced_rows_pending_status) replaced_rows_pending = nullptr;
  bool read_health = false;  // full probes only
};

std::string HlmlReturnName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {HLML_SUCCESS, "HLML_SUCCESS"},
      {HLML_ERROR_UNINITIALIZED, "HLML_ERROR_UNINITIALIZED"},
      {HLML_ERROR_INVALID_ARGUMENT, "HLML_ERROR_INVALID_ARGUMENT"},
      {HLML_ERROR_NOT_SUPPORTED, "HLML_ERROR_NOT_SUPPORTED"},
      {HLML_ERROR_ALREADY_INITIALIZED, "HLML_ERROR_ALREADY_INITIALIZED"},
      {HLML_ERROR_NOT_FOUND, "HLML_ERROR_NOT_FOUND"},
      {HLML_ERROR_INSUFFICIENT_SIZE, "HLML_ERROR_INSUFFICIENT_SIZE"},
      {HLML_ERROR_DRIVER_NOT_LOADED, "HLML_ERROR_DRIVER_NOT_LOADED"},
      {HLML_ERROR_TIMEOUT, "HLML_ERROR_TIMEOUT"},
      {HLML_ERROR_AIP_IS_LOST, "HLML_ERROR_AIP_IS_LOST"},
      {HLML_ERROR_MEMORY, "HLML_ERROR_MEMORY"},
      {HLML_ERROR_NO_DATA, "HLML_ERROR_NO_DATA"},
      {HLML_ERROR_UNKNOWN, "HLML_ERROR_UNKNOWN"},
  };
  return NamedCode(kNames, "HLML", code);
}

CallResult ClassifyHlml(int code) {
  switch (code) {
    case HLML_SUCCESS: return CallResult::kOk;
    case HLML_ERROR_NOT_SUPPORTED: return CallResult::kNotSupported;
    case HLML_ERROR_AIP_IS_LOST: return CallResult::kLost;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kHlmlErrors = {"HLML", HlmlReturnName, ClassifyHlml};
constexpr LibraryInfo kHlmlInfo = {"hlml", "HLML", v1::ROW_HPU, "Gaudi"};

// An uncorrectable error since the last reset or driver load lost data in the device's memory:
// FAULT, as NVML's volatile total (pyhlml documents the count as "from the last reset, or driver
// reinstall"). The lifetime total is a raw count. hlml.h marks corrected counts not supported:
// not read.
constexpr CounterRule kUncorrectedVolatile = {
    "ecc.errors.uncorrected.volatile.total", v1::HEALTH_FAULT,
    "uncorrectable ECC errors since the last reset or driver load: data in the device's memory was lost"};
constexpr CounterRule kUncorrectedAggregate = {
    "ecc.errors.uncorrected.aggregate.total", v1::HEALTH_OK,
    "uncorrectable ECC errors over the device's life (a raw count, never a health change)"};
constexpr CounterRule kEccMode[] = {{"ecc.mode.current", v1::HEALTH_OK, ""}, {"ecc.mode.pending", v1::HEALTH_OK, ""}};
// Rows waiting to be replaced take a spare row at the next reset: reset required, FAULT (as NVML's
// pending row remap).
constexpr CounterRule kRowsPending = {
    "replaced_rows.pending", v1::HEALTH_FAULT,
    "memory rows wait to be replaced by spare rows, which happens at the next reset (reset required)"};

void ReadHealth(const Hlml& lib, hlml_device_t handle, LibraryHealthReader& health) {
  for (const auto& [rule, span, span_name] :
       {std::tuple{kUncorrectedVolatile, HLML_VOLATILE_ECC, "HLML_VOLATILE_ECC"},
        std::tuple{kUncorrectedAggregate, HLML_AGGREGATE_ECC, "HLML_AGGREGATE_ECC"}}) {
    const std::string source =
        absl::StrCat("HLML hlml_device_get_total_ecc_errors(HLML_MEMORY_ERROR_TYPE_UNCORRECTED, ", span_name, ")");
    unsigned long long count = 0;
    const hlml_ecc_counter_type_t ecc_span = span;  // C++17 lambdas cannot capture a structured binding
    if (health.Call("hlml_device_get_total_ecc_errors", lib.total_ecc != nullptr, source, {rule}, [&] {
          return lib.total_ecc(handle, HLML_MEMORY_ERROR_TYPE_UNCORRECTED, ecc_span, &count);
        })) {
      health.Add(rule, source, count);
    }
  }
  const std::string mode_source = "HLML hlml_device_get_ecc_mode";
  hlml_enable_state_t current = HLML_FEATURE_DISABLED, pending = HLML_FEATURE_DISABLED;
  if (health.Call("hlml_device_get_ecc_mode", lib.ecc_mode != nullptr, mode_source, kEccMode,
                  [&] { return lib.ecc_mode(handle, &current, &pending); })) {
    health.AddEccMode("ecc.mode.current", current == HLML_FEATURE_ENABLED, mode_source, "now");
    health.AddEccMode("ecc.mode.pending", pending == HLML_FEATURE_ENABLED, mode_source, "after the next reset");
  }
  const std::string rows_source = "HLML hlml_device_get_replaced_rows_pending_status";
  hlml_enable_state_t rows_pending = HLML_FEATURE_DISABLED;
  if (health.Call("hlml_device_get_replaced_rows_pending_status", lib.replaced_rows_pending != nullptr, rows_source,
                  {kRowsPending}, [&] { return lib.replaced_rows_pending(handle, &rows_pending); })) {
    health.Add(kRowsPending, rows_source, rows_pending == HLML_FEATURE_ENABLED ? 1 : 0);
  }
}

void ReadDevice(const Hlml& lib, hlml_device_t handle, LibraryCalls& calls, LibraryDevice& dev) {
  char text[HLML_STRING_BUFFER_SIZE] = {};
  const auto read_string = [&](const char* call, auto getter, std::string& value) {
    if (getter == nullptr) return;
    text[0] = '\0';
    if (calls.Device(dev, call, [&] { return getter(handle, text, sizeof text); })) value = BufferText(text, sizeof text);
  };
  read_string("hlml_device_get_name", lib.name, dev.name);
  read_string("hlml_device_get_uuid", lib.uuid, dev.uuid);
  std::string serial;
  read_string("hlml_device_get_serial", lib.serial, serial);
  if (!serial.empty()) dev.attributes["serial"] = serial;
  unsigned int module_id = 0;
  if (lib.module_id != nullptr &&
      calls.Device(dev, "hlml_device_get_module_id", [&] { return lib.module_id(handle, &module_id); })) {
    dev.attributes["module_id"] = absl::StrCat(module_id);
  }
  hlml_memory_t memory = {};
  if (lib.memory != nullptr &&
      calls.Device(dev, "hlml_device_get_memory_info", [&] { return lib.memory(handle, &memory); })) {
    dev.memory_total_bytes = memory.total;
    dev.memory_used_bytes = memory.used;
  }
  if (lib.read_health) {
    LibraryHealthReader health(calls, dev);
    ReadHealth(lib, handle, health);
  }
}

LibrarySnapshot ReadHlml(const std::string& path, const std::vector<std::string>& bus_ids, VendorCall& call,
                         bool usage_only) {
  LibrarySnapshot out;
  LoadedLibrary loaded;
  Hlml lib;
  lib.read_health = !usage_only;
  call.Enter("dlopen");
  if (!loaded.Open(path, out)) return out;
  loaded.Required("hlml_init", lib.init);
  loaded.Required("hlml_shutdown", lib.shutdown);
  loaded.Required("hlml_device_get_count", lib.count);
  loaded.Required("hlml_device_get_handle_by_index", lib.by_index);
  loaded.Required("hlml_device_get_pci_info", lib.pci_info);
  loaded.Optional("hlml_get_driver_version", lib.driver_version);
  loaded.Optional("hlml_device_get_handle_by_pci_bus_id", lib.by_bus_id);
  loaded.Optional("hlml_device_get_name", lib.name);
  loaded.Optional("hlml_device_get_uuid", lib.uuid);
  loaded.Optional("hlml_device_get_serial", lib.serial);
  loaded.Optional("hlml_device_get_module_id", lib.module_id);
  loaded.Optional("hlml_device_get_memory_info", lib.memory);
  if (lib.read_health) {
    loaded.Optional("hlml_device_get_total_ecc_errors", lib.total_ecc);
    loaded.Optional("hlml_device_get_ecc_mode", lib.ecc_mode);
    loaded.Optional("hlml_device_get_replaced_rows_pending_status", lib.replaced_rows_pending);
  }
  if (!loaded.CheckSymbols(path, "HLML", out)) return out;

  call.Enter("hlml_init");
  const int init = lib.init();
  if (init != HLML_SUCCESS) {
    out.skipped = init == HLML_ERROR_DRIVER_NOT_LOADED;
    out.unusable = absl::StrCat(out.skipped ? "Gaudi driver not loaded: " : "", "hlml_init: ", HlmlReturnName(init));
    loaded.Close(call);
    return out;
  }
  LibraryCalls calls(kHlmlErrors, call, out);
  if (lib.driver_version != nullptr) {
    char version[HLML_STRING_BUFFER_SIZE] = {};
    if (calls.System("hlml_get_driver_version", [&] { return lib.driver_version(version, sizeof version); })) {
      out.driver_version = BufferText(version, sizeof version);
    }
  }
  if (!calls.System("hlml_device_get_count", [&] { return lib.count(&out.count); })) out.count = 0;
  for (unsigned int i = 0; i < out.count; ++i) {
    LibraryDevice dev;
    dev.index = static_cast<int>(i);
    hlml_device_t handle = nullptr;
    hlml_pci_info_t pci = {};
    if (!calls.Device(dev, "hlml_device_get_handle_by_index", [&] { return lib.by_index(i, &handle); }) ||
        !calls.Device(dev, "hlml_device_get_pci_info", [&] { return lib.pci_info(handle, &pci); })) {
      // Without a bus id the device cannot be attributed here; the bus-id pass below may.
      if (!dev.lost.empty()) out.notes.push_back(absl::StrCat("HLML device ", i, ": ", dev.lost));
      continue;
    }
    absl::StatusOr<std::string> bus_id = NormalizePciBusId(BufferText(pci.bus_id, sizeof pci.bus_id));
    if (!bus_id.ok()) {
      out.problems.push_back(absl::StrCat("HLML device ", i, ": unreadable bus id \"",
                                          BufferText(pci.bus_id, sizeof pci.bus_id), "\""));
      continue;
    }
    dev.bus_id = *bus_id;
    ReadDevice(lib, handle, calls, dev);
    AddLibraryDevice(std::move(dev), "HLML", out);
  }
  if (lib.by_bus_id != nullptr) {
    for (const std::string& bus_id : UnlistedBusIds(bus_ids, out)) {
      LibraryDevice dev;
      dev.bus_id = bus_id;
      hlml_device_t handle = nullptr;
      call.Enter("hlml_device_get_handle_by_pci_bus_id");
      const int r = lib.by_bus_id(bus_id.c_str(), &handle);
      if (r == HLML_ERROR_NOT_FOUND) continue;  // reported by the merge as not listed
      if (calls.DeviceResult(dev, "hlml_device_get_handle_by_pci_bus_id", r)) ReadDevice(lib, handle, calls, dev);
      if (r == HLML_SUCCESS || !dev.lost.empty()) out.devices.push_back(std::move(dev));
    }
  }
  call.Enter("hlml_shutdown");
  if (const int r = lib.shutdown(); r != HLML_SUCCESS) out.problems.push_back(absl::StrCat("hlml_shutdown: ", HlmlReturnName(r)));
  loaded.Close(call);
  return out;
}

}  // namespace

VendorProber prober_factory::hlml(std::string library, const ProbeOptions& options) {
  return LibraryProber(kHlmlInfo, std::move(library),
                       [usage_only = options.usage_only](const std::string& path, const std::vector<std::string>& bus_ids,
                                                         VendorCall& call) {
                         return ReadHlml(path, bus_ids, call, usage_only);
                       });
}

}  // namespace devplace::probe
