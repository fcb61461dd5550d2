// fake_hlml: a stand-in for libhlml.so (Intel Gaudi) in tests. Exports the HLML functions
// devplace's prober looks up (server/probe/vendor_libs/hlml_api.h, same signatures) and answers them from a
// script (format in accel_fake_script.h) named by FAKE_HLML_CONFIG; FAKE_HLML_LOG logs the calls.
// Device keys: bus_id, name, uuid, serial, module_id, memory <total> <used> (bytes; absent:
// HLML_ERROR_NOT_SUPPORTED), and the health calls' (absent: HLML_ERROR_NOT_SUPPORTED):
// ecc_uncorrected <volatile> <aggregate> (hlml_device_get_total_ecc_errors with
// HLML_MEMORY_ERROR_TYPE_UNCORRECTED; CORRECTED answers NOT_SUPPORTED, as hlml.h says), ecc_mode
// <current> <pending> (0 or 1), replaced_rows_pending <0|1>. `fail` codes: the hlml_return_t names without HLML_ERROR_
// (AIP_IS_LOST, NOT_SUPPORTED, DRIVER_NOT_LOADED, UNKNOWN, ...) or numbers.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "server/probe/vendor_libs/hlml_api.h"
#include "tests/fakes/accel_fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const std::map<std::string, long long> kCodes = {
    {"UNINITIALIZED", HLML_ERROR_UNINITIALIZED}, {"INVALID_ARGUMENT", HLML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", HLML_ERROR_NOT_SUPPORTED}, {"NOT_FOUND", HLML_ERROR_NOT_FOUND},
    {"DRIVER_NOT_LOADED", HLML_ERROR_DRIVER_NOT_LOADED}, {"TIMEOUT", HLML_ERROR_TIMEOUT},
    {"AIP_IS_LOST", HLML_ERROR_AIP_IS_LOST}, {"NO_DATA", HLML_ERROR_NO_DATA}, {"UNKNOWN", HLML_ERROR_UNKNOWN},
};
const fake::Library kLibrary = {"FAKE_HLML_CONFIG", "FAKE_HLML_LOG", &kCodes};

hlml_device_t HandleOf(size_t i) { return reinterpret_cast<hlml_device_t>(static_cast<uintptr_t>(i + 1)); }
size_t IndexOf(hlml_device_t handle) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(handle)) - 1; }

hlml_return_t CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return HLML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return HLML_SUCCESS;
}

// Starts a call on a device handle: the script's answer, or HLML_SUCCESS to go on.
hlml_return_t DeviceCall(hlml_device_t handle, const char* function) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return HLML_ERROR_UNINITIALIZED;
  if (handle == nullptr || IndexOf(handle) >= script->devices.size()) return HLML_ERROR_INVALID_ARGUMENT;
  return static_cast<hlml_return_t>(fake::Apply(kLibrary, script, function, std::to_string(IndexOf(handle))));
}

}  // namespace

#define FAKE_DEVICE_CALL(handle)                                                   \
  if (const hlml_return_t scripted = DeviceCall(handle, __func__); scripted != 0) \
    return scripted;                                                               \
  const fake::Script& script = *fake::Current();                                   \
  const size_t i = IndexOf(handle);

FAKE_EXPORT hlml_return_t hlml_init(void) {
  return static_cast<hlml_return_t>(fake::Init(kLibrary, __func__, HLML_ERROR_UNKNOWN));
}

FAKE_EXPORT hlml_return_t hlml_shutdown(void) {
  if (fake::Current() == nullptr) return HLML_ERROR_UNINITIALIZED;
  return static_cast<hlml_return_t>(fake::Apply(kLibrary, fake::Current(), __func__, "-"));
}

FAKE_EXPORT hlml_return_t hlml_get_driver_version(char* driver_version, unsigned int length) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return HLML_ERROR_UNINITIALIZED;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return static_cast<hlml_return_t>(r);
  if (script->driver_version.empty()) return HLML_ERROR_NOT_SUPPORTED;
  return CopyString(script->driver_version, driver_version, length);
}

FAKE_EXPORT hlml_return_t hlml_device_get_count(unsigned int* device_count) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return HLML_ERROR_UNINITIALIZED;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return static_cast<hlml_return_t>(r);
  if (device_count == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  *device_count = static_cast<unsigned int>(script->devices.size());
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_handle_by_index(unsigned int index, hlml_device_t* device) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return HLML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= script->devices.size()) return HLML_ERROR_INVALID_ARGUMENT;
  if (const hlml_return_t r = DeviceCall(HandleOf(index), __func__); r != 0) return r;
  *device = HandleOf(index);
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_handle_by_pci_bus_id(const char* pci_addr, hlml_device_t* device) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return HLML_ERROR_UNINITIALIZED;
  if (pci_addr == nullptr || device == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < script->devices.size(); ++i) {
    if (script->Fact(i, "bus_id") != pci_addr) continue;
    if (const hlml_return_t r = DeviceCall(HandleOf(i), __func__); r != 0) return r;
    *device = HandleOf(i);
    return HLML_SUCCESS;
  }
  fake::Log(kLibrary, __func__, "-");
  return HLML_ERROR_NOT_FOUND;
}

