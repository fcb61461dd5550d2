// The CNDev prober (Cambricon MLU): libcndev.so through dlopen (declarations in cndev_api.h),
// API version 5. Reads per device: bus id, name, UUID, memory total/used (MB), the processes
// (cndevGetProcessInfo, KiB each) and health; a
// device whose health flag is 0 becomes HEALTH_FAULT with its device and driver states in the
// reason. cndevInit's CNDEV_ERROR_NO_DRIVER skips the prober; a library or driver too old for
// API version 5 (CNDEV_ERROR_LOW_DRIVER_VERSION, CNDEV_ERROR_UNSUPPORTED_API_VERSION) is an error.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/cndev_api.h"

namespace devplace::probe {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Cndev {
  decltype(&cndevInit) init = nullptr;
  decltype(&cndevRelease) release = nullptr;
  decltype(&cndevGetDeviceCount) count = nullptr;
  decltype(&cndevGetDeviceHandleByIndex) by_index = nullptr;
  decltype(&cndevGetPCIeInfo) pcie = nullptr;
  decltype(&cndevGetCardNameStringByDevId) name = nullptr;
  decltype(&cndevGetUUID) uuid = nullptr;
  decltype(&cndevGetMemoryUsage) memory = nullptr;
  decltype(&cndevGetProcessInfo) processes = nullptr;
  decltype(&cndevGetCardHealthState) health = nullptr;
};

std::string CndevReturnName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {CNDEV_SUCCESS, "CNDEV_SUCCESS"},
      {CNDEV_ERROR_NO_DRIVER, "CNDEV_ERROR_NO_DRIVER"},
      {CNDEV_ERROR_LOW_DRIVER_VERSION, "CNDEV_ERROR_LOW_DRIVER_VERSION"},
      {CNDEV_ERROR_UNSUPPORTED_API_VERSION, "CNDEV_ERROR_UNSUPPORTED_API_VERSION"},
      {CNDEV_ERROR_UNINITIALIZED, "CNDEV_ERROR_UNINITIALIZED"},
      {CNDEV_ERROR_INVALID_ARGUMENT, "CNDEV_ERROR_INVALID_ARGUMENT"},
      {CNDEV_ERROR_INVALID_DEVICE_ID, "CNDEV_ERROR_INVALID_DEVICE_ID"},
      {CNDEV_ERROR_UNKNOWN, "CNDEV_ERROR_UNKNOWN"},
      {CNDEV_ERROR_MALLOC, "CNDEV_ERROR_MALLOC"},
      {CNDEV_ERROR_INSUFFICIENT_SPACE, "CNDEV_ERROR_INSUFFICIENT_SPACE"},
      {CNDEV_ERROR_NOT_SUPPORTED, "CNDEV_ERROR_NOT_SUPPORTED"},
      {CNDEV_ERROR_INVALID_LINK, "CNDEV_ERROR_INVALID_LINK"},
      {CNDEV_ERROR_NO_DEVICES, "CNDEV_ERROR_NO_DEVICES"},
      {CNDEV_ERROR_NO_PERMISSION, "CNDEV_ERROR_NO_PERMISSION"},
      {CNDEV_ERROR_NOT_FOUND, "CNDEV_ERROR_NOT_FOUND"},
      {CNDEV_ERROR_IN_USE, "CNDEV_ERROR_IN_USE"},
      {CNDEV_ERROR_DUPLICATE, "CNDEV_ERROR_DUPLICATE"},
      {CNDEV_ERROR_TIMEOUT, "CNDEV_ERROR_TIMEOUT"},
  };
  return NamedCode(kNames, "CNDev", code);
}

