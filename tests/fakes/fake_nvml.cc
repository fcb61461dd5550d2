// fake_nvml: a stand-in for libnvidia-ml.so.1 in tests, in the spirit of DCGM's NVML injection.
// It exports exactly the NVML functions devplace's prober looks up (server/probe/vendor_libs/nvml_api.h,
// same signatures) and answers them from a scripted fixture file, including errors, slow calls
// and calls that never return. Built as libfake_nvml.so; libfake_nvml_nomig.so is the same
// library without the MIG functions (a library too old for MIG).
//
// The script's path comes from the environment variable FAKE_NVML_CONFIG, read at each
// nvmlInit_v2 (an unset variable or a malformed script makes nvmlInit_v2 fail with
// NVML_ERROR_UNKNOWN and says why on stderr). When FAKE_NVML_LOG names a file, every call is
// appended to it as "<function> <target>" (targets below), one per line.
//
// Script format: one directive per line; '#' starts a comment; blank lines are ignored. <i> is
// an NVML device index (devices must be numbered 0..n-1: the count is n; n at most 1,024, scripts/bench
// scripts 256 GPUs), <j> a MIG slot.
//
//   driver_version <text>                       nvmlSystemGetDriverVersion (default 550.54.15)
//   cuda_driver_version <int>                   nvmlSystemGetCudaDriverVersion_v2 (default 12040)
//   device <i> bus_id <id>                      nvmlDeviceGetPciInfo_v3 busId as written (NVML
//                                               prints "00000000:9A:00.0"); also what
//                                               nvmlDeviceGetHandleByPciBusId_v2 matches
//   device <i> name <text to end of line>       nvmlDeviceGetName
//   device <i> uuid <text>                      nvmlDeviceGetUUID ("GPU-...")
//   device <i> memory <total> <free> <used>     nvmlDeviceGetMemoryInfo, bytes (absent:
//                                               NVML_ERROR_NOT_SUPPORTED)
//   device <i> mig_mode <current> <pending>     nvmlDeviceGetMigMode (default 0 0); with
//                                               current 1, nvmlDeviceGetMaxMigDeviceCount is 7
//   device <i> mig <j> uuid <text>              MIG device in slot j ("MIG-..."); empty slots
//                                               answer NVML_ERROR_NOT_FOUND
//   device <i> mig <j> name <text to end>       its nvmlDeviceGetName ("... MIG 3g.40gb")
//   device <i> mig <j> instance <gi> <ci>       nvmlDeviceGetGpuInstanceId / ComputeInstanceId
//   device <i> mig <j> memory <total> <free> <used>
//   device <i> compute_mode <n>                 nvmlDeviceGetComputeMode (0 default, 2 prohibited,
//                                               3 exclusive process; absent: NOT_SUPPORTED)
//   device <i> process <pid> <used|-> <kind> [<gi> <ci>]
//                                               a process in nvmlDevice{Compute,Graphics}Running-
//                                               Processes_v3: <used> bytes ('-': NVML_VALUE_NOT_
//                                               AVAILABLE), <kind> compute, graphics or both, the
//                                               MIG instance it runs in (default: none)
//   device <i> ecc <corrected|uncorrected> <volatile|aggregate> <n>
//                                               nvmlDeviceGetTotalEccErrors; a GPU with no ecc
//                                               line has ECC off (NOT_SUPPORTED), one with any
//                                               answers 0 for the totals not given
//   device <i> retired_pages_pending <0|1>      nvmlDeviceGetRetiredPagesPendingStatus (absent:
//                                               NOT_SUPPORTED, as on GPUs since Ampere)
//   device <i> remapped_rows <corr> <unc> <pending> <failure>
//                                               nvmlDeviceGetRemappedRows (absent: NOT_SUPPORTED,
//                                               as on GPUs before Ampere)
//   device <i> clocks_event_reasons <mask>      nvmlDeviceGetCurrentClocksEventReasons and its
//                                               older name ...ThrottleReasons, decimal or 0x hex
//                                               (absent: NOT_SUPPORTED)
//   device <i> event_types <mask>               nvmlDeviceGetSupportedEventTypes (default 0x1f: ECC,
//                                               P-state, XID, clock events); nvmlDeviceRegisterEvents
//                                               answers NOT_SUPPORTED for a type not in it
//   xid_events <path>                           where the event calls find XIDs: each line appended
//                                               to the file after nvmlEventSetCreate, "<i> <xid>",
//                                               is one nvmlEventTypeXidCriticalError event on GPU
//                                               <i> for an event set it is registered on;
//                                               nvmlEventSetWait_v2 polls the file (every 10 ms)
//                                               until its timeout (absent: every wait times out)
//
//   fail <function> <target> <code>             the call returns <code>: a name without the
//                                               NVML_ERROR_ prefix (GPU_IS_LOST, NOT_SUPPORTED,
//                                               NO_PERMISSION, DRIVER_NOT_LOADED, NOT_FOUND,
//                                               UNKNOWN, ...) or a number
//   sleep <function> <target> <ms>              the call sleeps that long first
//   hang <function> <target>                    the call never returns
//   crash <function> <target>                   the call dies of SIGSEGV (as a library that
//                                               dereferences a bad pointer would)
//
// <function> is an NVML function name or '*' (every function). <target> is '-' for the calls
// that name no device (nvmlInit_v2, nvmlSystem*, nvmlDeviceGetCount_v2), <i> for a GPU (its
// handle lookups, by index or bus id, and every call on its handle), <i>/<j> for a MIG device,
// or '*' for any GPU or MIG device. Directives apply in file order: sleeps accumulate, the
// first matching fail, hang or crash decides.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/probe/vendor_libs/nvml_api.h"
#include "tests/fakes/fake_nvml_internal.h"
#include "tests/fakes/fake_script.h"

