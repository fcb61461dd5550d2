// fake_ze: a stand-in for the Level Zero loader (libze_loader.so.1) in tests. It exports the
// Sysman functions devplace's prober looks up (server/probe/vendor_libs/level_zero_api.h, same signatures)
// and answers them from a scripted fixture file named by FAKE_ZE_CONFIG, read at each zesInit
// (unset or malformed: zesInit fails with ZE_RESULT_ERROR_UNKNOWN and says why on stderr). With
// FAKE_ZE_LOG naming a file, every call is appended as "<function> <target>".
//
// Script: one directive per line, '#' comments. <i> is a device index (0..n-1, one driver).
//   driver_version <text>                       zes_device_properties_t.driverVersion
//   device <i> bus_id <dddd:bb:dd.f>            zesDevicePciGetProperties
//   device <i> name <text to end of line>       core.name
//   device <i> uuid <32 hex digits>             core.uuid
//   device <i> tiles <n>                        numSubdevices
//   device <i> memory <tile|-> <size> <free> [<health>]
//                                               one device memory module per line (on tile n, or
//                                               on the device with '-'); health ok (default),
//                                               degraded, critical, replace
//   device <i> process <pid> <mem bytes>        a process in zesDeviceProcessesGetState (each
//                                               entry's stype is checked)
// plus fail / sleep / hang / crash (tests/fakes/fake_script.h); codes are named without the
// ZE_RESULT_ERROR_ prefix (DEVICE_LOST, UNSUPPORTED_FEATURE, INSUFFICIENT_PERMISSIONS,
// UNINITIALIZED, ...). Memory calls target the device index of their module.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "server/probe/vendor_libs/level_zero_api.h"
#include "tests/fakes/fake_ze_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct _zes_driver_handle_t {};
struct _zes_device_handle_t {
  int index;
};
struct _zes_mem_handle_t {
  int device;
  int module;
};

namespace {

using fake_ze::Gpu;
using fake_ze::Module;

struct Config : fake_ze::Script {
  _zes_driver_handle_t driver;
  std::vector<_zes_device_handle_t> devices;
  std::vector<std::vector<_zes_mem_handle_t>> modules;
};

Config* g_config = nullptr;  // the script of the last zesInit (kept: handles point into it)

bool Load(const char* path, Config& config, std::string& error) {
  if (!fake_ze::LoadScript(path, config, error)) return false;
  config.devices.resize(config.gpus.size());
  config.modules.resize(config.gpus.size());
  for (size_t i = 0; i < config.gpus.size(); ++i) {
    config.devices[i].index = static_cast<int>(i);
    for (size_t k = 0; k < config.gpus[i].memory.size(); ++k) {
      config.modules[i].push_back({static_cast<int>(i), static_cast<int>(k)});
    }
  }
  return true;
}

ze_result_t Script(const char* function, const std::string& target) {
  fake::Log("FAKE_ZE_LOG", function, target);
  if (g_config == nullptr) return ZE_RESULT_SUCCESS;
  return static_cast<ze_result_t>(fake::Apply(g_config->rules, function, target));
}

const Gpu* GpuOf(zes_device_handle_t device) {
  if (g_config == nullptr || device == nullptr || device->index < 0 ||
      static_cast<size_t>(device->index) >= g_config->gpus.size()) {
    return nullptr;
  }
  return &g_config->gpus[static_cast<size_t>(device->index)];
}

void CopyText(const std::string& value, char* out, size_t size) {
  std::strncpy(out, value.c_str(), size - 1);
  out[size - 1] = '\0';
}

}  // namespace

