// fake_amdsmi: a stand-in for libamd_smi.so in tests. It exports the AMD SMI functions devplace's
// prober looks up (server/probe/vendor_libs/amdsmi_api.h, same signatures) and answers them from a scripted
// fixture file. Built as libfake_amdsmi.so; libfake_amdsmi_nopartition.so is the same without the
// partition functions (an older library).
//
// The script's path comes from FAKE_AMDSMI_CONFIG, read at each amdsmi_init (unset or malformed:
// amdsmi_init fails with AMDSMI_STATUS_INIT_ERROR and says why on stderr). With FAKE_AMDSMI_LOG
// naming a file, every call is appended to it as "<function> <target>".
//
// Script: one directive per line, '#' comments. <i> is a device index (0..n-1; each device is its
// own socket with one processor, as on a host of discrete GPUs).
//   driver_version <text>                  amdsmi_get_gpu_driver_info (default 6.7.0)
//   device <i> bus_id <dddd:bb:dd.f>       amdsmi_get_gpu_device_bdf
//   device <i> name <text to end of line>  amdsmi_get_gpu_asic_info market_name
//   device <i> uuid <text>                 amdsmi_get_gpu_device_uuid
//   device <i> memory <total> <used>       amdsmi_get_gpu_memory_total / _usage (VRAM, bytes;
//                                          absent: AMDSMI_STATUS_NOT_SUPPORTED)
//   device <i> compute_partition <mode>    amdsmi_get_gpu_compute_partition (absent: NOT_SUPPORTED)
//   device <i> memory_partition <mode>     amdsmi_get_gpu_memory_partition (absent: NOT_SUPPORTED)
//   device <i> duplicate                   the device is listed twice (a CPX partition's processor)
// plus fail / sleep / hang / crash (tests/fakes/fake_script.h); codes are named without the
// AMDSMI_STATUS_ prefix (NOT_FOUND, NOT_SUPPORTED, NO_PERM, DRIVER_NOT_LOADED, IO, ...).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "server/probe/vendor_libs/amdsmi_api.h"
#include "tests/fakes/fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Gpu {
  int index = 0;
  std::string bus_id, name, uuid, compute_partition, memory_partition;
  bool has_memory = false;
  uint64_t total = 0, used = 0;
  bool duplicate = false;
};

struct Config {
  std::string driver_version = "6.7.0";
  std::vector<Gpu> gpus;
  std::vector<fake::Rule> rules;
  std::vector<int> processors;  // device index per processor handle slot
};

Config* g_config = nullptr;  // the script of the last amdsmi_init (kept: handles point into it)

const std::map<std::string, long long>& Codes() {
  static const auto* codes = new std::map<std::string, long long>{
      {"INVAL", AMDSMI_STATUS_INVAL},
      {"NOT_SUPPORTED", AMDSMI_STATUS_NOT_SUPPORTED},
      {"NOT_YET_IMPLEMENTED", AMDSMI_STATUS_NOT_YET_IMPLEMENTED},
      {"DRM_ERROR", AMDSMI_STATUS_DRM_ERROR},
      {"API_FAILED", AMDSMI_STATUS_API_FAILED},
      {"TIMEOUT", AMDSMI_STATUS_TIMEOUT},
      {"NO_PERM", AMDSMI_STATUS_NO_PERM},
      {"IO", AMDSMI_STATUS_IO},
      {"INIT_ERROR", AMDSMI_STATUS_INIT_ERROR},
      {"BUSY", AMDSMI_STATUS_BUSY},
      {"NOT_FOUND", AMDSMI_STATUS_NOT_FOUND},
      {"NOT_INIT", AMDSMI_STATUS_NOT_INIT},
      {"DRIVER_NOT_LOADED", AMDSMI_STATUS_DRIVER_NOT_LOADED},
      {"NO_DATA", AMDSMI_STATUS_NO_DATA},
  };
  return *codes;
}