namespace {

std::mutex g_mu;
// Every script ever loaded stays alive (and reachable), so handles handed out under an earlier
// script stay valid after a later nvmlInit_v2 loads another one.
std::vector<std::unique_ptr<Config>>* g_configs = new std::vector<std::unique_ptr<Config>>;
std::atomic<Config*> g_current{nullptr};
int g_init_count = 0;

const std::map<std::string, long long>& CodeNames() {
  static const auto* names = new std::map<std::string, long long>{
      {"SUCCESS", NVML_SUCCESS},
      {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
      {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
      {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
      {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
      {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
      {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
      {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
      {"TIMEOUT", NVML_ERROR_TIMEOUT},
      {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
      {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
      {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
      {"UNKNOWN", NVML_ERROR_UNKNOWN},
  };
  return *names;
}

bool ParseInt(const std::string& text, long long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0';
}

// Parses the script; on error returns false with `error` naming the line.
bool Parse(const std::string& path, Config& config, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    // The rest of the line after the first `n` words, for names.
    const auto rest = [&line](size_t n) {
      size_t at = 0;
      for (size_t k = 0; k < n; ++k) {
        at = line.find_first_not_of(" \t", at);
        at = line.find_first_of(" \t", at);
      }
      at = line.find_first_not_of(" \t", at);
      std::string text = at == std::string::npos ? "" : line.substr(at);
      return text.substr(0, text.find_last_not_of(" \t\r") + 1);
    };
    long long a = 0, b = 0, c = 0, d = 0;
    const auto bad = [&](const char* why) {
      error = where + why;
      return false;
    };
    if (w[0] == "driver_version" && w.size() == 2) {
      config.driver_version = w[1];
    } else if (w[0] == "cuda_driver_version" && w.size() == 2 && ParseInt(w[1], a)) {
      config.cuda_driver_version = static_cast<int>(a);
    } else if (w[0] == "xid_events" && w.size() == 2) {
      config.xid_events = w[1];
    } else if (w[0] == "device" && w.size() >= 3 && ParseInt(w[1], a) && a >= 0 && a < 1024) {
      if (config.gpus.size() <= static_cast<size_t>(a)) config.gpus.resize(a + 1);
      Gpu& gpu = config.gpus[a];
      if (w[2] == "bus_id" && w.size() == 4) {
        gpu.bus_id = w[3];
      } else if (w[2] == "name" && w.size() >= 4) {
        gpu.name = rest(3);
      } else if (w[2] == "uuid" && w.size() == 4) {
        gpu.uuid = w[3];
      } else if (w[2] == "memory" && w.size() == 6 && ParseInt(w[3], b) && ParseInt(w[4], c) && ParseInt(w[5], d)) {
        gpu.has_memory = true;
        gpu.memory = {static_cast<unsigned long long>(b), static_cast<unsigned long long>(c),
                      static_cast<unsigned long long>(d)};
      } else if (w[2] == "compute_mode" && w.size() == 4 && ParseInt(w[3], b)) {
        gpu.compute_mode = static_cast<int>(b);
      } else if (w[2] == "process" && (w.size() == 6 || w.size() == 8) && ParseInt(w[3], b) &&
                 (w[4] == "-" || ParseInt(w[4], c)) && (w[5] == "compute" || w[5] == "graphics" || w[5] == "both")) {
        Process p;
        p.info.pid = static_cast<unsigned int>(b);
        p.info.usedGpuMemory = w[4] == "-" ? NVML_VALUE_NOT_AVAILABLE : static_cast<unsigned long long>(c);
        p.info.gpuInstanceId = NVML_INVALID_INSTANCE_ID;
        p.info.computeInstanceId = NVML_INVALID_INSTANCE_ID;
        if (w.size() == 8) {
          if (!ParseInt(w[6], c) || !ParseInt(w[7], d)) return bad("bad process instance ids");
          p.info.gpuInstanceId = static_cast<unsigned int>(c);
          p.info.computeInstanceId = static_cast<unsigned int>(d);
        }
        p.compute = w[5] != "graphics";
        p.graphics = w[5] != "compute";
        gpu.processes.push_back(p);
      } else if (w[2] == "ecc" && w.size() == 6 && (w[3] == "corrected" || w[3] == "uncorrected") &&
                 (w[4] == "volatile" || w[4] == "aggregate") && ParseInt(w[5], b) && b >= 0) {
        gpu.ecc_enabled = true;
        gpu.ecc[w[3] == "uncorrected" ? NVML_MEMORY_ERROR_TYPE_UNCORRECTED : NVML_MEMORY_ERROR_TYPE_CORRECTED]
               [w[4] == "aggregate" ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC] = static_cast<unsigned long long>(b);
      } else if (w[2] == "retired_pages_pending" && w.size() == 4 && (w[3] == "0" || w[3] == "1")) {
        gpu.retired_pages_pending = w[3] == "1" ? 1 : 0;
      } else if (w[2] == "remapped_rows" && w.size() == 7) {
        for (int k = 0; k < 4; ++k) {
          if (!ParseInt(w[3 + k], b) || b < 0) return bad("bad remapped_rows (four counts)");
          gpu.remapped_rows[k] = static_cast<unsigned int>(b);
        }
        gpu.has_remapped_rows = true;
      } else if (w[2] == "clocks_event_reasons" && w.size() == 4) {
        char* end = nullptr;
        gpu.clocks_event_reasons = std::strtoull(w[3].c_str(), &end, 0);
        if (end == w[3].c_str() || *end != '\0') return bad("bad clocks_event_reasons (a mask)");
        gpu.has_clocks_event_reasons = true;
      } else if (w[2] == "event_types" && w.size() == 4) {
        char* end = nullptr;
        gpu.event_types = std::strtoull(w[3].c_str(), &end, 0);
        if (end == w[3].c_str() || *end != '\0') return bad("bad event_types (a mask)");
      } else if (w[2] == "mig_mode" && w.size() == 5 && ParseInt(w[3], b) && ParseInt(w[4], c)) {
        gpu.mig_current = static_cast<unsigned int>(b);
        gpu.mig_pending = static_cast<unsigned int>(c);
      } else if (w[2] == "mig" && w.size() >= 6 && ParseInt(w[3], b) && b >= 0 && b < 7) {
        Mig& mig = gpu.migs[static_cast<unsigned int>(b)];
        if (w[4] == "uuid" && w.size() == 6) {
          mig.uuid = w[5];
        } else if (w[4] == "name") {
          mig.name = rest(5);
        } else if (w[4] == "instance" && w.size() == 7 && ParseInt(w[5], c) && ParseInt(w[6], d)) {
          mig.gpu_instance = static_cast<unsigned int>(c);
          mig.compute_instance = static_cast<unsigned int>(d);
        } else if (w[4] == "memory" && w.size() == 8 && ParseInt(w[5], a) && ParseInt(w[6], c) && ParseInt(w[7], d)) {
          mig.memory = {static_cast<unsigned long long>(a), static_cast<unsigned long long>(c),
                        static_cast<unsigned long long>(d)};
        } else {
          return bad("bad mig directive");
        }
      } else {
        return bad("bad device directive");
      }
    } else if (std::string rule_error; fake::ParseRule(w, CodeNames(), config.rules, rule_error)) {
      if (!rule_error.empty()) return bad(rule_error.c_str());
    } else {
      return bad("unknown directive");
    }
  }
  for (size_t i = 0; i < config.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    if (config.gpus[i].bus_id.empty()) {
      error = path + ": device " + std::to_string(i) + " has no bus_id (devices must be numbered 0..n-1)";
      return false;
    }
    config.handles.push_back({&config, gpu, -1});
    config.handle_of[{gpu, -1}] = &config.handles.back();
    for (const auto& [slot, mig] : config.gpus[i].migs) {
      config.handles.push_back({&config, gpu, static_cast<int>(slot)});
      config.handle_of[{gpu, static_cast<int>(slot)}] = &config.handles.back();
    }
  }
  return true;
}

}  // namespace

std::string TargetOf(const nvmlDevice_st* handle) {
  if (handle == nullptr) return "-";
  std::string target = std::to_string(handle->gpu);
  if (handle->mig >= 0) target += "/" + std::to_string(handle->mig);
  return target;
}

// Logs the call and applies the script's directives for it: sleeps, then the scripted error
// (NVML_SUCCESS when there is none), or never returns.
nvmlReturn_t Script(const Config* config, const char* function, const std::string& target) {
  fake::Log("FAKE_NVML_LOG", function, target);
  if (config == nullptr) return NVML_SUCCESS;
  return static_cast<nvmlReturn_t>(fake::Apply(config->rules, function, target));
}

// The current script for calls that name no device; null before nvmlInit_v2.
Config* Current() { return g_current.load(); }
const Gpu& GpuOf(const nvmlDevice_st* handle) { return handle->config->gpus[handle->gpu]; }

namespace {

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

const Mig* MigOf(const nvmlDevice_st* handle) {
  if (handle->mig < 0) return nullptr;
  return &GpuOf(handle).migs.at(static_cast<unsigned int>(handle->mig));
}

// Parses "dddd:bb:dd.f" with any number of domain digits and any case.
bool ParseBusId(const char* text, unsigned int& domain, unsigned int& bus, unsigned int& device) {
  unsigned int function = 0;
  return text != nullptr && std::sscanf(text, "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4;
}

}  // namespace


FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  auto config = std::make_unique<Config>();
  std::string error;
  if (path == nullptr || *path == '\0') {
    error = "FAKE_NVML_CONFIG is not set";
  } else if (!Parse(path, *config, error)) {
    // error says why
  }
  if (!error.empty()) {
    fake::Log("FAKE_NVML_LOG", __func__, "-");
    std::fprintf(stderr, "fake_nvml: %s\n", error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  if (const nvmlReturn_t scripted = Script(config.get(), __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  const std::lock_guard<std::mutex> lock(g_mu);
  g_current.store(config.get());
  g_configs->push_back(std::move(config));
  ++g_init_count;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t scripted = Script(config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  const std::lock_guard<std::mutex> lock(g_mu);
  if (--g_init_count == 0) g_current.store(nullptr);
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t scripted = Script(config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  return CopyString(config->driver_version, version, length);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t scripted = Script(config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *cudaDriverVersion = config->cuda_driver_version;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (const nvmlReturn_t scripted = Script(config, __func__, "-"); scripted != NVML_SUCCESS) return scripted;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned int>(config->gpus.size());
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= config->gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlDevice_st* handle = config->handle_of.at({static_cast<int>(index), -1});
  if (const nvmlReturn_t scripted = Script(config, __func__, TargetOf(handle)); scripted != NVML_SUCCESS) return scripted;
  *device = handle;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  Config* config = Current();
  if (config == nullptr) return NVML_ERROR_UNINITIALIZED;
  unsigned int domain = 0, bus = 0, dev = 0;
  if (device == nullptr || !ParseBusId(pciBusId, domain, bus, dev)) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < config->gpus.size(); ++i) {
    unsigned int d = 0, b = 0, v = 0;
    if (!ParseBusId(config->gpus[i].bus_id.c_str(), d, b, v) || d != domain || b != bus || v != dev) continue;
    nvmlDevice_st* handle = config->handle_of.at({static_cast<int>(i), -1});
    if (const nvmlReturn_t scripted = Script(config, __func__, TargetOf(handle)); scripted != NVML_SUCCESS) {
      return scripted;
    }
    *device = handle;
    return NVML_SUCCESS;
  }
  fake::Log("FAKE_NVML_LOG", __func__, "-");
  return NVML_ERROR_NOT_FOUND;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  FAKE_NVML_DEVICE_CALL(device)
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const Gpu& gpu = GpuOf(device);
  *pci = nvmlPciInfo_t{};
  ParseBusId(gpu.bus_id.c_str(), pci->domain, pci->bus, pci->device);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain & 0xffff, pci->bus,
                pci->device);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", gpu.bus_id.c_str());
  pci->pciDeviceId = 0x10de;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FAKE_NVML_DEVICE_CALL(device)
  const Mig* mig = MigOf(device);
  return CopyString(mig != nullptr ? mig->name : GpuOf(device).name, name, length);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FAKE_NVML_DEVICE_CALL(device)
  const Mig* mig = MigOf(device);
  return CopyString(mig != nullptr ? mig->uuid : GpuOf(device).uuid, uuid, length);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FAKE_NVML_DEVICE_CALL(device)
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (const Mig* mig = MigOf(device)) {
    *memory = mig->memory;
    return NVML_SUCCESS;
  }
  if (!GpuOf(device).has_memory) return NVML_ERROR_NOT_SUPPORTED;
  *memory = GpuOf(device).memory;
  return NVML_SUCCESS;
}

// Both process lists: the GPU's processes of that kind (on a MIG device handle, those in its
// instance), with NVML's count protocol.
static nvmlReturn_t Processes(nvmlDevice_t device, unsigned int* infoCount, nvmlProcessInfo_t* infos, bool graphics) {
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const Mig* mig = MigOf(device);
  std::vector<nvmlProcessInfo_t> list;
  for (const Process& p : GpuOf(device).processes) {
    if (!(graphics ? p.graphics : p.compute)) continue;
    if (mig != nullptr && (p.info.gpuInstanceId != mig->gpu_instance || p.info.computeInstanceId != mig->compute_instance)) {
      continue;
    }
    list.push_back(p.info);
  }
  const unsigned int capacity = *infoCount;
  *infoCount = static_cast<unsigned int>(list.size());
  if (list.size() > capacity || (infos == nullptr && !list.empty())) return NVML_ERROR_INSUFFICIENT_SIZE;
  for (size_t i = 0; i < list.size(); ++i) infos[i] = list[i];
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                      nvmlProcessInfo_t* infos) {
  FAKE_NVML_DEVICE_CALL(device)
  return Processes(device, infoCount, infos, false);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                       nvmlProcessInfo_t* infos) {
  FAKE_NVML_DEVICE_CALL(device)
  return Processes(device, infoCount, infos, true);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int* mode) {
  FAKE_NVML_DEVICE_CALL(device)
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (GpuOf(device).compute_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
  *mode = GpuOf(device).compute_mode;
  return NVML_SUCCESS;
}

// Health calls answer for the GPU itself; a MIG device handle is not one.
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                          nvmlEccCounterType_t counterType,
                                                          unsigned long long* eccCounts) {
  FAKE_NVML_DEVICE_CALL(device)
  if (eccCounts == nullptr || device->mig >= 0 || (errorType != NVML_MEMORY_ERROR_TYPE_CORRECTED &&
                                                   errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
      (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!GpuOf(device).ecc_enabled) return NVML_ERROR_NOT_SUPPORTED;
  *eccCounts = GpuOf(device).ecc[errorType][counterType];
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t* isPending) {
  FAKE_NVML_DEVICE_CALL(device)
  if (isPending == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (GpuOf(device).retired_pages_pending < 0) return NVML_ERROR_NOT_SUPPORTED;
  *isPending = GpuOf(device).retired_pages_pending == 1 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows,
                                                        unsigned int* uncRows, unsigned int* isPending,
                                                        unsigned int* failureOccurred) {
  FAKE_NVML_DEVICE_CALL(device)
  if (corrRows == nullptr || uncRows == nullptr || isPending == nullptr || failureOccurred == nullptr ||
      device->mig >= 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Gpu& gpu = GpuOf(device);
  if (!gpu.has_remapped_rows) return NVML_ERROR_NOT_SUPPORTED;
  *corrRows = gpu.remapped_rows[0];
  *uncRows = gpu.remapped_rows[1];
  *isPending = gpu.remapped_rows[2];
  *failureOccurred = gpu.remapped_rows[3];
  return NVML_SUCCESS;
}

static nvmlReturn_t ClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
  if (reasons == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (!GpuOf(device).has_clocks_event_reasons) return NVML_ERROR_NOT_SUPPORTED;
  *reasons = GpuOf(device).clocks_event_reasons;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                     unsigned long long* clocksEventReasons) {
  FAKE_NVML_DEVICE_CALL(device)
  return ClocksEventReasons(device, clocksEventReasons);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                        unsigned long long* clocksThrottleReasons) {
  FAKE_NVML_DEVICE_CALL(device)
  return ClocksEventReasons(device, clocksThrottleReasons);
}

#ifndef FAKE_NVML_NO_MIG
FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                                   unsigned int* pendingMode) {
  FAKE_NVML_DEVICE_CALL(device)
  if (currentMode == nullptr || pendingMode == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  *currentMode = GpuOf(device).mig_current;
  *pendingMode = GpuOf(device).mig_pending;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  FAKE_NVML_DEVICE_CALL(device)
  if (count == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  *count = GpuOf(device).mig_current == NVML_DEVICE_MIG_ENABLE ? 7 : 0;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                                  nvmlDevice_t* migDevice) {
  FAKE_NVML_DEVICE_CALL(device)
  if (migDevice == nullptr || device->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  const auto it = device->config->handle_of.find({device->gpu, static_cast<int>(index)});
  if (it == device->config->handle_of.end()) return NVML_ERROR_NOT_FOUND;
  *migDevice = it->second;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  FAKE_NVML_DEVICE_CALL(device)
  const Mig* mig = MigOf(device);
  if (id == nullptr || mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = mig->gpu_instance;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  FAKE_NVML_DEVICE_CALL(device)
  const Mig* mig = MigOf(device);
  if (id == nullptr || mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = mig->compute_instance;
  return NVML_SUCCESS;
}
#endif  // FAKE_NVML_NO_MIG
