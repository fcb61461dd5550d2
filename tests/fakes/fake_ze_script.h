// The script of the fake Level Zero libraries (format at the top of fake_ze.cc), shared by
// fake_ze (a stand-in for the loader, Sysman calls) and fake_ze_driver (a driver for the real
// loader, core calls). Include it after the Level Zero declarations of the including fake (the
// project's server/probe/vendor_libs/level_zero_api.h, or the loader's own level_zero/ze_api.h and
// zes_api.h): it names their ZE_RESULT_ERROR_* and ZES_MEM_HEALTH_* values, which both spell alike.
#ifndef DEVPLACE_TESTS_FAKES_FAKE_ZE_SCRIPT_H_
#define DEVPLACE_TESTS_FAKES_FAKE_ZE_SCRIPT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/fakes/fake_script.h"

namespace fake_ze {

struct Module {
  long long tile = -1;
  uint64_t size = 0, free = 0;
  uint32_t health = ZES_MEM_HEALTH_OK;
};

struct Gpu {
  std::string bus_id, name, uuid;
  uint32_t tiles = 0;
  std::vector<Module> memory;
  std::vector<std::pair<uint32_t, uint64_t>> processes;
};

struct Script {
  std::string driver_version = "1.3.29735";
  std::vector<Gpu> gpus;
  std::vector<fake::Rule> rules;
};

inline const std::map<std::string, long long>& Codes() {
  static const auto* codes = new std::map<std::string, long long>{
      {"DEVICE_LOST", ZE_RESULT_ERROR_DEVICE_LOST},
      {"INSUFFICIENT_PERMISSIONS", ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS},
      {"NOT_AVAILABLE", ZE_RESULT_ERROR_NOT_AVAILABLE},
      {"DEPENDENCY_UNAVAILABLE", ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE},
      {"UNINITIALIZED", ZE_RESULT_ERROR_UNINITIALIZED},
      {"UNSUPPORTED_FEATURE", ZE_RESULT_ERROR_UNSUPPORTED_FEATURE},
      {"INVALID_ARGUMENT", ZE_RESULT_ERROR_INVALID_ARGUMENT},
      {"UNKNOWN", ZE_RESULT_ERROR_UNKNOWN},
  };
  return *codes;
}

// Reads the script at `path` into `config`; false with `error` when it does not parse.
inline bool LoadScript(const char* path, Script& config, std::string& error) {
  std::map<int, Gpu> gpus;
  const auto directive = [&](const std::vector<std::string>& w, const std::string& line) -> std::string {
    long long a = 0, b = 0, c = 0;
    if (w[0] == "driver_version" && w.size() == 2) {
      config.driver_version = w[1];
    } else if (w[0] == "device" && w.size() >= 3 && fake::ParseNumber(w[1], a) && a >= 0) {
      Gpu& gpu = gpus[static_cast<int>(a)];
      if (w[2] == "bus_id" && w.size() == 4) {
        gpu.bus_id = w[3];
      } else if (w[2] == "name" && w.size() >= 4) {
        gpu.name = fake::RestOfLine(line, 3);
      } else if (w[2] == "uuid" && w.size() == 4 && w[3].size() == 32) {
        gpu.uuid = w[3];
      } else if (w[2] == "process" && w.size() == 5 && fake::ParseNumber(w[3], b) && fake::ParseNumber(w[4], c)) {
        gpu.processes.emplace_back(static_cast<uint32_t>(b), static_cast<uint64_t>(c));
      } else if (w[2] == "tiles" && w.size() == 4 && fake::ParseNumber(w[3], b)) {
        gpu.tiles = static_cast<uint32_t>(b);
      } else if (w[2] == "memory" && (w.size() == 6 || w.size() == 7) && fake::ParseNumber(w[4], b) &&
                 fake::ParseNumber(w[5], c)) {
        Module m;
        if (w[3] != "-" && !fake::ParseNumber(w[3], m.tile)) return std::string("bad memory tile");
        m.size = static_cast<uint64_t>(b);
        m.free = static_cast<uint64_t>(c);
        if (w.size() == 7) {
          const std::map<std::string, uint32_t> health = {{"ok", ZES_MEM_HEALTH_OK},
                                                          {"degraded", ZES_MEM_HEALTH_DEGRADED},
                                                          {"critical", ZES_MEM_HEALTH_CRITICAL},
                                                          {"replace", ZES_MEM_HEALTH_REPLACE}};
          if (health.count(w[6]) == 0) return std::string("bad memory health");
          m.health = health.at(w[6]);
        }
        gpu.memory.push_back(m);
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
    if (index != expected++ || gpu.bus_id.empty()) {
      error = std::string(path) + ": devices must be numbered 0..n-1, each with a bus_id";
      return false;
    }
    config.gpus.push_back(gpu);
  }
  return true;
}

}  // namespace fake_ze

#endif  // DEVPLACE_TESTS_FAKES_FAKE_ZE_SCRIPT_H_
