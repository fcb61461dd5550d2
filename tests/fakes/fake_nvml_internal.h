// What the fake NVML's files share (tests/fakes/fake_nvml.cc, the script and most calls;
// fake_nvml_events.cc, the event calls): the parsed script and the helpers every call starts with.
// The script format is at the top of fake_nvml.cc.
#ifndef DEVPLACE_TESTS_FAKES_FAKE_NVML_INTERNAL_H_
#define DEVPLACE_TESTS_FAKES_FAKE_NVML_INTERNAL_H_

#include <deque>
#include <ios>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/probe/vendor_libs/nvml_api.h"
#include "tests/fakes/fake_script.h"

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  struct Config* config;
  int gpu;
  int mig;  // -1: the GPU itself
};

// An event set: the GPUs registered on it and how much of the xid_events file it has read.
struct nvmlEventSet_st {
  struct Config* config;
  std::vector<int> gpus;
  std::streamoff offset = 0;
};

struct Mig {
  std::string uuid, name;
  unsigned int gpu_instance = 0, compute_instance = 0;
  nvmlMemory_t memory = {};
};

struct Process {
  nvmlProcessInfo_t info = {};
  bool compute = false, graphics = false;
};

struct Gpu {
  std::string bus_id, name, uuid;
  int compute_mode = -1;  // -1: NOT_SUPPORTED
  std::vector<Process> processes;
  bool has_memory = false;
  nvmlMemory_t memory = {};
  unsigned int mig_current = 0, mig_pending = 0;
  std::map<unsigned int, Mig> migs;  // by slot
  // Health: absent values answer NVML_ERROR_NOT_SUPPORTED.
  bool ecc_enabled = false;
  unsigned long long ecc[2][2] = {};  // [nvmlMemoryErrorType_t][nvmlEccCounterType_t]
  int retired_pages_pending = -1;
  bool has_remapped_rows = false;
  unsigned int remapped_rows[4] = {};  // correctable, uncorrectable, pending, failure
  bool has_clocks_event_reasons = false;
  unsigned long long clocks_event_reasons = 0;
  unsigned long long event_types = 0x1f;
};

struct Config {
  std::string driver_version = "550.54.15";
  int cuda_driver_version = 12040;
  std::string xid_events;  // the file the event calls read XIDs from; empty: none
  std::vector<Gpu> gpus;
  std::vector<fake::Rule> rules;
  std::deque<nvmlDevice_st> handles;  // stable addresses
  std::map<std::pair<int, int>, nvmlDevice_st*> handle_of;
};


// The handle's target in the script's directives ("<i>", "<i>/<j>", "-" for none).
std::string TargetOf(const nvmlDevice_st* handle);
// Logs the call and applies the script's directives for it: sleeps, then the scripted error
// (NVML_SUCCESS when there is none), or never returns.
nvmlReturn_t Script(const Config* config, const char* function, const std::string& target);
// The current script for calls that name no device; null before nvmlInit_v2.
Config* Current();
const Gpu& GpuOf(const nvmlDevice_st* handle);

// The handle-taking calls start with this: log, script, then `body` when the script lets the
// call through.
#define FAKE_NVML_DEVICE_CALL(handle)                                                          \
  if ((handle) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;                                 \
  if (const nvmlReturn_t scripted = Script((handle)->config, __func__, TargetOf(handle));     \
      scripted != NVML_SUCCESS)                                                                \
    return scripted;

#endif  // DEVPLACE_TESTS_FAKES_FAKE_NVML_INTERNAL_H_
