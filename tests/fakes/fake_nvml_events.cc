// The fake NVML's event calls (the XID watcher's: nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
// nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree), answered from the script's
// xid_events file and event_types directives (fake_nvml.cc's format).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/fakes/fake_nvml_internal.h"

namespace {

// The size of `path` now (0 when it cannot be read).
std::streamoff FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<std::streamoff>(in.tellg()) : 0;
}

// Reads the next whole line of `path` after `offset` (advancing it); false when there is none yet.
bool NextLine(const std::string& path, std::streamoff& offset, std::string& line) {
  std::ifstream in(path, std::ios::binary);
  if (!in || !in.seekg(offset)) return false;
  if (!std::getline(in, line) || in.eof()) return false;  // no newline yet: not a whole line
  offset += static_cast<std::streamoff>(line.size()) + 1;
  return true;
}

}  // namespace

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t scripted = Script(config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // Only events after the set exists, as the driver delivers them.
  *set = new nvmlEventSet_st{config, {}, config->xid_events.empty() ? 0 : FileSize(config->xid_events)};
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  FAKE_NVML_DEVICE_CALL(device)
  if (eventTypes == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes = GpuOf(device).event_types;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                                       nvmlEventSet_t set) {
  FAKE_NVML_DEVICE_CALL(device)
  if (set == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  if ((eventTypes & ~GpuOf(device).event_types) != 0) return NVML_ERROR_NOT_SUPPORTED;
  set->gpus.push_back(device->gpu);
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms) {
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (const nvmlReturn_t scripted = Script(set->config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutms);
  const std::string& path = set->config->xid_events;
  for (;;) {
    std::string line;
    while (!path.empty() && NextLine(path, set->offset, line)) {
      long long gpu = -1, xid = 0;
      std::istringstream words(line);
      if (!(words >> gpu >> xid)) continue;
      if (std::find(set->gpus.begin(), set->gpus.end(), gpu) == set->gpus.end()) continue;
      *data = {};
      data->device = set->config->handle_of.at({static_cast<int>(gpu), -1});
      data->eventType = nvmlEventTypeXidCriticalError;
      data->eventData = static_cast<unsigned long long>(xid);
      data->gpuInstanceId = NVML_INVALID_INSTANCE_ID;
      data->computeInstanceId = NVML_INVALID_INSTANCE_ID;
      return NVML_SUCCESS;
    }
    if (std::chrono::steady_clock::now() >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (const nvmlReturn_t scripted = Script(set->config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  delete set;
  return NVML_SUCCESS;
}

