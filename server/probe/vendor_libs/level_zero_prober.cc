#include "server/probe/vendor_libs/level_zero_prober.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/probe/vendor_libs/level_zero_api.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/vendor_libs/library_status.h"
#include "server/probe/vendor_libs/vendor_library.h"

namespace devplace::probe {
namespace {

struct ZeLibrary {
  decltype(&zesInit) init = nullptr;
  decltype(&zesDriverGet) drivers = nullptr;
  decltype(&zesDeviceGet) devices = nullptr;
  decltype(&zesDeviceGetProperties) properties = nullptr;
  decltype(&zesDevicePciGetProperties) pci = nullptr;
  decltype(&zesDeviceEnumMemoryModules) memory_modules = nullptr;
  decltype(&zesMemoryGetProperties) memory_properties = nullptr;
  decltype(&zesMemoryGetState) memory_state = nullptr;
  decltype(&zesDeviceProcessesGetState) processes = nullptr;
};

// The most processes read per device (a host has far fewer).
constexpr uint32_t kMaxZeProcesses = 4096;

std::string Text(const char* buffer, size_t size) { return std::string(buffer, strnlen(buffer, size)); }

std::string Uuid(const uint8_t* id) {
  std::string out;
  for (int i = 0; i < ZE_MAX_DEVICE_UUID_SIZE; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x", id[i]);
  }
  return out;
}

// A memory module's zes_mem_health_t as a health counter "memory.<where>.health" (docs/PROBE.md
// "Device health", the Level Zero table; the states as Sysman's zes_mem_health_t describes them):
// correctable errors piling up is DEGRADED (usable, picked last), a device running on reduced
// memory or due for replacement is FAULT, and a state Sysman does not know (or did not give) is an
// unknown counter, never a change.
void AddMemoryHealth(const std::string& where, int health, v1::Device& d) {
  struct State {
    int health;
    const char* value;
    v1::Health effect;
    const char* rule;
  };
  static constexpr State kStates[] = {
      {ZES_MEM_HEALTH_OK, "ok", v1::HEALTH_OK, "every memory channel is healthy"},
      {ZES_MEM_HEALTH_DEGRADED, "degraded", v1::HEALTH_DEGRADED,
       "correctable errors pile up on a memory channel (Sysman advises a reset): usable, picked last"},
      {ZES_MEM_HEALTH_CRITICAL, "critical", v1::HEALTH_FAULT,
       "the device runs on reduced memory, its banks with too many uncorrectable errors left out"},
      {ZES_MEM_HEALTH_REPLACE, "replace", v1::HEALTH_FAULT,
       "too many uncorrectable memory errors: Sysman says the device should be replaced"},
  };
  if (d.health_counters_size() >= kMaxHealthCounters) return;
  v1::HealthCounter& c = *d.add_health_counters();
  c.set_name(absl::StrCat("memory.", where, ".health"));
  c.set_source("Level Zero zesMemoryGetState");
  c.set_effect(v1::HEALTH_UNSPECIFIED);
  c.set_rule("unknown: Sysman gave no health for the module (ZES_MEM_HEALTH_UNKNOWN, or the call did not answer)");
  for (const State& state : kStates) {
    if (state.health != health) continue;
    c.set_value(state.value);
    c.set_effect(state.effect);
    c.set_rule(state.rule);
  }
}

// The two-call count-then-fill pattern of a system-wide list (drivers, devices): false, with a
// problem recorded, when a call fails.
template <typename Handle, typename Fn>
bool ListHandles(VendorCall& call, ZeSnapshot& snapshot, const char* name, Fn fn, std::vector<Handle>& out) {
  uint32_t count = 0;
  call.Enter(name);
  ze_result_t r = fn(&count, nullptr);
  if (r == ZE_RESULT_SUCCESS && count > 0) {
    out.resize(count);
    r = fn(&count, out.data());
    out.resize(std::min<size_t>(count, out.size()));
  }
  if (r != ZE_RESULT_SUCCESS) snapshot.problems.push_back(absl::StrCat(name, ": ", ZeResultName(r)));
  return r == ZE_RESULT_SUCCESS;
}

// What Sysman's per-device answers mean (ze_api.h / zes_api.h).
CallResult ClassifyZe(int code) {
  switch (static_cast<uint32_t>(code)) {
    case ZE_RESULT_SUCCESS: return CallResult::kOk;
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
    case ZE_RESULT_ERROR_NOT_AVAILABLE: return CallResult::kNotSupported;
    case ZE_RESULT_ERROR_DEVICE_LOST: return CallResult::kLost;
    case ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

std::string ZeCodeName(int code) { return ZeResultName(static_cast<uint32_t>(code)); }

constexpr LibraryErrors kZeErrors = {"Level Zero", ZeCodeName, ClassifyZe, "Level Zero device", false};

class Reader {
 public:
  Reader(const ZeLibrary& lib, VendorCall& call, ZeSnapshot& out)
      : lib_(lib), call_(call), out_(out), status_(kZeErrors, call, out.notes, out.problems) {}

  void ReadGpus() {
    std::vector<zes_driver_handle_t> drivers;
    if (!List("zesDriverGet", [&](uint32_t* n, zes_driver_handle_t* h) { return lib_.drivers(n, h); }, drivers)) return;
    int index = 0;
    for (zes_driver_handle_t driver : drivers) {
      std::vector<zes_device_handle_t> devices;
      if (!List("zesDeviceGet", [&](uint32_t* n, zes_device_handle_t* h) { return lib_.devices(driver, n, h); },
                devices)) {
        continue;
      }
      for (zes_device_handle_t device : devices) ReadGpu(device, index++);
    }
  }

 private:
  template <typename Handle, typename Fn>
  bool List(const char* call, Fn fn, std::vector<Handle>& out) {
    return ListHandles(call_, out_, call, fn, out);
  }

  // A per-device call (kZeErrors: DEVICE_LOST marks the device lost, INSUFFICIENT_PERMISSIONS is
  // a note), not made once the device is lost: true on success.
  template <typename Fn>
  bool Call(ZeGpu& gpu, const char* call, Fn fn) {
    return status_.Device({gpu.index, gpu.bus_id, gpu.lost}, call, fn);
  }

  void ReadGpu(zes_device_handle_t device, int index) {
    ZeGpu gpu;
    gpu.index = index;
    zes_pci_properties_t pci = {};
    pci.stype = ZES_STRUCTURE_TYPE_PCI_PROPERTIES;
    if (!Call(gpu, "zesDevicePciGetProperties", [&] { return lib_.pci(device, &pci); })) {
      out_.notes.push_back(absl::StrCat("Level Zero device ", index, " has no bus id",
                                        gpu.lost.empty() ? "" : absl::StrCat(" (", gpu.lost, ")")));
      return;
    }
    gpu.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device, pci.function);
    auto properties = std::make_unique<zes_device_properties_t>();
    properties->stype = ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    properties->core.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    if (Call(gpu, "zesDeviceGetProperties", [&] { return lib_.properties(device, properties.get()); })) {
      gpu.name = Text(properties->core.name, sizeof properties->core.name);
      const uint8_t* id = properties->core.uuid;
      if (std::any_of(id, id + ZE_MAX_DEVICE_UUID_SIZE, [](uint8_t b) { return b != 0; })) gpu.uuid = Uuid(id);
      gpu.tiles = properties->numSubdevices;
      gpu.driver_version = Text(properties->driverVersion, sizeof properties->driverVersion);
    }
    if (lib_.memory_modules != nullptr && gpu.lost.empty()) {
      uint32_t count = 0;
      std::vector<zes_mem_handle_t> modules;
      if (Call(gpu, "zesDeviceEnumMemoryModules", [&] { return lib_.memory_modules(device, &count, nullptr); }) &&
          count > 0) {
        modules.resize(count);
        if (!Call(gpu, "zesDeviceEnumMemoryModules",
                  [&] { return lib_.memory_modules(device, &count, modules.data()); })) {
          modules.clear();
        }
        modules.resize(std::min<size_t>(count, modules.size()));
      }
      for (zes_mem_handle_t module : modules) ReadModule(module, gpu);
    }
    ReadProcesses(device, gpu);
    out_.gpus.push_back(std::move(gpu));
  }

  void ReadProcesses(zes_device_handle_t device, ZeGpu& gpu) {
    if (lib_.processes == nullptr) return;
    uint32_t count = 0;
    if (!Call(gpu, "zesDeviceProcessesGetState", [&] { return lib_.processes(device, &count, nullptr); })) return;
    std::vector<zes_process_state_t> states(std::min(count, kMaxZeProcesses));
    for (zes_process_state_t& state : states) state.stype = ZES_STRUCTURE_TYPE_PROCESS_STATE;
    count = static_cast<uint32_t>(states.size());
    if (count > 0 &&
        !Call(gpu, "zesDeviceProcessesGetState", [&] { return lib_.processes(device, &count, states.data()); })) {
      return;
    }
    gpu.processes.emplace();
    for (uint32_t i = 0; i < std::min<size_t>(count, states.size()); ++i) {
      gpu.processes->emplace_back(states[i].processId, states[i].memSize);
    }
  }

  void ReadModule(zes_mem_handle_t module, ZeGpu& gpu) {
    zes_mem_properties_t properties = {};
    properties.stype = ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
    if (lib_.memory_properties == nullptr ||
        !Call(gpu, "zesMemoryGetProperties", [&] { return lib_.memory_properties(module, &properties); })) {
      return;
    }
    if (properties.location != ZES_MEM_LOC_DEVICE) return;  // system memory the device may use
    ZeMemoryModule m;
    if (properties.onSubdevice) m.tile = properties.subdeviceId;
    m.size_bytes = properties.physicalSize;
    zes_mem_state_t state = {};
    state.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
    if (lib_.memory_state != nullptr &&
        Call(gpu, "zesMemoryGetState", [&] { return lib_.memory_state(module, &state); })) {
      if (state.size > 0) m.size_bytes = state.size;
      m.free_bytes = std::min(state.free, m.size_bytes);
      m.health = static_cast<int>(state.health);
    }
    if (gpu.lost.empty()) gpu.memory.push_back(m);
  }

  const ZeLibrary& lib_;
  VendorCall& call_;
  ZeSnapshot& out_;
  LibraryStatus status_;
};

// The core API of a loader without Sysman 1.5.
struct ZeCoreLibrary {
  decltype(&zeInit) init = nullptr;
  decltype(&zeDriverGet) drivers = nullptr;
  decltype(&zeDeviceGet) devices = nullptr;
  decltype(&zeDeviceGetProperties) properties = nullptr;
  decltype(&zeDevicePciGetPropertiesExt) pci = nullptr;
};

// Reads every root device of every driver through the core API: bus id, name, UUID. Devices on
// one PCI function (the tiles of a card under ZE_FLAT_DEVICE_HIERARCHY=FLAT) become one entry,
// named by the first, with their count as `tiles` and no UUID (each tile has its own).
void ReadCore(const ZeCoreLibrary& lib, VendorCall& call, ZeSnapshot& out) {
  std::vector<ze_driver_handle_t> drivers;
  if (!ListHandles(call, out, "zeDriverGet", [&](uint32_t* n, ze_driver_handle_t* h) { return lib.drivers(n, h); },
                   drivers)) {
    return;
  }
  int index = 0;
  for (ze_driver_handle_t driver : drivers) {
    std::vector<ze_device_handle_t> devices;
    if (!ListHandles(call, out, "zeDeviceGet",
                     [&](uint32_t* n, ze_device_handle_t* h) { return lib.devices(driver, n, h); }, devices)) {
      continue;
    }
    for (ze_device_handle_t device : devices) {
      ZeGpu gpu;
      gpu.index = index++;
      ze_pci_ext_properties_t pci = {};
      pci.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES;
      call.Enter("zeDevicePciGetPropertiesExt", gpu.index);
      if (const ze_result_t r = lib.pci(device, &pci); r != ZE_RESULT_SUCCESS) {
        out.notes.push_back(absl::StrCat("Level Zero device ", gpu.index, " has no bus id (zeDevicePciGetPropertiesExt: ",
                                         ZeResultName(r), ")"));
        continue;
      }
      gpu.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.device, pci.function);
      auto same = std::find_if(out.gpus.begin(), out.gpus.end(), [&](const ZeGpu& g) { return g.bus_id == gpu.bus_id; });
      if (same != out.gpus.end()) {  // another tile of a card already listed
        same->tiles = std::max<uint32_t>(same->tiles, 1) + 1;
        same->uuid.clear();
        continue;
      }
      auto properties = std::make_unique<ze_device_properties_t>();
      properties->stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
      call.Enter("zeDeviceGetProperties", gpu.index);
      if (const ze_result_t r = lib.properties(device, properties.get()); r == ZE_RESULT_SUCCESS) {
        gpu.name = Text(properties->name, sizeof properties->name);
        const uint8_t* id = properties->uuid;
        if (std::any_of(id, id + ZE_MAX_DEVICE_UUID_SIZE, [](uint8_t b) { return b != 0; })) gpu.uuid = Uuid(id);
      } else if (r == ZE_RESULT_ERROR_DEVICE_LOST) {
        gpu.lost = absl::StrCat("Level Zero zeDeviceGetProperties: ", ZeResultName(r));
      } else {
        out.problems.push_back(absl::StrCat(gpu.bus_id, ": zeDeviceGetProperties: ", ZeResultName(r)));
      }
      out.gpus.push_back(std::move(gpu));
    }
  }
}

// A loader without Sysman 1.5 (`why`: what it lacks): the core API, when it has it.
ZeSnapshot ReadLevelZeroCore(const std::string& library, const std::string& why, VendorCall& call) {
  ZeSnapshot out;
  VendorLibrary so(library);
  ZeCoreLibrary lib;
  so.Require("zeInit", lib.init);
  so.Require("zeDriverGet", lib.drivers);
  so.Require("zeDeviceGet", lib.devices);
  so.Require("zeDeviceGetProperties", lib.properties);
  so.Require("zeDevicePciGetPropertiesExt", lib.pci);
  if (std::string missing = so.MissingRequired("nor the core API's device list"); !missing.empty()) {
    out.unusable = absl::StrCat(why, "; ", missing);
    return out;
  }
  out.core_only = true;
  out.notes.push_back(absl::StrCat("core API only (", why,
                                   "): memory, processes and the driver version not read"));
  call.Enter("zeInit");
  const ze_result_t r = lib.init(ZE_INIT_FLAG_GPU_ONLY);
  if (r != ZE_RESULT_SUCCESS) {
    out.skipped = r == ZE_RESULT_ERROR_UNINITIALIZED || r == ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE;
    out.unusable = absl::StrCat(out.skipped ? "no Level Zero GPU driver: " : "", "zeInit: ", ZeResultName(r));
    return out;
  }
  ReadCore(lib, call, out);
  call.Enter("dlclose");
  return out;
}

}  // namespace

std::string ZeResultName(uint32_t code) {
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {ZE_RESULT_SUCCESS, "ZE_RESULT_SUCCESS"},
      {ZE_RESULT_ERROR_DEVICE_LOST, "ZE_RESULT_ERROR_DEVICE_LOST"},
      {ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS, "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS"},
      {ZE_RESULT_ERROR_NOT_AVAILABLE, "ZE_RESULT_ERROR_NOT_AVAILABLE"},
      {ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE, "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE"},
      {ZE_RESULT_ERROR_UNINITIALIZED, "ZE_RESULT_ERROR_UNINITIALIZED"},
      {ZE_RESULT_ERROR_UNSUPPORTED_VERSION, "ZE_RESULT_ERROR_UNSUPPORTED_VERSION"},
      {ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"},
      {ZE_RESULT_ERROR_INVALID_ARGUMENT, "ZE_RESULT_ERROR_INVALID_ARGUMENT"},
      {ZE_RESULT_ERROR_UNKNOWN, "ZE_RESULT_ERROR_UNKNOWN"},
  };
  for (const auto& [value, name] : kNames) {
    if (value == code) return absl::StrFormat("%s (0x%08x)", name, code);
  }
  return absl::StrFormat("Level Zero result 0x%08x", code);
}

ZeSnapshot ReadLevelZero(const std::string& library, VendorCall& call) {
  ZeSnapshot out;
  call.Enter("dlopen");
  VendorLibrary so(library);
  if (!so.loaded()) {
    out.skipped = so.not_found();
    out.unusable = so.error();
    return out;
  }
  ZeLibrary lib;
  so.Require("zesInit", lib.init);
  so.Require("zesDriverGet", lib.drivers);
  so.Require("zesDeviceGet", lib.devices);
  so.Require("zesDeviceGetProperties", lib.properties);
  so.Require("zesDevicePciGetProperties", lib.pci);
  so.Optional("zesDeviceEnumMemoryModules", lib.memory_modules);
  so.Optional("zesMemoryGetProperties", lib.memory_properties);
  so.Optional("zesMemoryGetState", lib.memory_state);
  so.Optional("zesDeviceProcessesGetState", lib.processes);
  if (std::string missing = so.MissingRequired("not a Level Zero loader with Sysman 1.5, or one too old");
      !missing.empty()) {
    return ReadLevelZeroCore(library, missing, call);
  }
  if (std::string missing = so.MissingOptional(); !missing.empty()) out.notes.push_back(std::move(missing));
  call.Enter("zesInit");
  const ze_result_t r = lib.init(0);
  if (r != ZE_RESULT_SUCCESS) {
    // No GPU driver (i915 / xe) under the loader: nothing to read here.
    out.skipped = r == ZE_RESULT_ERROR_UNINITIALIZED || r == ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE;
    out.unusable = absl::StrCat(out.skipped ? "no Level Zero GPU driver: " : "", "zesInit: ", ZeResultName(r));
    return out;
  }
  Reader(lib, call, out).ReadGpus();
  call.Enter("dlclose");
  return out;
}

absl::StatusOr<ProbeOutcome> MergeLevelZero(const ZeSnapshot& snapshot, HostFacts& facts) {
  if (snapshot.unusable) {
    if (snapshot.skipped) return Skipped(*snapshot.unusable);
    return absl::InternalError(*snapshot.unusable);
  }
  std::vector<std::string> notes;
  std::set<std::string> seen;
  int merged = 0, lost = 0, faulty = 0;
  std::string driver_version;
  for (const ZeGpu& gpu : snapshot.gpus) {
    PciFunction* fn = facts.Find(gpu.bus_id);
    if (fn == nullptr || fn->row != v1::ROW_XPU) {
      notes.push_back(absl::StrCat("Level Zero device ", gpu.bus_id, " (", gpu.index, ") is not an Intel GPU of the PCI scan"));
      continue;
    }
    seen.insert(gpu.bus_id);
    ++merged;
    v1::Device& d = fn->device;
    auto& attributes = *d.mutable_attributes();
    if (!gpu.name.empty()) d.set_name(gpu.name);
    if (!gpu.uuid.empty()) {
      attributes["level_zero_uuid"] = gpu.uuid;
      if (d.uuid().empty()) d.set_uuid(gpu.uuid);
    }
    if (driver_version.empty()) driver_version = gpu.driver_version;
    if (gpu.tiles > 1) d.set_sub_device_count(gpu.tiles);
    if (!snapshot.core_only && (!gpu.name.empty() || !gpu.memory.empty())) {
      attributes["level_zero_tiles"] = absl::StrCat(gpu.tiles);
      attributes["flat_device_count"] = absl::StrCat(std::max<uint32_t>(gpu.tiles, 1));
      attributes["composite_device_count"] = "1";
    }
    if (!gpu.memory.empty()) {
      uint64_t total = 0, free = 0;
      bool all_free = true;
      std::vector<std::string> modules;
      bool unhealthy = false;
      for (const ZeMemoryModule& m : gpu.memory) {
        total += m.size_bytes;
        if (m.free_bytes) free += *m.free_bytes;
        all_free = all_free && m.free_bytes.has_value();
        const std::string where = m.tile ? absl::StrCat("tile", *m.tile) : "device";
        modules.push_back(absl::StrCat(where, ":", m.size_bytes, "/", m.free_bytes ? absl::StrCat(*m.free_bytes) : "?"));
        if (gpu.lost.empty()) AddMemoryHealth(where, m.health, d);
        unhealthy = unhealthy || m.health >= ZES_MEM_HEALTH_CRITICAL;
      }
      d.set_memory_total_bytes(total);
      if (all_free) {
        d.set_memory_free_bytes(free);
      } else {
        d.clear_memory_free_bytes();
      }
      attributes["memory_source"] = "level_zero";
      attributes["memory_modules"] = absl::StrJoin(modules, ",");
      if (unhealthy && gpu.lost.empty()) ++faulty;  // its health comes from the counters (BuildInventory)
    }
    if (gpu.processes) SetListedProcesses(d, "level_zero", *gpu.processes);
    if (!gpu.lost.empty()) {
      ++lost;
      MarkLost(d, gpu.lost);
    }
  }
  for (PciFunction* fn : facts.OfRow(v1::ROW_XPU)) {
    if (seen.count(fn->device.pci_bus_id()) == 0) {
      notes.push_back(absl::StrCat(fn->device.pci_bus_id(), " is not listed by Level Zero"));
    }
  }
  std::vector<std::string> found;
  if (!driver_version.empty()) {
    found.push_back(absl::StrCat("driver ", driver_version));
    facts.backend_attributes[v1::ROW_XPU]["level_zero_driver_version"] = driver_version;
  }
  found.push_back(absl::StrCat(snapshot.gpus.size(), " Level Zero devices, ", merged, " matched by bus id"));
  if (lost > 0) found.push_back(absl::StrCat(lost, " lost"));
  if (faulty > 0) found.push_back(absl::StrCat(faulty, " with unhealthy memory"));
  notes.insert(notes.begin(), snapshot.notes.begin(), snapshot.notes.end());
  Problems problems;
  for (const std::string& problem : snapshot.problems) problems.Add(problem);
  return problems.Finish(FoundAndNotes(found, notes));
}

VendorProber LevelZeroProber(std::string library) {
  return {"level_zero", [library = std::move(library)](const HostFacts& facts, VendorCall& call) -> VendorMerge {
            if (!facts.HasRow(v1::ROW_XPU)) {
              return [](HostFacts&) -> absl::StatusOr<ProbeOutcome> { return Skipped("no Intel GPU on the PCI bus"); };
            }
            auto snapshot = std::make_shared<const ZeSnapshot>(ReadLevelZero(library, call));
            return [snapshot](HostFacts& merged) { return MergeLevelZero(*snapshot, merged); };
          }};
}

VendorProber prober_factory::level_zero(std::string library, const ProbeOptions&) {
  VendorProber prober = LevelZeroProber(std::move(library));
  prober.row = v1::ROW_XPU;
  return prober;
}

}  // namespace devplace::probe
