// fake_rocm_smi: a stand-in for librocm_smi64.so.1 (ROCm SMI, AMD GPUs) in tests. Exports the
// ROCm SMI functions devplace's prober looks up (server/probe/vendor_libs/rocm_smi_api.h, same
// signatures) and answers them from a script (format in accel_fake_script.h) named by
// FAKE_ROCM_SMI_CONFIG; FAKE_ROCM_SMI_LOG logs the calls. Unlike the real library it reads no
// /sys: the prober's own check of the KFD topology is pointed at the fixture host with
// ProbeOptions::library_sysfs.
//
// Device keys: bus_id, name, unique_id <number> (rsmi_dev_unique_id_get; e.g. 0x0de0b6b3a7640001),
// memory <total> <used> (VRAM bytes), processes <pid>:<bytes>,... (the compute processes using the
// device and the VRAM each holds on it). An absent key answers RSMI_STATUS_NOT_SUPPORTED. ROCm SMI
// lists processes system-wide, so the fake's process list is every pid of any device (in the
// order they first appear), a pid's GPUs are the devices that list it, and its VRAM
// (rsmi_compute_process_info_by_pid_get) is the sum over them; rsmi_compute_process_info_get
// leaves vram_usage 0, as ROCm SMI 5.2.3 does. The per-process calls name no device: their
// `fail` / `sleep` / `hang` / `crash` target is '-'.
//
// `fail` codes: the rsmi_status_t names without RSMI_STATUS_ (NOT_SUPPORTED, PERMISSION,
// NOT_FOUND, INIT_ERROR, UNKNOWN_ERROR, ...) or numbers. rsmi_init reads the script; an unset
// variable or a malformed script makes it answer RSMI_STATUS_INIT_ERROR.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/probe/vendor_libs/rocm_smi_api.h"
#include "tests/fakes/accel_fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const std::map<std::string, long long> kCodes = {
    {"INVALID_ARGS", RSMI_STATUS_INVALID_ARGS},
    {"NOT_SUPPORTED", RSMI_STATUS_NOT_SUPPORTED},
    {"FILE_ERROR", RSMI_STATUS_FILE_ERROR},
    {"PERMISSION", RSMI_STATUS_PERMISSION},
    {"OUT_OF_RESOURCES", RSMI_STATUS_OUT_OF_RESOURCES},
    {"INTERNAL_EXCEPTION", RSMI_STATUS_INTERNAL_EXCEPTION},
    {"INPUT_OUT_OF_BOUNDS", RSMI_STATUS_INPUT_OUT_OF_BOUNDS},
    {"INIT_ERROR", RSMI_STATUS_INIT_ERROR},
    {"NOT_YET_IMPLEMENTED", RSMI_STATUS_NOT_YET_IMPLEMENTED},
    {"NOT_FOUND", RSMI_STATUS_NOT_FOUND},
    {"INSUFFICIENT_SIZE", RSMI_STATUS_INSUFFICIENT_SIZE},
    {"NO_DATA", RSMI_STATUS_NO_DATA},
    {"BUSY", RSMI_STATUS_BUSY},
    {"UNKNOWN_ERROR", RSMI_STATUS_UNKNOWN_ERROR},
};
const fake::Library kLibrary = {"FAKE_ROCM_SMI_CONFIG", "FAKE_ROCM_SMI_LOG", &kCodes};

// A call that names no device: the script's answer when it has one, else `answer(script)`.
template <typename Answer>
rsmi_status_t OnSystem(const char* function, Answer answer) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return RSMI_STATUS_INIT_ERROR;
  if (const int r = fake::Apply(kLibrary, script, function, "-"); r != 0) return static_cast<rsmi_status_t>(r);
  return answer(*script);
}

// A call on device `dv_ind`: the script's answer when it has one, else `answer(script, dv_ind)`.
template <typename Answer>
rsmi_status_t OnDevice(uint32_t dv_ind, const char* function, Answer answer) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return RSMI_STATUS_INIT_ERROR;
  if (dv_ind >= script->devices.size()) return RSMI_STATUS_INVALID_ARGS;
  if (const int r = fake::Apply(kLibrary, script, function, std::to_string(dv_ind)); r != 0) {
    return static_cast<rsmi_status_t>(r);
  }
  return answer(*script, size_t{dv_ind});
}

// One process of the script: its pid, the devices that list it and its VRAM on them together.
struct Process {
  uint32_t pid = 0;
  std::vector<uint32_t> devices;
  uint64_t vram = 0;
};

// Every process of every device's "processes" key, in the order they first appear.
std::vector<Process> Processes(const fake::Script& script) {
  std::vector<Process> processes;
  for (size_t i = 0; i < script.devices.size(); ++i) {
    const std::string text = script.Fact(i, "processes");
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find(',', at), text.size());
      unsigned pid = 0;
      unsigned long long bytes = 0;
      if (std::sscanf(text.substr(at, end - at).c_str(), "%u:%llu", &pid, &bytes) == 2) {
        auto it = processes.begin();
        while (it != processes.end() && it->pid != pid) ++it;
        Process& p = it != processes.end() ? *it : processes.emplace_back();
        p.pid = pid;
        p.devices.push_back(static_cast<uint32_t>(i));
        p.vram += bytes;
      }
      at = end + 1;
    }
  }
  return processes;
}

