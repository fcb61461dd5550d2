// fake_cuda: a stand-in for libcuda.so.1 in tests. It exports exactly the CUDA driver API
// functions devplace's cuda prober looks up (server/probe/vendor_libs/cuda_api.h, same signatures) and
// answers them from a scripted fixture file, honouring CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES
// the way the real runtime does: both are read once, at cuInit.
//
// The script's path comes from FAKE_CUDA_CONFIG, read at cuInit (unset or malformed: cuInit
// fails with CUDA_ERROR_UNKNOWN and says why on stderr). When FAKE_CUDA_LOG names a file, each
// cuInit appends "cuInit CUDA_DEVICE_ORDER=<value|unset> CUDA_VISIBLE_DEVICES=<value|unset>".
//
// Script format: one directive per line; '#' starts a comment; blank lines are ignored.
//
//   device <bus id> <name to end of line>   one GPU; the devices are listed FASTEST FIRST (the
//                                           order CUDA uses when CUDA_DEVICE_ORDER is unset or
//                                           FASTEST_FIRST); with CUDA_DEVICE_ORDER=PCI_BUS_ID
//                                           they are sorted by bus id. <bus id> is what
//                                           cuDeviceGetPCIBusId returns ("0000:02:00.0")
//   fail <function> <code>                  the call returns <code>: a number or a name without
//                                           the CUDA_ERROR_ prefix (NO_DEVICE, UNKNOWN, ...)
//   hang <function>                         the call never returns
//
// CUDA_VISIBLE_DEVICES, when set, keeps the listed ordinals of the ordered list, in list order
// (an entry that is not an ordinal of it ends the list).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "server/probe/vendor_libs/cuda_api.h"

#define FAKE_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Gpu {
  std::string bus_id, name;
};

struct Script {
  std::vector<Gpu> gpus;                 // as listed (fastest first)
  std::map<std::string, int> fail;       // function -> code
  std::vector<std::string> hang;         // functions
};

Script* g_script = nullptr;              // set by a successful cuInit
std::vector<Gpu>* g_enumerated = nullptr;

int CodeOf(const std::string& text) {
  static const std::map<std::string, int> kNames = {
      {"INVALID_VALUE", CUDA_ERROR_INVALID_VALUE},   {"NOT_INITIALIZED", CUDA_ERROR_NOT_INITIALIZED},
      {"NO_DEVICE", CUDA_ERROR_NO_DEVICE},           {"INVALID_DEVICE", CUDA_ERROR_INVALID_DEVICE},
      {"INSUFFICIENT_DRIVER", CUDA_ERROR_INSUFFICIENT_DRIVER}, {"STUB_LIBRARY", CUDA_ERROR_STUB_LIBRARY},
      {"UNKNOWN", CUDA_ERROR_UNKNOWN},
  };
  auto it = kNames.find(text);
  if (it != kNames.end()) return it->second;
  return std::atoi(text.c_str());
}

bool Load(const char* path, Script& out, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = std::string("cannot read ") + path;
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string verb;
    if (!(words >> verb)) continue;
    if (verb == "device") {
      Gpu g;
      words >> g.bus_id;
      std::getline(words >> std::ws, g.name);
      if (g.bus_id.empty()) {
        error = "line " + std::to_string(number) + ": device needs a bus id";
        return false;
      }
      out.gpus.push_back(g);
    } else if (verb == "fail") {
      std::string fn, code;
      words >> fn >> code;
      out.fail[fn] = CodeOf(code);
    } else if (verb == "hang") {
      std::string fn;
      words >> fn;
      out.hang.push_back(fn);
    } else {
      error = "line " + std::to_string(number) + ": unknown directive " + verb;
      return false;
    }
  }
  return true;
}

// The scripted outcome of `function`: hangs, or returns the failure code (0: go on).
int Scripted(const Script& s, const char* function) {
  if (std::find(s.hang.begin(), s.hang.end(), function) != s.hang.end()) {
    while (true) pause();
  }
  auto it = s.fail.find(function);
  return it == s.fail.end() ? CUDA_SUCCESS : it->second;
}

void Log(const char* order, const char* visible) {
  const char* path = std::getenv("FAKE_CUDA_LOG");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "cuInit CUDA_DEVICE_ORDER=%s CUDA_VISIBLE_DEVICES=%s\n", order ? order : "unset",
                 visible ? visible : "unset");
    std::fclose(f);
  }
}

bool ValidDevice(CUdevice d) { return g_enumerated != nullptr && d >= 0 && d < static_cast<int>(g_enumerated->size()); }

CUresult CopyOut(const std::string& text, char* out, int len) {
  if (out == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t n = std::min(text.size(), static_cast<size_t>(len - 1));
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_CUDA_EXPORT CUresult cuInit(unsigned int flags) {
  (void)flags;
  const char* order = std::getenv("CUDA_DEVICE_ORDER");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  Log(order, visible);
  const char* path = std::getenv("FAKE_CUDA_CONFIG");
  auto* script = new Script;
  std::string error;
  if (path == nullptr || !Load(path, *script, error)) {
    std::fprintf(stderr, "fake_cuda: %s\n", path == nullptr ? "FAKE_CUDA_CONFIG is not set" : error.c_str());
    return CUDA_ERROR_UNKNOWN;
  }
  if (const int r = Scripted(*script, "cuInit")) return static_cast<CUresult>(r);
  auto* list = new std::vector<Gpu>(script->gpus);
  if (order != nullptr && std::strcmp(order, "PCI_BUS_ID") == 0) {
    std::stable_sort(list->begin(), list->end(), [](const Gpu& a, const Gpu& b) { return a.bus_id < b.bus_id; });
  }
  if (visible != nullptr) {
    std::vector<Gpu> kept;
    std::stringstream entries(visible);
    std::string e;
    while (std::getline(entries, e, ',')) {
      char* end = nullptr;
      const long i = std::strtol(e.c_str(), &end, 10);
      if (end == e.c_str() || i < 0 || i >= static_cast<long>(list->size())) break;
      kept.push_back((*list)[static_cast<size_t>(i)]);
    }
    *list = kept;
  }
  g_script = script;
  g_enumerated = list;
  return CUDA_SUCCESS;
}

FAKE_CUDA_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (g_script == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (const int r = Scripted(*g_script, "cuDeviceGetCount")) return static_cast<CUresult>(r);
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(g_enumerated->size());
  return CUDA_SUCCESS;
}

FAKE_CUDA_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (g_script == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (const int r = Scripted(*g_script, "cuDeviceGet")) return static_cast<CUresult>(r);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

FAKE_CUDA_EXPORT CUresult cuDeviceGetPCIBusId(char* pci_bus_id, int len, CUdevice device) {
  if (g_script == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (const int r = Scripted(*g_script, "cuDeviceGetPCIBusId")) return static_cast<CUresult>(r);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  return CopyOut((*g_enumerated)[static_cast<size_t>(device)].bus_id, pci_bus_id, len);
}

FAKE_CUDA_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
  if (g_script == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (const int r = Scripted(*g_script, "cuDeviceGetName")) return static_cast<CUresult>(r);
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  return CopyOut((*g_enumerated)[static_cast<size_t>(device)].name, name, len);
}
