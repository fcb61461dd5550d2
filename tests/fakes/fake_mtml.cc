// fake_mtml: a stand-in for libmtml.so (Moore Threads) in tests. Exports the MTML functions
// devplace's prober looks up (server/probe/vendor_libs/mtml_api.h) and answers them from a script (format in
// accel_fake_script.h) named by FAKE_MTML_CONFIG; FAKE_MTML_LOG logs the calls. Device keys: bus_id,
// name, uuid, memory <total> <used> (bytes), ecc_uncorrected <volatile> <aggregate> and
// ecc_corrected <volatile> <aggregate> (mtmlMemoryGetEccErrorCounter on DRAM), ecc_mode <current>
// <pending> (0 or 1), retired_pages_pending <0|1>; a key absent: MTML_ERROR_NOT_SUPPORTED, as a
// device older than the calls answers. `fail` codes: the
// MtmlReturn names without MTML_ERROR_ (DRIVER_NOT_LOADED, DRIVER_FAILURE, NOT_SUPPORTED,
// NO_PERMISSION, DRIVER_TOO_OLD, UNKNOWN, ...) or numbers. Built twice: libfake_mtml_nomemory.so
// lacks the memory functions (an MTML too old for them).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "server/probe/vendor_libs/mtml_api.h"
#include "tests/fakes/accel_fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// The opaque objects: a device or memory object is its device number + 1 in disguise.
struct MtmlLibrary {
  int unused;
};

namespace {

const std::map<std::string, long long> kCodes = {
    {"DRIVER_NOT_LOADED", MTML_ERROR_DRIVER_NOT_LOADED}, {"DRIVER_FAILURE", MTML_ERROR_DRIVER_FAILURE},
    {"INVALID_ARGUMENT", MTML_ERROR_INVALID_ARGUMENT},   {"NOT_SUPPORTED", MTML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", MTML_ERROR_NO_PERMISSION},         {"NOT_FOUND", MTML_ERROR_NOT_FOUND},
    {"DRIVER_TOO_OLD", MTML_ERROR_DRIVER_TOO_OLD},       {"DRIVER_TOO_NEW", MTML_ERROR_DRIVER_TOO_NEW},
    {"TIMEOUT", MTML_ERROR_TIMEOUT},                     {"UNKNOWN", MTML_ERROR_UNKNOWN},
};
const fake::Library kLibrary = {"FAKE_MTML_CONFIG", "FAKE_MTML_LOG", &kCodes};
MtmlLibrary g_library;

template <typename T>
T* ObjectOf(size_t i) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(i + 1));
}
template <typename T>
size_t IndexOf(const T* object) {
  return static_cast<size_t>(reinterpret_cast<uintptr_t>(object)) - 1;
}

// Starts a call on device object `object`: 0 to go on.
template <typename T>
MtmlReturn ObjectCall(const T* object, const char* function) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return MTML_ERROR_DRIVER_FAILURE;
  if (object == nullptr || IndexOf(object) >= script->devices.size()) return MTML_ERROR_INVALID_ARGUMENT;
  return static_cast<MtmlReturn>(fake::Apply(kLibrary, script, function, std::to_string(IndexOf(object))));
}

MtmlReturn CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return MTML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return MTML_SUCCESS;
}

#ifndef FAKE_MTML_NO_MEMORY
// "<total> <used>" of device i; false when the script gives none.
bool Memory(const fake::Script& script, size_t i, unsigned long long& total, unsigned long long& used) {
  return std::sscanf(script.Fact(i, "memory").c_str(), "%llu %llu", &total, &used) == 2;
}
#endif

}  // namespace

#define FAKE_OBJECT_CALL(object)                                                     \
  if (const MtmlReturn scripted = ObjectCall(object, __func__); scripted != 0)      \
    return scripted;                                                                 \
  const fake::Script& script = *fake::Current();                                     \
  const size_t i = IndexOf(object);

