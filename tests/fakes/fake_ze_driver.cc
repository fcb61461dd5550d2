// fake_ze_driver: a Level Zero *driver* (what the loader libze_loader.so.1 loads, like Intel's
// libze_intel_gpu.so.1) for tests of the level_zero prober through the distribution's real loader.
// Load it with ZE_ENABLE_ALT_DRIVERS=<path of this library>: the loader then loads it instead of
// the known driver names and dispatches to it through the DDI tables it hands out.
//
// A driver exports one zeGet<Table>ProcAddrTable function per DDI table (ze, zet and zes: the
// loader 1.8 asks for every table at zeInit and fails when no driver gives one); the tables'
// layouts come from the loader's own headers (level_zero/ze_ddi.h, zes_ddi.h, zet_ddi.h of
// Debian's libze-dev), so this fake speaks exactly the ABI of the loader it is tested with. Every
// table is handed out empty except the core calls the prober's fallback makes without Sysman:
// zeInit, zeDriverGet, zeDeviceGet, zeDeviceGetProperties, zeDevicePciGetPropertiesExt.
//
// Devices come from the fake_ze script named by FAKE_ZE_CONFIG (format at the top of fake_ze.cc),
// read at zeInit (tests/fakes/fake_ze_script.h): `device <i> bus_id|name|uuid` are answered; the
// Sysman-only keys (memory, process, tiles) and driver_version are read and unused; fail / sleep /
// hang / crash rules
// apply to the core calls by name (zeInit, zeDriverGet, zeDeviceGet with target "-";
// zeDeviceGetProperties and zeDevicePciGetPropertiesExt with the device index).
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/fakes/fake_ze_script.h"

struct _ze_driver_handle_t {
  int unused;
};
struct _ze_device_handle_t {
  int index;
};

