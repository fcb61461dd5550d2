// fake_cndev: a stand-in for libcndev.so (Cambricon) in tests. Exports the CNDev functions
// devplace's prober looks up (server/probe/vendor_libs/cndev_api.h) and answers them from a script (format in
// accel_fake_script.h) named by FAKE_CNDEV_CONFIG; FAKE_CNDEV_LOG logs the calls. Device keys: bus_id,
// name, uuid, memory <total> <used> in bytes (answered in MB; absent: not supported),
// processes <pid>:<KiB>,... (cndevGetProcessInfo; absent: none),
// health <flag> <device state> <driver state> (default "1 1 4": healthy, good, running). Every
// struct must carry version 5 or later (else CNDEV_ERROR_UNSUPPORTED_API_VERSION). `fail` codes:
// the cndevRet_t names without CNDEV_ERROR_ (NO_DRIVER, LOW_DRIVER_VERSION,
// UNSUPPORTED_API_VERSION, NOT_SUPPORTED, NO_PERMISSION, UNKNOWN, ...) or numbers.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/probe/vendor_libs/cndev_api.h"
#include "tests/fakes/accel_fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const std::map<std::string, long long> kCodes = {
    {"NO_DRIVER", CNDEV_ERROR_NO_DRIVER},
    {"LOW_DRIVER_VERSION", CNDEV_ERROR_LOW_DRIVER_VERSION},
    {"UNSUPPORTED_API_VERSION", CNDEV_ERROR_UNSUPPORTED_API_VERSION},
    {"UNINITIALIZED", CNDEV_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", CNDEV_ERROR_INVALID_ARGUMENT},
    {"INVALID_DEVICE_ID", CNDEV_ERROR_INVALID_DEVICE_ID},
    {"UNKNOWN", CNDEV_ERROR_UNKNOWN},
    {"NOT_SUPPORTED", CNDEV_ERROR_NOT_SUPPORTED},
    {"NO_DEVICES", CNDEV_ERROR_NO_DEVICES},
    {"NO_PERMISSION", CNDEV_ERROR_NO_PERMISSION},
    {"TIMEOUT", CNDEV_ERROR_TIMEOUT},
};
const fake::Library kLibrary = {"FAKE_CNDEV_CONFIG", "FAKE_CNDEV_LOG", &kCodes};
constexpr unsigned long long kMiB = 1ULL << 20;

// Starts a call on device handle `device` (handles are the device numbers): 0 to go on.
cndevRet_t DeviceCall(cndevDevice_t device, int version, const char* function) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return CNDEV_ERROR_UNINITIALIZED;
  if (device < 0 || static_cast<size_t>(device) >= script->devices.size()) return CNDEV_ERROR_INVALID_DEVICE_ID;
  if (const int r = fake::Apply(kLibrary, script, function, std::to_string(device)); r != 0) {
    return static_cast<cndevRet_t>(r);
  }
  return version < CNDEV_VERSION_5 ? CNDEV_ERROR_UNSUPPORTED_API_VERSION : CNDEV_SUCCESS;
}

}  // namespace

#define FAKE_DEVICE_CALL(device, version)                                                    \
  if (const cndevRet_t scripted = DeviceCall(device, version, __func__); scripted != 0)     \
    return scripted;                                                                         \
  const fake::Script& script = *fake::Current();                                             \
  const size_t i = static_cast<size_t>(device);

FAKE_EXPORT cndevRet_t cndevInit(int) {
  return static_cast<cndevRet_t>(fake::Init(kLibrary, __func__, CNDEV_ERROR_UNKNOWN));
}

FAKE_EXPORT cndevRet_t cndevRelease(void) {
  if (fake::Current() == nullptr) return CNDEV_ERROR_UNINITIALIZED;
  return static_cast<cndevRet_t>(fake::Apply(kLibrary, fake::Current(), __func__, "-"));
}

FAKE_EXPORT const char* cndevGetErrorString(cndevRet_t) { return "fake CNDev error"; }

FAKE_EXPORT cndevRet_t cndevGetDeviceCount(cndevCardInfo_t* cardNum) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return CNDEV_ERROR_UNINITIALIZED;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return static_cast<cndevRet_t>(r);
  if (cardNum == nullptr) return CNDEV_ERROR_INVALID_ARGUMENT;
  if (cardNum->version < CNDEV_VERSION_5) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
  cardNum->number = static_cast<unsigned>(script->devices.size());
  return CNDEV_SUCCESS;
}

FAKE_EXPORT cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t* handle) {
  FAKE_DEVICE_CALL(index, CNDEV_VERSION_5)
  (void)script;
  if (handle == nullptr) return CNDEV_ERROR_INVALID_ARGUMENT;
  *handle = static_cast<cndevDevice_t>(i);
  return CNDEV_SUCCESS;
}

