#include "tests/fakes/accel_fake_script.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace fake {
namespace {

std::mutex g_mu;
std::vector<std::unique_ptr<Script>>* g_scripts = new std::vector<std::unique_ptr<Script>>;
std::atomic<const Script*> g_current{nullptr};

// The directives of this format; the common ones (fail, sleep, hang, crash) are ReadScript's.
bool Parse(const Library& library, const char* path, Script& script, std::string& error) {
  auto directive = [&script](const std::vector<std::string>& w, const std::string& line) -> std::string {
    long long i = 0;
    if (w[0] == "driver_version" && w.size() == 2) {
      script.driver_version = w[1];
    } else if (w[0] == "device" && w.size() >= 4 && ParseNumber(w[1], i) && i >= 0 && i < 64) {
      if (script.devices.size() <= static_cast<size_t>(i)) script.devices.resize(i + 1);
      script.devices[i][w[2]] = RestOfLine(line, 3);
    } else {
      return "unknown directive";
    }
    return "";
  };
  if (!ReadScript(path, *library.codes, script.rules, directive, error)) return false;
  for (size_t i = 0; i < script.devices.size(); ++i) {
    if (script.Fact(i, "bus_id").empty()) {
      error = std::string(path) + ": device " + std::to_string(i) + " has no bus_id (devices must be numbered 0..n-1)";
      return false;
    }
  }
  return true;
}

}  // namespace

std::string Script::Fact(size_t i, const std::string& key) const {
  if (i >= devices.size()) return "";
  const auto it = devices[i].find(key);
  return it == devices[i].end() ? "" : it->second;
}

bool Script::Has(size_t i, const std::string& key) const { return i < devices.size() && devices[i].count(key) > 0; }

const Script* Load(const Library& library) {
  const char* path = std::getenv(library.config_env);
  auto script = std::make_unique<Script>();
  std::string error;
  if (path == nullptr || *path == '\0') {
    error = std::string(library.config_env) + " is not set";
  } else {
    Parse(library, path, *script, error);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "fake library: %s\n", error.c_str());
    return nullptr;
  }
  const std::lock_guard<std::mutex> lock(g_mu);
  const Script* loaded = script.get();
  g_scripts->push_back(std::move(script));
  g_current.store(loaded);
  return loaded;
}

const Script* Current() { return g_current.load(); }

void Log(const Library& library, const char* function, const std::string& target) {
  fake::Log(library.log_env, function, target);
}

int Apply(const Library& library, const Script* script, const char* function, const std::string& target) {
  Log(library, function, target);
  return script == nullptr ? 0 : static_cast<int>(fake::Apply(script->rules, function, target));
}

int Init(const Library& library, const char* function, int unusable) {
  const Script* script = Load(library);
  if (script == nullptr) {
    Log(library, function, "-");
    return unusable;
  }
  return Apply(library, script, function, "-");
}

}  // namespace fake