bool Load(const char* path, Config& config, std::string& error) {
  std::map<int, Gpu> gpus;
  const auto directive = [&](const std::vector<std::string>& w, const std::string& line) -> std::string {
    long long a = 0, b = 0;
    if (w[0] == "driver_version" && w.size() == 2) {
      config.driver_version = w[1];
    } else if (w[0] == "device" && w.size() >= 3 && fake::ParseNumber(w[1], a) && a >= 0) {
      Gpu& gpu = gpus[static_cast<int>(a)];
      gpu.index = static_cast<int>(a);
      if (w[2] == "bus_id" && w.size() == 4) {
        gpu.bus_id = w[3];
      } else if (w[2] == "name" && w.size() >= 4) {
        gpu.name = fake::RestOfLine(line, 3);
      } else if (w[2] == "uuid" && w.size() == 4) {
        gpu.uuid = w[3];
      } else if (w[2] == "memory" && w.size() == 5 && fake::ParseNumber(w[3], a) && fake::ParseNumber(w[4], b)) {
        gpu.has_memory = true;
        gpu.total = static_cast<uint64_t>(a);
        gpu.used = static_cast<uint64_t>(b);
      } else if (w[2] == "compute_partition" && w.size() == 4) {
        gpu.compute_partition = w[3];
      } else if (w[2] == "memory_partition" && w.size() == 4) {
        gpu.memory_partition = w[3];
      } else if (w[2] == "duplicate" && w.size() == 3) {
        gpu.duplicate = true;
      } else {
        return std::string("bad device directive");
      }
    } else {
      return std::string("unknown directive");
    }
    return std::string();
  };
  if (!fake::ReadScript(path, Codes(), config.rules, directive, error)) return false;
  int expected = 0;
  for (auto& [index, gpu] : gpus) {
    if (index != expected++) {
      error = std::string(path) + ": devices must be numbered 0..n-1";
      return false;
    }
    if (gpu.bus_id.empty()) {
      error = std::string(path) + ": device " + std::to_string(index) + " has no bus_id";
      return false;
    }
    config.gpus.push_back(gpu);
  }
  return true;
}

// Socket and processor handles are 1-based indexes into the config, cast to pointers.
void* Handle(size_t i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1)); }
const Gpu* GpuOf(void* handle) {
  const uintptr_t slot = reinterpret_cast<uintptr_t>(handle);
  if (g_config == nullptr || slot == 0 || slot > g_config->processors.size()) return nullptr;
  return &g_config->gpus[static_cast<size_t>(g_config->processors[slot - 1])];
}

amdsmi_status_t Script(const char* function, const std::string& target) {
  fake::Log("FAKE_AMDSMI_LOG", function, target);
  if (g_config == nullptr) return AMDSMI_STATUS_SUCCESS;
  return static_cast<amdsmi_status_t>(fake::Apply(g_config->rules, function, target));
}

// The scripted outcome of a call on processor `handle`; NOT_INIT before amdsmi_init, INVAL for
// a handle this library did not hand out.
amdsmi_status_t DeviceCall(const char* function, void* handle, const Gpu*& gpu) {
  gpu = GpuOf(handle);
  if (g_config == nullptr) return AMDSMI_STATUS_NOT_INIT;
  if (gpu == nullptr) return AMDSMI_STATUS_INVAL;
  return Script(function, std::to_string(gpu->index));
}

amdsmi_status_t CopyText(const std::string& value, char* out, size_t length) {
  if (out == nullptr || length == 0) return AMDSMI_STATUS_INVAL;
  if (value.size() + 1 > length) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return AMDSMI_STATUS_SUCCESS;
}

}  // namespace

FAKE_EXPORT amdsmi_status_t amdsmi_init(uint64_t init_flags) {
  if ((init_flags & AMDSMI_INIT_AMD_GPUS) == 0) return AMDSMI_STATUS_INVAL;
  const char* path = std::getenv("FAKE_AMDSMI_CONFIG");
  auto* config = new Config;
  std::string error = "FAKE_AMDSMI_CONFIG is not set";
  if (path == nullptr || !Load(path, *config, error)) {
    std::fprintf(stderr, "fake_amdsmi: %s\n", error.c_str());
    delete config;
    return AMDSMI_STATUS_INIT_ERROR;
  }
  for (const Gpu& gpu : config->gpus) {
    config->processors.push_back(gpu.index);
    if (gpu.duplicate) config->processors.push_back(gpu.index);
  }
  Config* old = g_config;
  g_config = config;
  const amdsmi_status_t r = Script("amdsmi_init", "-");
  if (r != AMDSMI_STATUS_SUCCESS) {
    g_config = old;
    delete config;
    return r;
  }
  delete old;
  return AMDSMI_STATUS_SUCCESS;
}

FAKE_EXPORT amdsmi_status_t amdsmi_shut_down(void) {
  const amdsmi_status_t r = Script("amdsmi_shut_down", "-");
  delete g_config;
  g_config = nullptr;
  return r;
}

