// The MTML prober (Moore Threads): libmtml.so through dlopen (declarations in mtml_api.h). Reads
// per device: bus id, name, UUID and memory total/used. MTML has no health call: a device whose
// calls answer MTML_ERROR_DRIVER_FAILURE becomes HEALTH_FAULT with that call in the reason.
// mtmlLibraryInit's MTML_ERROR_DRIVER_NOT_LOADED skips the prober.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/probe/vendor_libs/accel_library.h"
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

void ReadDevice(const Mtml& lib, const MtmlDevice* handle, LibraryCalls& calls, LibraryDevice& dev) {
  char name[MTML_DEVICE_NAME_BUFFER_SIZE] = {};
  if (lib.name != nullptr && calls.Device(dev, "mtmlDeviceGetName", [&] { return lib.name(handle, name, sizeof name); })) {
    dev.name = BufferText(name, sizeof name);
  }
  char uuid[MTML_DEVICE_UUID_BUFFER_SIZE] = {};
  if (lib.uuid != nullptr && calls.Device(dev, "mtmlDeviceGetUUID", [&] { return lib.uuid(handle, uuid, sizeof uuid); })) {
    dev.uuid = BufferText(uuid, sizeof uuid);
  }
  if (lib.memory == nullptr || lib.total == nullptr) return;
  MtmlMemory* memory = nullptr;
  if (!calls.Device(dev, "mtmlDeviceInitMemory", [&] { return lib.memory(handle, &memory); })) return;
  unsigned long long total = 0, used = 0;
  if (calls.Device(dev, "mtmlMemoryGetTotal", [&] { return lib.total(memory, &total); })) {
    dev.memory_total_bytes = total;
    if (lib.used != nullptr && calls.Device(dev, "mtmlMemoryGetUsed", [&] { return lib.used(memory, &used); })) {
      dev.memory_used_bytes = used;
    }
  }
}

LibrarySnapshot ReadMtml(const std::string& path, const std::vector<std::string>&, VendorCall& call) {
  LibrarySnapshot out;
  LoadedLibrary loaded;
  Mtml lib;
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

VendorProber prober_factory::mtml(std::string library, const ProbeOptions&) {
  return LibraryProber(kMtmlInfo, std::move(library), ReadMtml);
}

}  // namespace devplace::probe