FAKE_EXPORT hlml_return_t hlml_device_get_pci_info(hlml_device_t device, hlml_pci_info_t* pci) {
  FAKE_DEVICE_CALL(device)
  if (pci == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  *pci = hlml_pci_info_t{};
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "%s", script.Fact(i, "bus_id").c_str());
  std::sscanf(pci->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
  pci->pci_device_id = 0x10201da3;
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_name(hlml_device_t device, char* name, unsigned int length) {
  FAKE_DEVICE_CALL(device)
  return CopyString(script.Fact(i, "name"), name, length);
}

FAKE_EXPORT hlml_return_t hlml_device_get_uuid(hlml_device_t device, char* uuid, unsigned int length) {
  FAKE_DEVICE_CALL(device)
  return CopyString(script.Fact(i, "uuid"), uuid, length);
}

FAKE_EXPORT hlml_return_t hlml_device_get_serial(hlml_device_t device, char* serial, unsigned int length) {
  FAKE_DEVICE_CALL(device)
  if (!script.Has(i, "serial")) return HLML_ERROR_NOT_SUPPORTED;
  return CopyString(script.Fact(i, "serial"), serial, length);
}

FAKE_EXPORT hlml_return_t hlml_device_get_module_id(hlml_device_t device, unsigned int* module_id) {
  FAKE_DEVICE_CALL(device)
  if (module_id == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  if (!script.Has(i, "module_id")) return HLML_ERROR_NOT_SUPPORTED;
  *module_id = static_cast<unsigned int>(std::strtoul(script.Fact(i, "module_id").c_str(), nullptr, 10));
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_memory_info(hlml_device_t device, hlml_memory_t* memory) {
  FAKE_DEVICE_CALL(device)
  if (memory == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  unsigned long long total = 0, used = 0;
  if (std::sscanf(script.Fact(i, "memory").c_str(), "%llu %llu", &total, &used) != 2) return HLML_ERROR_NOT_SUPPORTED;
  *memory = {total - used, total, used};
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_total_ecc_errors(hlml_device_t device, hlml_memory_error_type_t error_type,
                                                           hlml_ecc_counter_type_t counter_type,
                                                           unsigned long long* ecc_counts) {
  FAKE_DEVICE_CALL(device)
  if (ecc_counts == nullptr || counter_type > HLML_AGGREGATE_ECC) return HLML_ERROR_INVALID_ARGUMENT;
  unsigned long long counts[2] = {};
  if (error_type != HLML_MEMORY_ERROR_TYPE_UNCORRECTED ||
      std::sscanf(script.Fact(i, "ecc_uncorrected").c_str(), "%llu %llu", &counts[0], &counts[1]) != 2) {
    return HLML_ERROR_NOT_SUPPORTED;
  }
  *ecc_counts = counts[counter_type];
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_ecc_mode(hlml_device_t device, hlml_enable_state_t* current,
                                                   hlml_enable_state_t* pending) {
  FAKE_DEVICE_CALL(device)
  if (current == nullptr || pending == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  unsigned int now = 0, next = 0;
  if (std::sscanf(script.Fact(i, "ecc_mode").c_str(), "%u %u", &now, &next) != 2) return HLML_ERROR_NOT_SUPPORTED;
  *current = now != 0 ? HLML_FEATURE_ENABLED : HLML_FEATURE_DISABLED;
  *pending = next != 0 ? HLML_FEATURE_ENABLED : HLML_FEATURE_DISABLED;
  return HLML_SUCCESS;
}

FAKE_EXPORT hlml_return_t hlml_device_get_replaced_rows_pending_status(hlml_device_t device,
                                                                       hlml_enable_state_t* is_pending) {
  FAKE_DEVICE_CALL(device)
  if (is_pending == nullptr) return HLML_ERROR_INVALID_ARGUMENT;
  if (!script.Has(i, "replaced_rows_pending")) return HLML_ERROR_NOT_SUPPORTED;
  *is_pending = script.Fact(i, "replaced_rows_pending") == "1" ? HLML_FEATURE_ENABLED : HLML_FEATURE_DISABLED;
  return HLML_SUCCESS;
}
