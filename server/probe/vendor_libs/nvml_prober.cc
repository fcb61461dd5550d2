#include "server/probe/vendor_libs/nvml_prober.h"

#include <algorithm>
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/probe/vendor_libs/nvml_api.h"
#include "server/probe/vendor_libs/nvml_health.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/vendor_libs/library_status.h"

namespace devplace::probe {
namespace {

// The library's entry points; null when the library lacks one.
struct NvmlLibrary {
  void* handle = nullptr;
  // Required.
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index = nullptr;
  decltype(&nvmlDeviceGetPciInfo_v3) pci_info = nullptr;
  // Optional: a missing one loses its field only.
  decltype(&nvmlSystemGetDriverVersion) driver_version = nullptr;
  decltype(&nvmlSystemGetCudaDriverVersion_v2) cuda_version = nullptr;
  decltype(&nvmlDeviceGetHandleByPciBusId_v2) by_bus_id = nullptr;
  decltype(&nvmlDeviceGetName) name = nullptr;
  decltype(&nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetMigMode) mig_mode = nullptr;
  decltype(&nvmlDeviceGetMaxMigDeviceCount) max_mig = nullptr;
  decltype(&nvmlDeviceGetMigDeviceHandleByIndex) mig_by_index = nullptr;
  decltype(&nvmlDeviceGetGpuInstanceId) gpu_instance = nullptr;
  decltype(&nvmlDeviceGetComputeInstanceId) compute_instance = nullptr;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) compute_processes = nullptr;
  decltype(&nvmlDeviceGetGraphicsRunningProcesses_v3) graphics_processes = nullptr;
  decltype(&nvmlDeviceGetComputeMode) compute_mode = nullptr;
  // The health counters' calls, looked up only for a full probe (usage refreshes keep the full
  // probe's health).
  NvmlHealthCalls health;
  bool read_health = false;
};

// Looks up `symbol`, recording it in `missing` when absent.
template <typename Fn>
void Resolve(void* handle, const char* symbol, Fn& fn, std::vector<std::string>& missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr) missing.emplace_back(symbol);
}

// Loads the library; on failure fills `out.unusable` and returns false.
bool Load(const std::string& library, bool usage_only, NvmlLibrary& lib, NvmlSnapshot& out) {
  dlerror();
  lib.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    const char* error = dlerror();
    const std::string why = error != nullptr ? error : "dlopen failed";
    out.skipped = absl::StrContains(why, "No such file or directory");
    out.unusable = absl::StrCat(library, out.skipped ? " not found (" : " cannot be loaded (", why, ")");
    return false;
  }
  std::vector<std::string> required, optional;
  Resolve(lib.handle, "nvmlInit_v2", lib.init, required);
  Resolve(lib.handle, "nvmlShutdown", lib.shutdown, required);
  Resolve(lib.handle, "nvmlDeviceGetCount_v2", lib.count, required);
  Resolve(lib.handle, "nvmlDeviceGetHandleByIndex_v2", lib.by_index, required);
  Resolve(lib.handle, "nvmlDeviceGetPciInfo_v3", lib.pci_info, required);
  Resolve(lib.handle, "nvmlSystemGetDriverVersion", lib.driver_version, optional);
  Resolve(lib.handle, "nvmlSystemGetCudaDriverVersion_v2", lib.cuda_version, optional);
  Resolve(lib.handle, "nvmlDeviceGetHandleByPciBusId_v2", lib.by_bus_id, optional);
  Resolve(lib.handle, "nvmlDeviceGetName", lib.name, optional);
  Resolve(lib.handle, "nvmlDeviceGetUUID", lib.uuid, optional);
  Resolve(lib.handle, "nvmlDeviceGetMemoryInfo", lib.memory, optional);
  Resolve(lib.handle, "nvmlDeviceGetMigMode", lib.mig_mode, optional);
  Resolve(lib.handle, "nvmlDeviceGetMaxMigDeviceCount", lib.max_mig, optional);
  Resolve(lib.handle, "nvmlDeviceGetMigDeviceHandleByIndex", lib.mig_by_index, optional);
  Resolve(lib.handle, "nvmlDeviceGetGpuInstanceId", lib.gpu_instance, optional);
  Resolve(lib.handle, "nvmlDeviceGetComputeInstanceId", lib.compute_instance, optional);
  Resolve(lib.handle, "nvmlDeviceGetComputeRunningProcesses_v3", lib.compute_processes, optional);
  Resolve(lib.handle, "nvmlDeviceGetGraphicsRunningProcesses_v3", lib.graphics_processes, optional);
  Resolve(lib.handle, "nvmlDeviceGetComputeMode", lib.compute_mode, optional);
  lib.read_health = !usage_only;
  if (lib.read_health) ResolveNvmlHealthCalls(lib.handle, lib.health, optional);
  if (!required.empty()) {
    out.unusable = absl::StrCat(library, " lacks ", absl::StrJoin(required, ", "),
                                " (not an NVML library, or one too old)");
    dlclose(lib.handle);
    return false;
  }
  if (!optional.empty()) out.notes.push_back(absl::StrCat("library lacks ", absl::StrJoin(optional, ", ")));
  return true;
}