CallResult ClassifyCndev(int code) {
  switch (code) {
    case CNDEV_SUCCESS: return CallResult::kOk;
    case CNDEV_ERROR_NOT_SUPPORTED: return CallResult::kNotSupported;
    case CNDEV_ERROR_NO_PERMISSION: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kCndevErrors = {"CNDev", CndevReturnName, ClassifyCndev};
constexpr LibraryInfo kCndevInfo = {"cndev", "CNDev", v1::ROW_MLU, "Cambricon MLU"};

void ReadDevice(const Cndev& lib, cndevDevice_t handle, LibraryCalls& calls, LibraryDevice& dev) {
  if (lib.name != nullptr) {
    calls.call().Enter("cndevGetCardNameStringByDevId", dev.index);
    if (const char* name = lib.name(handle)) dev.name = name;
  }
  cndevUUID_t uuid = {};
  uuid.version = CNDEV_VERSION_5;
  if (lib.uuid != nullptr && calls.Device(dev, "cndevGetUUID", [&] { return lib.uuid(&uuid, handle); })) {
    dev.uuid = BufferText(reinterpret_cast<const char*>(uuid.uuid), sizeof uuid.uuid);
  }
  cndevMemoryInfo_t memory = {};
  memory.version = CNDEV_VERSION_5;
  if (lib.memory != nullptr && calls.Device(dev, "cndevGetMemoryUsage", [&] { return lib.memory(&memory, handle); }) &&
      memory.physicalMemoryTotal >= 0 && memory.physicalMemoryUsed >= 0) {
    dev.memory_total_bytes = static_cast<uint64_t>(memory.physicalMemoryTotal) * kMiB;
    dev.memory_used_bytes = static_cast<uint64_t>(memory.physicalMemoryUsed) * kMiB;
  }
  // Processes: a first try with room for 16, then the count the library asked for.
  if (lib.processes != nullptr) {
    constexpr unsigned kMaxProcesses = 4096;
    std::vector<cndevProcessInfo_t> infos(16);
    unsigned count = 16;
    int r = CNDEV_ERROR_INSUFFICIENT_SPACE;
    for (int attempt = 0; attempt < 3 && r == CNDEV_ERROR_INSUFFICIENT_SPACE && dev.lost.empty(); ++attempt) {
      infos.assign(std::min(std::max<unsigned>(count, 16), kMaxProcesses), cndevProcessInfo_t{});
      for (cndevProcessInfo_t& info : infos) info.version = CNDEV_VERSION_5;
      count = static_cast<unsigned>(infos.size());
      calls.call().Enter("cndevGetProcessInfo", dev.index);
      r = lib.processes(&count, infos.data(), handle);
    }
    if (r != CNDEV_ERROR_INSUFFICIENT_SPACE && calls.DeviceResult(dev, "cndevGetProcessInfo", r)) {
      dev.processes.emplace();
      for (unsigned k = 0; k < std::min<size_t>(count, infos.size()); ++k) {
        dev.processes->emplace_back(infos[k].pid, infos[k].physicalMemoryUsed * 1024);
      }
    }
  }
  cndevCardHealthState_t health = {};
  health.version = CNDEV_VERSION_5;
  if (lib.health != nullptr &&
      calls.Device(dev, "cndevGetCardHealthState", [&] { return lib.health(&health, handle); }) && health.health == 0) {
    dev.fault = absl::StrCat("CNDev cndevGetCardHealthState: health 0 (device state ", health.deviceState,
                             ", driver state ", health.driverState, ")");
  }
}

LibrarySnapshot ReadCndev(const std::string& path, const std::vector<std::string>&, VendorCall& call) {
  LibrarySnapshot out;
  LoadedLibrary loaded;
  Cndev lib;
  call.Enter("dlopen");
  if (!loaded.Open(path, out)) return out;
  loaded.Required("cndevInit", lib.init);
  loaded.Required("cndevRelease", lib.release);
  loaded.Required("cndevGetDeviceCount", lib.count);
  loaded.Required("cndevGetDeviceHandleByIndex", lib.by_index);
  loaded.Required("cndevGetPCIeInfo", lib.pcie);
  loaded.Optional("cndevGetCardNameStringByDevId", lib.name);
  loaded.Optional("cndevGetUUID", lib.uuid);
  loaded.Optional("cndevGetMemoryUsage", lib.memory);
  loaded.Optional("cndevGetCardHealthState", lib.health);
  loaded.Optional("cndevGetProcessInfo", lib.processes);
  if (!loaded.CheckSymbols(path, "CNDev", out)) return out;

  call.Enter("cndevInit");
  if (const int init = lib.init(0); init != CNDEV_SUCCESS) {
    out.skipped = init == CNDEV_ERROR_NO_DRIVER;
    const bool version = init == CNDEV_ERROR_LOW_DRIVER_VERSION || init == CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    out.unusable = absl::StrCat(out.skipped ? "Cambricon driver not loaded: " : "", "cndevInit: ", CndevReturnName(init),
                                version ? " (the library or driver cannot serve CNDev API version 5)" : "");
    loaded.Close(call);
    return out;
  }
  LibraryCalls calls(kCndevErrors, call, out);
  cndevCardInfo_t cards = {};
  cards.version = CNDEV_VERSION_5;
  if (calls.System("cndevGetDeviceCount", [&] { return lib.count(&cards); })) out.count = cards.number;
  for (unsigned int i = 0; i < out.count; ++i) {
    LibraryDevice dev;
    dev.index = static_cast<int>(i);
    cndevDevice_t handle = 0;
    cndevPCIeInfo_t pcie = {};
    pcie.version = CNDEV_VERSION_5;
    if (!calls.Device(dev, "cndevGetDeviceHandleByIndex", [&] { return lib.by_index(static_cast<int>(i), &handle); }) ||
        !calls.Device(dev, "cndevGetPCIeInfo", [&] { return lib.pcie(&pcie, handle); })) {
      if (!dev.no_permission.empty()) out.notes.push_back(absl::StrCat("CNDev device ", i, ": ", dev.no_permission));
      continue;
    }
    dev.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", pcie.domain & 0xffff, pcie.bus & 0xff, pcie.device & 0x1f,
                                 pcie.function & 0x7);
    ReadDevice(lib, handle, calls, dev);
    AddLibraryDevice(std::move(dev), "CNDev", out);
  }
  call.Enter("cndevRelease");
  if (const int r = lib.release(); r != CNDEV_SUCCESS) out.problems.push_back(absl::StrCat("cndevRelease: ", CndevReturnName(r)));
  loaded.Close(call);
  return out;
}

}  // namespace

VendorProber prober_factory::cndev(std::string library, const ProbeOptions&) {
  return LibraryProber(kCndevInfo, std::move(library), ReadCndev);
}

}  // namespace devplace::probe