// Sockets are the processor slots: one processor each.
FAKE_EXPORT amdsmi_status_t amdsmi_get_socket_handles(uint32_t* socket_count, amdsmi_socket_handle* socket_handles) {
  if (g_config == nullptr) return AMDSMI_STATUS_NOT_INIT;
  if (socket_count == nullptr) return AMDSMI_STATUS_INVAL;
  if (const amdsmi_status_t r = Script("amdsmi_get_socket_handles", "-")) return r;
  const uint32_t n = static_cast<uint32_t>(g_config->processors.size());
  if (socket_handles == nullptr) {
    *socket_count = n;
    return AMDSMI_STATUS_SUCCESS;
  }
  const uint32_t filled = std::min(*socket_count, n);
  for (uint32_t i = 0; i < filled; ++i) socket_handles[i] = Handle(i);
  *socket_count = filled;
  return AMDSMI_STATUS_SUCCESS;
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket_handle, uint32_t* processor_count,
                                                         amdsmi_processor_handle* processor_handles) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_processor_handles", socket_handle, gpu)) return r;
  if (processor_count == nullptr) return AMDSMI_STATUS_INVAL;
  if (processor_handles == nullptr) {
    *processor_count = 1;
    return AMDSMI_STATUS_SUCCESS;
  }
  if (*processor_count < 1) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
  processor_handles[0] = socket_handle;
  *processor_count = 1;
  return AMDSMI_STATUS_SUCCESS;
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle processor_handle, amdsmi_bdf_t* bdf) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_device_bdf", processor_handle, gpu)) return r;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (bdf == nullptr || std::sscanf(gpu->bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    return AMDSMI_STATUS_INVAL;
  }
  bdf->as_uint = (static_cast<uint64_t>(domain) << 16) | (bus << 8) | (device << 3) | function;
  return AMDSMI_STATUS_SUCCESS;
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle processor_handle, unsigned int* uuid_length,
                                                       char* uuid) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_device_uuid", processor_handle, gpu)) return r;
  if (uuid_length == nullptr || *uuid_length < AMDSMI_GPU_UUID_SIZE) return AMDSMI_STATUS_INVAL;
  if (gpu->uuid.empty()) return AMDSMI_STATUS_NOT_SUPPORTED;
  return CopyText(gpu->uuid, uuid, *uuid_length);
}

// Writes market_name at offset 0, inside the smallest amdsmi_asic_info_t of any release.
FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle processor_handle, void* info) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_asic_info", processor_handle, gpu)) return r;
  return CopyText(gpu->name, static_cast<char*>(info), 64);
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_driver_info(amdsmi_processor_handle processor_handle, void* info) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_driver_info", processor_handle, gpu)) return r;
  return CopyText(g_config->driver_version, static_cast<char*>(info), 64);
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_memory_total(amdsmi_processor_handle processor_handle,
                                                        amdsmi_memory_type_t mem_type, uint64_t* total) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_memory_total", processor_handle, gpu)) return r;
  if (total == nullptr) return AMDSMI_STATUS_INVAL;
  if (mem_type != AMDSMI_MEM_TYPE_VRAM || !gpu->has_memory) return AMDSMI_STATUS_NOT_SUPPORTED;
  *total = gpu->total;
  return AMDSMI_STATUS_SUCCESS;
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_memory_usage(amdsmi_processor_handle processor_handle,
                                                        amdsmi_memory_type_t mem_type, uint64_t* used) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_memory_usage", processor_handle, gpu)) return r;
  if (used == nullptr) return AMDSMI_STATUS_INVAL;
  if (mem_type != AMDSMI_MEM_TYPE_VRAM || !gpu->has_memory) return AMDSMI_STATUS_NOT_SUPPORTED;
  *used = gpu->used;
  return AMDSMI_STATUS_SUCCESS;
}

#ifndef FAKE_AMDSMI_NO_PARTITION
FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle processor_handle,
                                                             char* compute_partition, uint32_t len) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_compute_partition", processor_handle, gpu)) return r;
  if (gpu->compute_partition.empty()) return AMDSMI_STATUS_NOT_SUPPORTED;
  return CopyText(gpu->compute_partition, compute_partition, len);
}

FAKE_EXPORT amdsmi_status_t amdsmi_get_gpu_memory_partition(amdsmi_processor_handle processor_handle,
                                                            char* memory_partition, uint32_t len) {
  const Gpu* gpu = nullptr;
  if (const amdsmi_status_t r = DeviceCall("amdsmi_get_gpu_memory_partition", processor_handle, gpu)) return r;
  if (gpu->memory_partition.empty()) return AMDSMI_STATUS_NOT_SUPPORTED;
  return CopyText(gpu->memory_partition, memory_partition, len);
}
#endif