FAKE_EXPORT MtmlReturn mtmlLibraryInit(MtmlLibrary** lib) {
  if (const int r = fake::Init(kLibrary, __func__, MTML_ERROR_UNKNOWN); r != 0) return static_cast<MtmlReturn>(r);
  if (lib == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  *lib = &g_library;
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlLibraryShutDown(MtmlLibrary* lib) {
  if (lib != &g_library || fake::Current() == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  return static_cast<MtmlReturn>(fake::Apply(kLibrary, fake::Current(), __func__, "-"));
}

FAKE_EXPORT MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary* lib, unsigned int* count) {
  const fake::Script* script = fake::Current();
  if (lib != &g_library || script == nullptr || count == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return static_cast<MtmlReturn>(r);
  *count = static_cast<unsigned int>(script->devices.size());
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary* lib, unsigned int index, MtmlDevice** dev) {
  if (lib != &g_library || dev == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  FAKE_OBJECT_CALL(ObjectOf<MtmlDevice>(index))
  (void)script;
  *dev = ObjectOf<MtmlDevice>(i);
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice* dev, MtmlPciInfo* pci) {
  FAKE_OBJECT_CALL(dev)
  if (pci == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  *pci = MtmlPciInfo{};
  std::snprintf(pci->sbdf, sizeof pci->sbdf, "%s", script.Fact(i, "bus_id").c_str());
  std::sscanf(pci->sbdf, "%x:%x:%x", &pci->segment, &pci->bus, &pci->device);
  pci->pciDeviceId = 0x03001ed5;
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlDeviceGetName(const MtmlDevice* dev, char* name, unsigned int length) {
  FAKE_OBJECT_CALL(dev)
  return CopyString(script.Fact(i, "name"), name, length);
}

FAKE_EXPORT MtmlReturn mtmlDeviceGetUUID(const MtmlDevice* dev, char* uuid, unsigned int length) {
  FAKE_OBJECT_CALL(dev)
  return CopyString(script.Fact(i, "uuid"), uuid, length);
}

#ifndef FAKE_MTML_NO_MEMORY
FAKE_EXPORT MtmlReturn mtmlDeviceInitMemory(const MtmlDevice* dev, MtmlMemory** mem) {
  FAKE_OBJECT_CALL(dev)
  (void)script;
  if (mem == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  *mem = ObjectOf<MtmlMemory>(i);
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlMemoryGetTotal(const MtmlMemory* mem, unsigned long long* total) {
  FAKE_OBJECT_CALL(mem)
  unsigned long long used = 0;
  if (total == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  return Memory(script, i, *total, used) ? MTML_SUCCESS : MTML_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT MtmlReturn mtmlMemoryGetUsed(const MtmlMemory* mem, unsigned long long* used) {
  FAKE_OBJECT_CALL(mem)
  unsigned long long total = 0;
  if (used == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  return Memory(script, i, total, *used) ? MTML_SUCCESS : MTML_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT MtmlReturn mtmlMemoryGetEccErrorCounter(const MtmlMemory* mem, MtmlMemoryErrorType errorType,
                                                    MtmlEccCounterType counterType, MtmlMemoryLocation locationType,
                                                    unsigned long long* eccCounts) {
  FAKE_OBJECT_CALL(mem)
  if (eccCounts == nullptr || counterType > MTML_AGGREGATE_ECC || locationType != MTML_MEMORY_LOCATION_DRAM ||
      errorType > MTML_MEMORY_ERROR_TYPE_UNCORRECTED) {
    return MTML_ERROR_INVALID_ARGUMENT;
  }
  const char* key = errorType == MTML_MEMORY_ERROR_TYPE_UNCORRECTED ? "ecc_uncorrected" : "ecc_corrected";
  unsigned long long counts[2] = {};
  if (std::sscanf(script.Fact(i, key).c_str(), "%llu %llu", &counts[0], &counts[1]) != 2) return MTML_ERROR_NOT_SUPPORTED;
  *eccCounts = counts[counterType];
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlMemoryGetEccMode(const MtmlMemory* mem, MtmlEccMode* currentMode, MtmlEccMode* pendingMode) {
  FAKE_OBJECT_CALL(mem)
  if (currentMode == nullptr || pendingMode == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  unsigned now = 0, next = 0;
  if (std::sscanf(script.Fact(i, "ecc_mode").c_str(), "%u %u", &now, &next) != 2) return MTML_ERROR_NOT_SUPPORTED;
  *currentMode = now != 0 ? MTML_MEMORY_ECC_ENABLE : MTML_MEMORY_ECC_DISABLE;
  *pendingMode = next != 0 ? MTML_MEMORY_ECC_ENABLE : MTML_MEMORY_ECC_DISABLE;
  return MTML_SUCCESS;
}

FAKE_EXPORT MtmlReturn mtmlMemoryGetRetiredPagesPendingStatus(const MtmlMemory* mem, MtmlRetiredPagesPendingState* isPending) {
  FAKE_OBJECT_CALL(mem)
  if (isPending == nullptr) return MTML_ERROR_INVALID_ARGUMENT;
  if (!script.Has(i, "retired_pages_pending")) return MTML_ERROR_NOT_SUPPORTED;
  *isPending = script.Fact(i, "retired_pages_pending") == "1" ? MTML_RETIRED_PAGES_PENDING_STATE_TRUE
                                                              : MTML_RETIRED_PAGES_PENDING_STATE_FALSE;
  return MTML_SUCCESS;
}
#endif  // FAKE_MTML_NO_MEMORY