// The two-call list convention of rsmi_compute_process_info_get / rsmi_compute_process_gpus_get:
// null `out` gives the count; else up to *count are written, *count becomes the number written, and
// INSUFFICIENT_SIZE says there were more.
template <typename T>
rsmi_status_t FillList(const std::vector<T>& items, T* out, uint32_t* count) {
  if (count == nullptr) return RSMI_STATUS_INVALID_ARGS;
  if (out == nullptr) {
    *count = static_cast<uint32_t>(items.size());
    return RSMI_STATUS_SUCCESS;
  }
  const size_t written = std::min<size_t>(*count, items.size());
  for (size_t k = 0; k < written; ++k) out[k] = items[k];
  *count = static_cast<uint32_t>(written);
  return written < items.size() ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

}  // namespace

FAKE_EXPORT rsmi_status_t rsmi_init(uint64_t) {
  return static_cast<rsmi_status_t>(fake::Init(kLibrary, __func__, RSMI_STATUS_INIT_ERROR));
}

FAKE_EXPORT rsmi_status_t rsmi_shut_down(void) {
  return OnSystem(__func__, [](const fake::Script&) { return RSMI_STATUS_SUCCESS; });
}

FAKE_EXPORT rsmi_status_t rsmi_num_monitor_devices(uint32_t* num_devices) {
  return OnSystem(__func__, [&](const fake::Script& script) {
    if (num_devices == nullptr) return RSMI_STATUS_INVALID_ARGS;
    *num_devices = static_cast<uint32_t>(script.devices.size());
    return RSMI_STATUS_SUCCESS;
  });
}

FAKE_EXPORT rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t* bdfid) {
  return OnDevice(dv_ind, __func__, [&](const fake::Script& script, size_t i) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    if (bdfid == nullptr) return RSMI_STATUS_INVALID_ARGS;
    if (std::sscanf(script.Fact(i, "bus_id").c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
      return RSMI_STATUS_UNEXPECTED_DATA;
    }
    *bdfid = (uint64_t{domain} << 32) | (bus << 8) | ((device & 0x1f) << 3) | (function & 0x7);
    return RSMI_STATUS_SUCCESS;
  });
}

FAKE_EXPORT rsmi_status_t rsmi_dev_name_get(uint32_t dv_ind, char* name, size_t len) {
  return OnDevice(dv_ind, __func__, [&](const fake::Script& script, size_t i) {
    if (name == nullptr || len == 0) return RSMI_STATUS_INVALID_ARGS;
    if (!script.Has(i, "name")) return RSMI_STATUS_NOT_SUPPORTED;
    const std::string value = script.Fact(i, "name");
    std::snprintf(name, len, "%s", value.c_str());
    return value.size() + 1 > len ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
  });
}

FAKE_EXPORT rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t* id) {
  return OnDevice(dv_ind, __func__, [&](const fake::Script& script, size_t i) {
    if (id == nullptr) return RSMI_STATUS_INVALID_ARGS;
    if (!script.Has(i, "unique_id")) return RSMI_STATUS_NOT_SUPPORTED;
    *id = std::strtoull(script.Fact(i, "unique_id").c_str(), nullptr, 0);
    return RSMI_STATUS_SUCCESS;
  });
}

namespace {

// rsmi_dev_memory_total_get (`used` false) or rsmi_dev_memory_usage_get: the memory key's figure.
rsmi_status_t MemoryCall(uint32_t dv_ind, const char* function, rsmi_memory_type_t mem_type, bool used,
                         uint64_t* bytes) {
  return OnDevice(dv_ind, function, [&](const fake::Script& script, size_t i) {
    if (bytes == nullptr || mem_type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_INVALID_ARGS;
    unsigned long long total = 0, in_use = 0;
    if (std::sscanf(script.Fact(i, "memory").c_str(), "%llu %llu", &total, &in_use) != 2) {
      return RSMI_STATUS_NOT_SUPPORTED;
    }
    *bytes = used ? in_use : total;
    return RSMI_STATUS_SUCCESS;
  });
}

}  // namespace

FAKE_EXPORT rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* total) {
  return MemoryCall(dv_ind, __func__, mem_type, false, total);
}

FAKE_EXPORT rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* used) {
  return MemoryCall(dv_ind, __func__, mem_type, true, used);
}

FAKE_EXPORT rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t* procs, uint32_t* num_items) {
  return OnSystem(__func__, [&](const fake::Script& script) {
    std::vector<rsmi_process_info_t> list;
    for (const Process& p : Processes(script)) {
      rsmi_process_info_t info = {};
      info.process_id = p.pid;
      info.pasid = p.pid;  // any stable value: devplace does not read it
      list.push_back(info);
    }
    return FillList(list, procs, num_items);
  });
}

FAKE_EXPORT rsmi_status_t rsmi_compute_process_info_by_pid_get(uint32_t pid, rsmi_process_info_t* proc) {
  return OnSystem(__func__, [&](const fake::Script& script) {
    if (proc == nullptr) return RSMI_STATUS_INVALID_ARGS;
    for (const Process& p : Processes(script)) {
      if (p.pid != pid) continue;
      *proc = rsmi_process_info_t{};
      proc->process_id = p.pid;
      proc->pasid = p.pid;
      proc->vram_usage = p.vram;
      return RSMI_STATUS_SUCCESS;
    }
    return RSMI_STATUS_NOT_FOUND;
  });
}

FAKE_EXPORT rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* dv_indices, uint32_t* num_devices) {
  return OnSystem(__func__, [&](const fake::Script& script) {
    for (const Process& p : Processes(script)) {
      if (p.pid == pid) return FillList(p.devices, dv_indices, num_devices);
    }
    return RSMI_STATUS_NOT_FOUND;
  });
}