FAKE_EXPORT ze_result_t zesInit(uint32_t flags) {
  if (flags != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const char* path = std::getenv("FAKE_ZE_CONFIG");
  auto* config = new Config;
  std::string error = "FAKE_ZE_CONFIG is not set";
  if (path == nullptr || !Load(path, *config, error)) {
    std::fprintf(stderr, "fake_ze: %s\n", error.c_str());
    delete config;
    return ZE_RESULT_ERROR_UNKNOWN;
  }
  g_config = config;  // an earlier one stays: handles of it may still be held
  return Script("zesInit", "-");
}

FAKE_EXPORT ze_result_t zesDriverGet(uint32_t* pCount, zes_driver_handle_t* phDrivers) {
  if (g_config == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (const ze_result_t r = Script("zesDriverGet", "-")) return r;
  if (phDrivers != nullptr && *pCount >= 1) phDrivers[0] = &g_config->driver;
  *pCount = 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesDeviceGet(zes_driver_handle_t hDriver, uint32_t* pCount, zes_device_handle_t* phDevices) {
  if (g_config == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (hDriver != &g_config->driver || pCount == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (const ze_result_t r = Script("zesDeviceGet", "-")) return r;
  const uint32_t n = static_cast<uint32_t>(g_config->devices.size());
  if (phDevices != nullptr) {
    const uint32_t filled = std::min(*pCount, n);
    for (uint32_t i = 0; i < filled; ++i) phDevices[i] = &g_config->devices[i];
    *pCount = filled;
  } else {
    *pCount = n;
  }
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesDevicePciGetProperties(zes_device_handle_t hDevice, zes_pci_properties_t* pProperties) {
  const Gpu* gpu = GpuOf(hDevice);
  if (gpu == nullptr || pProperties == nullptr || pProperties->stype != ZES_STRUCTURE_TYPE_PCI_PROPERTIES) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zesDevicePciGetProperties", std::to_string(hDevice->index))) return r;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(gpu->bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    return ZE_RESULT_ERROR_UNKNOWN;
  }
  pProperties->domain = domain;
  pProperties->bus = bus;
  pProperties->device = device;
  pProperties->function = function;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesDeviceGetProperties(zes_device_handle_t hDevice, zes_device_properties_t* pProperties) {
  const Gpu* gpu = GpuOf(hDevice);
  if (gpu == nullptr || pProperties == nullptr || pProperties->stype != ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zesDeviceGetProperties", std::to_string(hDevice->index))) return r;
  pProperties->core.type = 1;  // GPU
  pProperties->core.vendorId = 0x8086;
  CopyText(gpu->name, pProperties->core.name, sizeof pProperties->core.name);
  for (size_t i = 0; i < 16 && gpu->uuid.size() == 32; ++i) {
    pProperties->core.uuid[i] = static_cast<uint8_t>(std::stoi(gpu->uuid.substr(2 * i, 2), nullptr, 16));
  }
  pProperties->numSubdevices = gpu->tiles;
  CopyText(g_config->driver_version, pProperties->driverVersion, sizeof pProperties->driverVersion);
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesDeviceEnumMemoryModules(zes_device_handle_t hDevice, uint32_t* pCount,
                                                   zes_mem_handle_t* phMemory) {
  const Gpu* gpu = GpuOf(hDevice);
  if (gpu == nullptr || pCount == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (const ze_result_t r = Script("zesDeviceEnumMemoryModules", std::to_string(hDevice->index))) return r;
  auto& modules = g_config->modules[static_cast<size_t>(hDevice->index)];
  const uint32_t n = static_cast<uint32_t>(modules.size());
  if (phMemory != nullptr) {
    const uint32_t filled = std::min(*pCount, n);
    for (uint32_t i = 0; i < filled; ++i) phMemory[i] = &modules[i];
    *pCount = filled;
  } else {
    *pCount = n;
  }
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesMemoryGetProperties(zes_mem_handle_t hMemory, zes_mem_properties_t* pProperties) {
  if (g_config == nullptr || hMemory == nullptr || pProperties == nullptr ||
      pProperties->stype != ZES_STRUCTURE_TYPE_MEM_PROPERTIES) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zesMemoryGetProperties", std::to_string(hMemory->device))) return r;
  const Module& m = g_config->gpus[static_cast<size_t>(hMemory->device)].memory[static_cast<size_t>(hMemory->module)];
  pProperties->location = ZES_MEM_LOC_DEVICE;
  pProperties->onSubdevice = m.tile >= 0;
  pProperties->subdeviceId = m.tile >= 0 ? static_cast<uint32_t>(m.tile) : 0;
  pProperties->physicalSize = m.size;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesMemoryGetState(zes_mem_handle_t hMemory, zes_mem_state_t* pState) {
  if (g_config == nullptr || hMemory == nullptr || pState == nullptr || pState->stype != ZES_STRUCTURE_TYPE_MEM_STATE) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (const ze_result_t r = Script("zesMemoryGetState", std::to_string(hMemory->device))) return r;
  const Module& m = g_config->gpus[static_cast<size_t>(hMemory->device)].memory[static_cast<size_t>(hMemory->module)];
  pState->health = m.health;
  pState->size = m.size;
  pState->free = m.free;
  return ZE_RESULT_SUCCESS;
}

FAKE_EXPORT ze_result_t zesDeviceProcessesGetState(zes_device_handle_t hDevice, uint32_t* pCount,
                                                   zes_process_state_t* pProcesses) {
  const Gpu* gpu = GpuOf(hDevice);
  if (gpu == nullptr || pCount == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (const ze_result_t r = Script("zesDeviceProcessesGetState", std::to_string(hDevice->index))) return r;
  const uint32_t n = static_cast<uint32_t>(gpu->processes.size());
  if (*pCount == 0) {
    *pCount = n;
    return ZE_RESULT_SUCCESS;
  }
  if (pProcesses == nullptr) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const uint32_t filled = std::min(*pCount, n);
  for (uint32_t i = 0; i < filled; ++i) {
    if (pProcesses[i].stype != ZES_STRUCTURE_TYPE_PROCESS_STATE) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    pProcesses[i].processId = gpu->processes[i].first;
    pProcesses[i].memSize = gpu->processes[i].second;
    pProcesses[i].sharedSize = 0;
    pProcesses[i].engines = 1;
  }
  *pCount = filled;
  return ZE_RESULT_SUCCESS;
}