FAKE_EXPORT cndevRet_t cndevGetPCIeInfo(cndevPCIeInfo_t* deviceInfo, cndevDevice_t device) {
  FAKE_DEVICE_CALL(device, deviceInfo != nullptr ? deviceInfo->version : 0)
  const int version = deviceInfo->version;
  *deviceInfo = cndevPCIeInfo_t{};
  deviceInfo->version = version;
  deviceInfo->vendor = 0xcabc;
  deviceInfo->deviceId = 0x0370;
  std::sscanf(script.Fact(i, "bus_id").c_str(), "%x:%x:%x.%x", &deviceInfo->domain, &deviceInfo->bus,
              &deviceInfo->device, &deviceInfo->function);
  return CNDEV_SUCCESS;
}

FAKE_EXPORT const char* cndevGetCardNameStringByDevId(cndevDevice_t device) {
  const fake::Script* script = fake::Current();
  if (script == nullptr || device < 0 || static_cast<size_t>(device) >= script->devices.size()) return "Unknown";
  fake::Apply(kLibrary, script, __func__, std::to_string(device));  // sleep / hang / crash only
  return script->devices[static_cast<size_t>(device)].count("name") > 0
             ? script->devices[static_cast<size_t>(device)].at("name").c_str()
             : "Unknown";
}

FAKE_EXPORT cndevRet_t cndevGetUUID(cndevUUID_t* uuidInfo, cndevDevice_t device) {
  FAKE_DEVICE_CALL(device, uuidInfo != nullptr ? uuidInfo->version : 0)
  std::snprintf(reinterpret_cast<char*>(uuidInfo->uuid), sizeof uuidInfo->uuid, "%s", script.Fact(i, "uuid").c_str());
  uuidInfo->ncsUUID64 = 0;
  return CNDEV_SUCCESS;
}

FAKE_EXPORT cndevRet_t cndevGetMemoryUsage(cndevMemoryInfo_t* memInfo, cndevDevice_t device) {
  FAKE_DEVICE_CALL(device, memInfo != nullptr ? memInfo->version : 0)
  long long total = 0, used = 0;
  if (std::sscanf(script.Fact(i, "memory").c_str(), "%lld %lld", &total, &used) != 2) return CNDEV_ERROR_NOT_SUPPORTED;
  memInfo->physicalMemoryTotal = total / static_cast<long long>(kMiB);
  memInfo->physicalMemoryUsed = used / static_cast<long long>(kMiB);
  memInfo->virtualMemoryTotal = memInfo->physicalMemoryTotal;
  memInfo->virtualMemoryUsed = memInfo->physicalMemoryUsed;
  return CNDEV_SUCCESS;
}

FAKE_EXPORT cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t* cardHealthState, cndevDevice_t device) {
  FAKE_DEVICE_CALL(device, cardHealthState != nullptr ? cardHealthState->version : 0)
  int health = 1, device_state = 1, driver_state = 4;
  if (script.Has(i, "health")) {
    std::sscanf(script.Fact(i, "health").c_str(), "%d %d %d", &health, &device_state, &driver_state);
  }
  cardHealthState->health = health;
  cardHealthState->deviceState = device_state;
  cardHealthState->driverState = driver_state;
  return CNDEV_SUCCESS;
}

FAKE_EXPORT cndevRet_t cndevGetProcessInfo(unsigned* infoCount, cndevProcessInfo_t* procInfo, cndevDevice_t device) {
  FAKE_DEVICE_CALL(device, procInfo != nullptr ? procInfo->version : 0)
  if (infoCount == nullptr) return CNDEV_ERROR_INVALID_ARGUMENT;
  std::vector<std::pair<unsigned, unsigned long long>> list;
  const std::string text = script.Fact(i, "processes");
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    unsigned pid = 0;
    unsigned long long kib = 0;
    if (std::sscanf(text.substr(at, end - at).c_str(), "%u:%llu", &pid, &kib) == 2) list.emplace_back(pid, kib);
    at = end + 1;
  }
  const unsigned capacity = *infoCount;
  *infoCount = static_cast<unsigned>(list.size());
  if (list.size() > capacity) return CNDEV_ERROR_INSUFFICIENT_SPACE;
  for (size_t k = 0; k < list.size(); ++k) {
    procInfo[k].pid = list[k].first;
    procInfo[k].physicalMemoryUsed = list[k].second;
    procInfo[k].virtualMemoryUsed = list[k].second;
  }
  return CNDEV_SUCCESS;
}
