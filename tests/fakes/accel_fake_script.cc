#include "tests/fakes/accel_fake_script.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace fake {
namespace {

std::mutex g_mu;
std::vector<std::unique_ptr<Script>>* g_scripts = new std::vector<std::unique_ptr<Script>>;
std::atomic<const Script*> g_current{nullptr};

bool ParseInt(const std::string& text, long long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtoll(text.c_str(), &end, 0);
  return *end == '\0';
}

bool Parse(const Library& library, const std::string& path, Script& script, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    long long a = 0;
    if (w[0] == "driver_version" && w.size() == 2) {
      script.driver_version = w[1];
    } else if (w[0] == "device" && w.size() >= 4 && ParseInt(w[1], a) && a >= 0 && a < 64) {
      if (script.devices.size() <= static_cast<size_t>(a)) script.devices.resize(a + 1);
      // The text after "device <i> <key>".
      size_t at = 0;
      for (int k = 0; k < 3; ++k) {
        at = line.find_first_not_of(" \t", at);
        at = line.find_first_of(" \t", at);
      }
      at = line.find_first_not_of(" \t", at);
      std::string text = line.substr(at);
      text = text.substr(0, text.find_last_not_of(" \t\r") + 1);
      script.devices[a][w[2]] = text;
    } else if ((w[0] == "fail" || w[0] == "sleep") && w.size() == 4) {
      Rule rule{w[0], w[1], w[2], 0};
      if (w[0] == "fail" && library.codes->count(w[3]) > 0) {
        rule.value = library.codes->at(w[3]);
      } else if (!ParseInt(w[3], a) || (w[0] == "sleep" && a < 0)) {
        error = where + (w[0] == "fail" ? "unknown error code " : "bad milliseconds ") + w[3];
        return false;
      } else {
        rule.value = static_cast<int>(a);
      }
      script.rules.push_back(rule);
    } else if ((w[0] == "hang" || w[0] == "crash") && w.size() == 3) {
      script.rules.push_back({w[0], w[1], w[2], 0});
    } else {
      error = where + "unknown directive";
      return false;
    }
  }
  for (size_t i = 0; i < script.devices.size(); ++i) {
    if (script.Fact(i, "bus_id").empty()) {
      error = path + ": device " + std::to_string(i) + " has no bus_id (devices must be numbered 0..n-1)";
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
  const char* path = std::getenv(library.log_env);
  if (path == nullptr || *path == '\0') return;
  const std::lock_guard<std::mutex> lock(g_mu);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %s\n", function, target.c_str());
    std::fclose(f);
  }
}

int Apply(const Library& library, const Script* script, const char* function, const std::string& target) {
  Log(library, function, target);
  if (script == nullptr) return 0;
  for (const Rule& rule : script->rules) {
    if (rule.function != "*" && rule.function != function) continue;
    if (!(rule.target == target || (rule.target == "*" && target != "-"))) continue;
    if (rule.action == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(rule.value));
    } else if (rule.action == "hang") {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    } else if (rule.action == "crash") {
      volatile int* null = nullptr;
      *null = 1;  // SIGSEGV inside the library, as a wrong ABI guess would cause
    } else {
      return rule.value;
    }
  }
  return 0;
}

}  // namespace fake