namespace {

using fake_ze::Gpu;

struct Config : fake_ze::Script {
  _ze_driver_handle_t driver = {};
  std::vector<_ze_device_handle_t> devices;
};

Config* g_config = nullptr;  // the script of the last zeInit (kept: handles point into it)

// The whole fake_ze script is read (fake_ze_script.h); the core calls answer from its bus_id,
// name and uuid keys.
bool Load(const char* path, Config& config, std::string& error) {
  if (!fake_ze::LoadScript(path, config, error)) return false;
  config.devices.resize(config.gpus.size());
  for (size_t i = 0; i < config.devices.size(); ++i) config.devices[i].index = static_cast<int>(i);
  return true;
}

ze_result_t Script(const char* function, const std::string& target) {
  fake::Log("FAKE_ZE_LOG", function, target);
  if (g_config == nullptr) return ZE_RESULT_SUCCESS;
  return static_cast<ze_result_t>(fake::Apply(g_config->rules, function, target));
}

const Gpu* GpuOf(ze_device_handle_t device) {
  if (g_config == nullptr || device == nullptr || device->index < 0 ||
      static_cast<size_t>(device->index) >= g_config->gpus.size()) {
    return nullptr;
  }
  return &g_config->gpus[static_cast<size_t>(device->index)];
}

ze_result_t Init(ze_init_flags_t) {
  const char* path = std::getenv("FAKE_ZE_CONFIG");
  auto* config = new Config;
  std::string error = "FAKE_ZE_CONFIG is not set";
  if (path == nullptr || !Load(path, *config, error)) {
    std::fprintf(stderr, "fake_ze_driver: %s\n", error.c_str());
    delete config;
    return ZE_RESULT_ERROR_UNKNOWN;
  }
  g_config = config;  // an earlier one stays: handles of it may still be held
  return Script("zeInit", "-");
}

ze_result_t DriverGet(uint32_t* count, ze_driver_handle_t* drivers) {
  if (g_config == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (const ze_result_t r = Script("zeDriverGet", "-")) return r;
  if (drivers != nullptr && *count >= 1) drivers[0] = &g_config->driver;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t DeviceGet(ze_driver_handle_t driver, uint32_t* count, ze_device_handle_t* devices) {
  if (g_config == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (driver != &g_config->driver) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (const ze_result_t r = Script("zeDeviceGet", "-")) return r;
  const uint32_t n = static_cast<uint32_t>(g_config->devices.size());
  if (devices != nullptr) {
    const uint32_t filled = std::min(*count, n);
    for (uint32_t i = 0; i < filled; ++i) devices[i] = &g_config->devices[i];
    *count = filled;
  } else {
    *count = n;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t DeviceGetProperties(ze_device_handle_t device, ze_device_properties_t* properties) {
  const Gpu* gpu = GpuOf(device);
  if (gpu == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (properties == nullptr || properties->stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zeDeviceGetProperties", std::to_string(device->index))) return r;
  void* next = properties->pNext;
  *properties = ze_device_properties_t{};
  properties->stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  properties->pNext = next;
  properties->type = ZE_DEVICE_TYPE_GPU;
  properties->vendorId = 0x8086;
  std::snprintf(properties->name, sizeof properties->name, "%s", gpu->name.c_str());
  for (size_t i = 0; i + 1 < gpu->uuid.size() && i / 2 < ZE_MAX_DEVICE_UUID_SIZE; i += 2) {
    properties->uuid.id[i / 2] = static_cast<uint8_t>(std::strtoul(gpu->uuid.substr(i, 2).c_str(), nullptr, 16));
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t DevicePciGetPropertiesExt(ze_device_handle_t device, ze_pci_ext_properties_t* properties) {
  const Gpu* gpu = GpuOf(device);
  if (gpu == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (properties == nullptr || properties->stype != ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zeDevicePciGetPropertiesExt", std::to_string(device->index))) return r;
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  if (std::sscanf(gpu->bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) {
    return ZE_RESULT_ERROR_UNKNOWN;
  }
  properties->address = {domain, bus, dev, function};
  properties->maxSpeed = {-1, -1, -1};
  return ZE_RESULT_SUCCESS;
}

// Every table starts empty; the three the fallback uses get its calls.
template <typename Table>
ze_result_t Fill(Table* table) {
  if (table == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *table = Table{};
  if constexpr (std::is_same_v<Table, ze_global_dditable_t>) {
    table->pfnInit = Init;
  } else if constexpr (std::is_same_v<Table, ze_driver_dditable_t>) {
    table->pfnGet = DriverGet;
  } else if constexpr (std::is_same_v<Table, ze_device_dditable_t>) {
    table->pfnGet = DeviceGet;
    table->pfnGetProperties = DeviceGetProperties;
    table->pfnPciGetPropertiesExt = DevicePciGetPropertiesExt;
  }
  return ZE_RESULT_SUCCESS;
}

// The table type of a zeGet...ProcAddrTable function pointer type.
template <typename Fn>
struct TableOf;
template <typename Table>
struct TableOf<ze_result_t (*)(ze_api_version_t, Table*)> {
  using type = Table;
};

}  // namespace

// One exported getter per table, declared by the loader's headers (ZE_DLLEXPORT).
#define FAKE_ZE_TABLE(prefix, name)                                                                         \
  ze_result_t prefix##Get##name##ProcAddrTable(ze_api_version_t,                                            \
                                               TableOf<prefix##_pfnGet##name##ProcAddrTable_t>::type* t) { \
    return Fill(t);                                                                                         \
  }
FAKE_ZE_TABLE(ze, Global)
FAKE_ZE_TABLE(ze, Driver)
FAKE_ZE_TABLE(ze, Device)
FAKE_ZE_TABLE(ze, DeviceExp)
FAKE_ZE_TABLE(ze, Context)
FAKE_ZE_TABLE(ze, CommandQueue)
FAKE_ZE_TABLE(ze, CommandList)
FAKE_ZE_TABLE(ze, Event)
FAKE_ZE_TABLE(ze, EventExp)
FAKE_ZE_TABLE(ze, EventPool)
FAKE_ZE_TABLE(ze, Fence)
FAKE_ZE_TABLE(ze, Image)
FAKE_ZE_TABLE(ze, ImageExp)
FAKE_ZE_TABLE(ze, Kernel)
FAKE_ZE_TABLE(ze, KernelExp)
FAKE_ZE_TABLE(ze, Mem)
FAKE_ZE_TABLE(ze, Module)
FAKE_ZE_TABLE(ze, ModuleBuildLog)
FAKE_ZE_TABLE(ze, PhysicalMem)
FAKE_ZE_TABLE(ze, Sampler)
FAKE_ZE_TABLE(ze, VirtualMem)
FAKE_ZE_TABLE(ze, FabricEdgeExp)
FAKE_ZE_TABLE(ze, FabricVertexExp)
FAKE_ZE_TABLE(zet, CommandList)
FAKE_ZE_TABLE(zet, Context)
FAKE_ZE_TABLE(zet, Debug)
FAKE_ZE_TABLE(zet, Device)
FAKE_ZE_TABLE(zet, Kernel)
FAKE_ZE_TABLE(zet, MetricGroupExp)
FAKE_ZE_TABLE(zet, MetricGroup)
FAKE_ZE_TABLE(zet, Metric)
FAKE_ZE_TABLE(zet, MetricQueryPool)
FAKE_ZE_TABLE(zet, MetricQuery)
FAKE_ZE_TABLE(zet, MetricStreamer)
FAKE_ZE_TABLE(zet, Module)
FAKE_ZE_TABLE(zet, TracerExp)
FAKE_ZE_TABLE(zes, Device)
FAKE_ZE_TABLE(zes, Diagnostics)
FAKE_ZE_TABLE(zes, Driver)
FAKE_ZE_TABLE(zes, Engine)
FAKE_ZE_TABLE(zes, FabricPort)
FAKE_ZE_TABLE(zes, Fan)
FAKE_ZE_TABLE(zes, Firmware)
FAKE_ZE_TABLE(zes, Frequency)
FAKE_ZE_TABLE(zes, Led)
FAKE_ZE_TABLE(zes, Memory)
FAKE_ZE_TABLE(zes, PerformanceFactor)
FAKE_ZE_TABLE(zes, Power)
FAKE_ZE_TABLE(zes, Psu)
FAKE_ZE_TABLE(zes, Ras)
FAKE_ZE_TABLE(zes, Scheduler)
FAKE_ZE_TABLE(zes, Standby)
FAKE_ZE_TABLE(zes, Temperature)