std::string Text(const char* buffer, size_t size) { return std::string(buffer, strnlen(buffer, size)); }

// NVML's form of a canonical bus id: "0000:9a:00.0" -> "00000000:9A:00.0".
std::string NvmlBusId(const std::string& canonical) { return absl::StrCat("0000", absl::AsciiStrToUpper(canonical)); }

// What NVML's answers mean (nvml.h).
CallResult ClassifyNvml(int code) {
  switch (code) {
    case NVML_SUCCESS: return CallResult::kOk;
    case NVML_ERROR_NOT_SUPPORTED: return CallResult::kNotSupported;
    case NVML_ERROR_GPU_IS_LOST: return CallResult::kLost;
    case NVML_ERROR_NO_PERMISSION: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kNvmlErrors = {"NVML", NvmlReturnName, ClassifyNvml, "NVML device", false};

// Reads one NVML session into a snapshot.
class Reader {
 public:
  Reader(const NvmlLibrary& lib, VendorCall& call, NvmlSnapshot& out)
      : lib_(lib), call_(call), out_(out), status_(kNvmlErrors, call, out.notes, out.problems) {}

  void ReadSystem() {
    if (lib_.driver_version != nullptr) {
      char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
      call_.Enter("nvmlSystemGetDriverVersion");
      if (SystemOk(lib_.driver_version(version, sizeof version), "nvmlSystemGetDriverVersion")) {
        out_.driver_version = Text(version, sizeof version);
      }
    }
    if (lib_.cuda_version != nullptr) {
      int version = 0;
      call_.Enter("nvmlSystemGetCudaDriverVersion_v2");
      const nvmlReturn_t r = lib_.cuda_version(&version);
      if (r == NVML_ERROR_LIBRARY_NOT_FOUND) {
        out_.notes.push_back("CUDA driver version unknown: libcuda.so.1 not found (NVML_ERROR_LIBRARY_NOT_FOUND)");
      } else if (SystemOk(r, "nvmlSystemGetCudaDriverVersion_v2")) {
        out_.cuda_driver_version = CudaVersionString(version);
      }
    }
  }

  // GPUs by NVML index, then the PCI scan's NVIDIA GPUs that no index yielded, by bus id.
  void ReadGpus(const std::vector<std::string>& nvidia_bus_ids) {
    call_.Enter("nvmlDeviceGetCount_v2");
    if (!SystemOk(lib_.count(&out_.count), "nvmlDeviceGetCount_v2")) out_.count = 0;
    bool unattributed = false;  // an index whose bus id NVML did not tell
    for (unsigned int i = 0; i < out_.count; ++i) {
      const int index = static_cast<int>(i);
      nvmlDevice_t handle = nullptr;
      call_.Enter("nvmlDeviceGetHandleByIndex_v2", index);
      nvmlReturn_t r = lib_.by_index(i, &handle);
      const char* failed = "nvmlDeviceGetHandleByIndex_v2";
      nvmlPciInfo_t pci = {};
      if (r == NVML_SUCCESS) {
        call_.Enter("nvmlDeviceGetPciInfo_v3", index);
        r = lib_.pci_info(handle, &pci);
        failed = "nvmlDeviceGetPciInfo_v3";
      }
      if (r != NVML_SUCCESS) {
        unattributed = true;
        const std::string what = absl::StrCat("NVML device ", i, ": ", failed, ": ", NvmlReturnName(r));
        const bool finding = r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_NO_PERMISSION;
        (finding ? out_.notes : out_.problems).push_back(what);
        continue;
      }
      absl::StatusOr<std::string> bus_id = NormalizePciBusId(Text(pci.busId, sizeof pci.busId));
      if (!bus_id.ok()) bus_id = NormalizePciBusId(Text(pci.busIdLegacy, sizeof pci.busIdLegacy));
      if (!bus_id.ok()) {
        unattributed = true;
        out_.problems.push_back(absl::StrCat("NVML device ", i, ": unreadable bus id \"",
                                             Text(pci.busId, sizeof pci.busId), "\""));
        continue;
      }
      if (std::any_of(out_.gpus.begin(), out_.gpus.end(), [&](const NvmlGpu& g) { return g.bus_id == *bus_id; })) {
        // Two NVML devices on one bus id: a broken library or snapshot; keep the first, say so.
        out_.problems.push_back(absl::StrCat("NVML device ", i, " repeats bus id ", *bus_id, "; ignored"));
        continue;
      }
      NvmlGpu& gpu = out_.gpus.emplace_back();
      gpu.index = index;
      gpu.bus_id = *bus_id;
      ReadGpu(handle, gpu);
    }

    std::set<std::string> seen;
    for (const NvmlGpu& gpu : out_.gpus) seen.insert(gpu.bus_id);
    for (const std::string& bus_id : nvidia_bus_ids) {
      if (seen.count(bus_id) > 0) continue;
      if (lib_.by_bus_id == nullptr) {
        out_.notes.push_back(unattributed ? absl::StrCat(bus_id, " is not among the NVML devices that answered")
                                          : absl::StrCat(bus_id, " is not listed by NVML"));
        continue;
      }
      nvmlDevice_t handle = nullptr;
      NvmlGpu gpu;
      gpu.bus_id = bus_id;
      call_.Enter("nvmlDeviceGetHandleByPciBusId_v2");
      const nvmlReturn_t r = lib_.by_bus_id(NvmlBusId(bus_id).c_str(), &handle);
      if (r == NVML_ERROR_NOT_FOUND) {
        out_.notes.push_back(absl::StrCat(bus_id, " is not listed by NVML"));
        continue;
      }
      if (GpuOk(r, "nvmlDeviceGetHandleByPciBusId_v2", gpu)) ReadGpu(handle, gpu);
      if (r == NVML_SUCCESS || !gpu.lost.empty() || !gpu.no_permission.empty()) out_.gpus.push_back(std::move(gpu));
    }
  }

 private:
  // A system-wide call's result (kNvmlErrors): true on success; NOT_SUPPORTED leaves the field
  // unset; other errors are problems.
  bool SystemOk(nvmlReturn_t r, const char* call) { return status_.SystemResult(call, r); }

  // A per-GPU call's result (kNvmlErrors): true on success. GPU_IS_LOST marks the GPU lost (no
  // later call is made on it), NO_PERMISSION refused, NOT_SUPPORTED leaves the field unset; other
  // errors are problems.
  bool GpuOk(nvmlReturn_t r, const char* call, NvmlGpu& gpu) { return status_.DeviceResult(Findings(gpu), call, r); }

  // Announces and makes one per-GPU call, unless the GPU is already lost.
  template <typename Fn>
  bool Call(NvmlGpu& gpu, const char* call, Fn fn) {
    return status_.Device(Findings(gpu), call, fn);
  }

  static DeviceFindings Findings(NvmlGpu& gpu) { return {gpu.index, gpu.bus_id, gpu.lost, &gpu.no_permission}; }

  // A string getter (name, UUID) into `value`.
  template <typename Getter>
  void ReadString(NvmlGpu& gpu, const char* call, Getter getter, nvmlDevice_t handle, std::string& value) {
    if (getter == nullptr) return;
    char buffer[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (Call(gpu, call, [&] { return getter(handle, buffer, sizeof buffer); })) value = Text(buffer, sizeof buffer);
  }

  // One of the process lists into `gpu.processes`, merged by pid; false when it could not be read.
  bool ReadProcesses(NvmlGpu& gpu, const char* call, decltype(&nvmlDeviceGetComputeRunningProcesses_v3) fn,
                     nvmlDevice_t handle, bool graphics) {
    if (fn == nullptr) return false;
    unsigned int count = 0;
    std::vector<nvmlProcessInfo_t> infos;
    nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
    // The list can grow between the count and the read: a few tries.
    for (int attempt = 0; attempt < 3 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      infos.assign(std::min(count + 8, kMaxNvmlProcesses), nvmlProcessInfo_t{});
      count = static_cast<unsigned int>(infos.size());
      if (!gpu.lost.empty()) return false;
      call_.Enter(call, gpu.index);
      r = fn(handle, &count, infos.data());
    }
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      out_.notes.push_back(absl::StrCat(gpu.bus_id, ": ", call, " kept growing; processes not read"));
      return false;
    }
    if (!GpuOk(r, call, gpu)) return false;
    if (!gpu.processes) gpu.processes.emplace();
    for (unsigned int i = 0; i < std::min<size_t>(count, infos.size()); ++i) {
      const nvmlProcessInfo_t& info = infos[i];
      auto it = std::find_if(gpu.processes->begin(), gpu.processes->end(),
                             [&](const NvmlProcess& p) { return p.pid == info.pid; });
      NvmlProcess& p = it != gpu.processes->end() ? *it : gpu.processes->emplace_back();
      p.pid = info.pid;
      (graphics ? p.graphics : p.compute) = true;
      if (info.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
        p.used_memory_bytes = std::max<uint64_t>(p.used_memory_bytes.value_or(0), info.usedGpuMemory);
      }
      if (info.gpuInstanceId != NVML_INVALID_INSTANCE_ID) p.gpu_instance_id = info.gpuInstanceId;
      if (info.computeInstanceId != NVML_INVALID_INSTANCE_ID) p.compute_instance_id = info.computeInstanceId;
    }
    return true;
  }

  // The compute mode and both process lists (without the compute list the count would mislead:
  // then no processes at all).
  void ReadUsage(nvmlDevice_t handle, NvmlGpu& gpu) {
    int mode = 0;
    if (lib_.compute_mode != nullptr &&
        Call(gpu, "nvmlDeviceGetComputeMode", [&] { return lib_.compute_mode(handle, &mode); })) {
      gpu.compute_mode = mode;
    }
    if (!ReadProcesses(gpu, "nvmlDeviceGetComputeRunningProcesses_v3", lib_.compute_processes, handle, false)) {
      gpu.processes.reset();
      return;
    }
    ReadProcesses(gpu, "nvmlDeviceGetGraphicsRunningProcesses_v3", lib_.graphics_processes, handle, true);
  }

  void ReadGpu(nvmlDevice_t handle, NvmlGpu& gpu) {
    ReadString(gpu, "nvmlDeviceGetName", lib_.name, handle, gpu.name);
    ReadString(gpu, "nvmlDeviceGetUUID", lib_.uuid, handle, gpu.uuid);
    nvmlMemory_t memory = {};
    if (lib_.memory != nullptr &&
        Call(gpu, "nvmlDeviceGetMemoryInfo", [&] { return lib_.memory(handle, &memory); })) {
      gpu.memory_total_bytes = memory.total;
      gpu.memory_free_bytes = std::min(memory.free, memory.total);  // never more free than there is
    }
    ReadUsage(handle, gpu);
    if (lib_.read_health) {
      ReadNvmlHealth(lib_.health, handle, {gpu.index, gpu.bus_id, gpu.lost, gpu.health_counters}, status_, out_.notes);
    }
    unsigned int current = 0, pending = 0;
    if (lib_.mig_mode == nullptr ||
        !Call(gpu, "nvmlDeviceGetMigMode", [&] { return lib_.mig_mode(handle, &current, &pending); })) {
      return;
    }
    gpu.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
    if (!*gpu.mig_enabled) return;
    if (lib_.max_mig == nullptr || lib_.mig_by_index == nullptr) {
      out_.notes.push_back(absl::StrCat(gpu.bus_id, " has MIG enabled; the library cannot list MIG devices"));
      return;
    }
    unsigned int slots = 0;
    if (!Call(gpu, "nvmlDeviceGetMaxMigDeviceCount", [&] { return lib_.max_mig(handle, &slots); })) return;
    for (unsigned int j = 0; j < slots && gpu.lost.empty(); ++j) {
      nvmlDevice_t mig = nullptr;
      call_.Enter("nvmlDeviceGetMigDeviceHandleByIndex", gpu.index);
      const nvmlReturn_t r = lib_.mig_by_index(handle, j, &mig);
      if (r == NVML_ERROR_NOT_FOUND) continue;  // an empty slot
      if (GpuOk(r, "nvmlDeviceGetMigDeviceHandleByIndex", gpu)) ReadMig(mig, gpu);
    }
  }

  void ReadMig(nvmlDevice_t handle, NvmlGpu& gpu) {
    NvmlMigDevice m;
    ReadString(gpu, "nvmlDeviceGetUUID", lib_.uuid, handle, m.uuid);
    ReadString(gpu, "nvmlDeviceGetName", lib_.name, handle, m.name);
    unsigned int id = 0;
    if (lib_.gpu_instance != nullptr &&
        Call(gpu, "nvmlDeviceGetGpuInstanceId", [&] { return lib_.gpu_instance(handle, &id); })) {
      m.gpu_instance_id = id;
    }
    if (lib_.compute_instance != nullptr &&
        Call(gpu, "nvmlDeviceGetComputeInstanceId", [&] { return lib_.compute_instance(handle, &id); })) {
      m.compute_instance_id = id;
    }
    nvmlMemory_t memory = {};
    if (lib_.memory != nullptr &&
        Call(gpu, "nvmlDeviceGetMemoryInfo", [&] { return lib_.memory(handle, &memory); })) {
      m.memory_total_bytes = memory.total;
      m.memory_free_bytes = std::min(memory.free, memory.total);
    }
    if (gpu.lost.empty()) gpu.mig_devices.push_back(std::move(m));
  }

  const NvmlLibrary& lib_;
  VendorCall& call_;
  NvmlSnapshot& out_;
  LibraryStatus status_;
};

// The partition of `d` for this MIG device: the capability-file one with the same GPU and
// compute instance ids, else a new one.
v1::Partition& PartitionFor(const NvmlMigDevice& m, v1::Device& d) {
  if (m.gpu_instance_id && m.compute_instance_id) {
    for (v1::Partition& p : *d.mutable_partitions()) {
      if (p.gpu_instance_id() == *m.gpu_instance_id && p.compute_instance_id() == *m.compute_instance_id) return p;
    }
  }
  v1::Partition& p = *d.add_partitions();
  if (m.gpu_instance_id) p.set_gpu_instance_id(*m.gpu_instance_id);
  if (m.compute_instance_id) p.set_compute_instance_id(*m.compute_instance_id);
  return p;
}

v1::DeviceUsageProcess ToProcess(const NvmlProcess& p) {
  v1::DeviceUsageProcess out;
  out.set_pid(p.pid);
  if (p.used_memory_bytes) out.set_used_memory_bytes(*p.used_memory_bytes);
  out.set_kind(p.compute && p.graphics ? v1::DEVICE_USAGE_PROCESS_KIND_COMPUTE_AND_GRAPHICS
               : p.graphics           ? v1::DEVICE_USAGE_PROCESS_KIND_GRAPHICS
                                      : v1::DEVICE_USAGE_PROCESS_KIND_COMPUTE);
  return out;
}

// Device.usage and each MIG instance's Partition.usage from what NVML listed.
void MergeNvmlUsage(const NvmlGpu& gpu, v1::Device& d) {
  if (!gpu.compute_mode && !gpu.processes) return;
  v1::DeviceUsage& usage = *d.mutable_usage();
  usage.set_source("nvml");
  if (gpu.compute_mode) {
    switch (*gpu.compute_mode) {
      case NVML_COMPUTEMODE_DEFAULT:
        usage.set_compute_mode(v1::DEVICE_USAGE_COMPUTE_MODE_DEFAULT);
        break;
      case NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
      case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
        usage.set_compute_mode(v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        break;
      case NVML_COMPUTEMODE_PROHIBITED:
        usage.set_compute_mode(v1::DEVICE_USAGE_COMPUTE_MODE_PROHIBITED);
        break;
      default:
        break;
    }
  }
  if (gpu.processes) {
    usage.set_processes_known(true);
    usage.set_process_count(static_cast<uint32_t>(gpu.processes->size()));
    for (const NvmlProcess& p : *gpu.processes) *usage.add_processes() = ToProcess(p);
    // MIG: each instance's own processes, by GPU and compute instance id.
    for (v1::Partition& part : *d.mutable_partitions()) {
      v1::DeviceUsage& pu = *part.mutable_usage();
      pu.set_source("nvml");
      pu.set_processes_known(true);
      for (const NvmlProcess& p : *gpu.processes) {
        if (p.gpu_instance_id == part.gpu_instance_id() && p.compute_instance_id == part.compute_instance_id()) {
          *pu.add_processes() = ToProcess(p);
        }
      }
      pu.set_process_count(static_cast<uint32_t>(pu.processes_size()));
    }
  }
  usage.set_busy(usage.compute_mode() == v1::DEVICE_USAGE_COMPUTE_MODE_PROHIBITED ||
                 (usage.compute_mode() == v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS && usage.process_count() > 0));
}

}  // namespace

std::string NvmlReturnName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {NVML_SUCCESS, "NVML_SUCCESS"},
      {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED"},
      {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT"},
      {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED"},
      {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION"},
      {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND"},
      {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE"},
      {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED"},
      {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT"},
      {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND"},
      {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND"},
      {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST"},
      {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED"},
      {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
      {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN"},
  };
  return NamedCode(kNames, "NVML", code);
}

std::string MigProfile(absl::string_view mig_device_name) {
  const size_t at = mig_device_name.rfind(" MIG ");
  if (at == absl::string_view::npos) return "";
  return std::string(absl::StripAsciiWhitespace(mig_device_name.substr(at + 5)));
}

std::string CudaVersionString(int version) { return absl::StrCat(version / 1000, ".", version % 1000 / 10); }

NvmlSnapshot ReadNvml(const std::string& library, const std::vector<std::string>& nvidia_bus_ids,
                      VendorCall& call, bool usage_only) {
  NvmlSnapshot out;
  NvmlLibrary lib;
  call.Enter("dlopen");
  if (!Load(library, usage_only, lib, out)) return out;
  call.Enter("nvmlInit_v2");
  const nvmlReturn_t r = lib.init();
  if (r != NVML_SUCCESS) {
    out.skipped = r == NVML_ERROR_DRIVER_NOT_LOADED;
    out.unusable = absl::StrCat(out.skipped ? "NVIDIA driver not loaded: " : "", "nvmlInit_v2: ", NvmlReturnName(r));
    call.Enter("dlclose");
    dlclose(lib.handle);
    return out;
  }
  Reader reader(lib, call, out);
  if (!usage_only) reader.ReadSystem();
  reader.ReadGpus(nvidia_bus_ids);
  call.Enter("nvmlShutdown");
  const nvmlReturn_t shutdown = lib.shutdown();
  if (shutdown != NVML_SUCCESS) out.problems.push_back(absl::StrCat("nvmlShutdown: ", NvmlReturnName(shutdown)));
  call.Enter("dlclose");
  dlclose(lib.handle);
  return out;
}

absl::StatusOr<ProbeOutcome> MergeNvml(const NvmlSnapshot& snapshot, HostFacts& facts) {
  if (snapshot.unusable) {
    if (snapshot.skipped) return Skipped(*snapshot.unusable);
    return absl::InternalError(*snapshot.unusable);
  }
  std::vector<std::string> notes;
  int merged = 0, lost = 0, refused = 0, mig_devices = 0;
  for (const NvmlGpu& gpu : snapshot.gpus) {
    PciFunction* fn = facts.Find(gpu.bus_id);
    if (fn == nullptr || fn->row != v1::ROW_CUDA_NVIDIA) {
      notes.push_back(absl::StrCat("NVML GPU ", gpu.bus_id, gpu.index >= 0 ? absl::StrCat(" (device ", gpu.index, ")") : "",
                                   " is not an NVIDIA GPU of the PCI scan"));
      continue;
    }
    ++merged;
    v1::Device& d = fn->device;
    if (!gpu.name.empty()) d.set_name(gpu.name);
    if (!gpu.uuid.empty()) d.set_uuid(gpu.uuid);
    if (gpu.memory_total_bytes) {
      d.set_memory_total_bytes(*gpu.memory_total_bytes);
      (*d.mutable_attributes())["memory_source"] = "nvml";  // as the other vendor probers name theirs
    }
    if (gpu.memory_free_bytes) d.set_memory_free_bytes(*gpu.memory_free_bytes);
    if (gpu.mig_enabled) (*d.mutable_attributes())["mig_mode"] = *gpu.mig_enabled ? "enabled" : "disabled";
    for (const NvmlMigDevice& m : gpu.mig_devices) {
      v1::Partition& p = PartitionFor(m, d);
      if (!m.uuid.empty()) p.set_uuid(m.uuid);
      const std::string profile = MigProfile(m.name);
      if (!profile.empty()) p.set_profile(profile);
      if (m.memory_total_bytes) p.set_memory_total_bytes(*m.memory_total_bytes);
      if (m.memory_free_bytes) p.set_memory_free_bytes(*m.memory_free_bytes);
      ++mig_devices;
    }
    MergeNvmlUsage(gpu, d);
    for (const v1::HealthCounter& c : gpu.health_counters) {
      if (d.health_counters_size() < kMaxHealthCounters) *d.add_health_counters() = c;
    }
    if (!gpu.lost.empty()) {
      ++lost;
      MarkLost(d, gpu.lost);
    }
    if (!gpu.no_permission.empty()) {
      ++refused;
      fn->inaccessible_reason = absl::StrCat(gpu.no_permission, ": this process may not use ", gpu.bus_id);
    }
  }

  std::vector<std::string> found;
  MergeLibraryDriverVersion(facts, v1::ROW_CUDA_NVIDIA, snapshot.driver_version, "NVML", "kernel module", found, notes);
  if (!snapshot.cuda_driver_version.empty()) {
    found.push_back(absl::StrCat("CUDA ", snapshot.cuda_driver_version));
    if (facts.HasRow(v1::ROW_CUDA_NVIDIA)) {
      facts.backend_attributes[v1::ROW_CUDA_NVIDIA]["cuda_driver_version"] = snapshot.cuda_driver_version;
    }
  }
  found.push_back(absl::StrCat(snapshot.count, " NVML devices, ", merged, " matched by bus id"));
  if (lost > 0) found.push_back(absl::StrCat(lost, " lost"));
  if (refused > 0) found.push_back(absl::StrCat(refused, " not accessible"));
  if (mig_devices > 0) found.push_back(absl::StrCat(mig_devices, " MIG devices"));
  notes.insert(notes.begin(), snapshot.notes.begin(), snapshot.notes.end());
  Problems problems;
  for (const std::string& problem : snapshot.problems) problems.Add(problem);
  return problems.Finish(FoundAndNotes(found, notes));
}

VendorProber NvmlProber(std::string library, bool usage_only) {
  return {"nvml", [library = std::move(library), usage_only](const HostFacts& facts, VendorCall& call) -> VendorMerge {
            std::vector<std::string> nvidia;
            for (const auto& [bus_id, fn] : facts.pci) {
              if (fn.row == v1::ROW_CUDA_NVIDIA) nvidia.push_back(bus_id);
            }
            if (nvidia.empty()) {
              return [](HostFacts&) -> absl::StatusOr<ProbeOutcome> {
                return Skipped("no NVIDIA GPU on the PCI bus");
              };
            }
            auto snapshot = std::make_shared<const NvmlSnapshot>(ReadNvml(library, nvidia, call, usage_only));
            return [snapshot](HostFacts& merged) { return MergeNvml(*snapshot, merged); };
          }};
}

VendorProber prober_factory::nvml(std::string library, const ProbeOptions& options) {
  VendorProber prober = NvmlProber(std::move(library), options.usage_only);
  prober.row = v1::ROW_CUDA_NVIDIA;
  return prober;
}

}  // namespace devplace::probe
