// The core every scripted fake vendor library shares (fake_nvml.cc, fake_amdsmi.cc, fake_ze.cc,
// and through accel_fake_script.cc fake_hlml, fake_dcmi, fake_cndev, fake_mtml, fake_rocm_smi): reading a script,
// its common directives (errors, slow, never-returning and crashing calls), the word splitter and
// the call log. Header-only: each fake is its own shared library with hidden visibility.
//
// Common directives (one per line, '#' starts a comment):
//   fail <function> <target> <code>   the call returns <code>: a name from the fake's table of
//                                     codes (without the vendor prefix) or a number
//   sleep <function> <target> <ms>    the call sleeps that long first
//   hang <function> <target>          the call never returns
//   crash <function> <target>         the call dies of SIGSEGV (a bad pointer inside the library)
// <function> is a library function name or '*'; <target> is '-' for calls that name no device,
// a device index for calls on that device, or '*' for any device. Directives apply in file
// order: sleeps accumulate, the first matching fail, hang or crash decides.
#ifndef DEVPLACE_TESTS_FAKES_FAKE_SCRIPT_H_
#define DEVPLACE_TESTS_FAKES_FAKE_SCRIPT_H_

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fake {

struct Rule {
  std::string action;  // fail, sleep, hang, crash
  std::string function;
  std::string target;
  long long value = 0;  // fail: the code; sleep: milliseconds
};

inline std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The text after the first `skip` words of `line` (a name with spaces), trimmed.
inline std::string RestOfLine(const std::string& line, size_t skip) {
  size_t at = 0;
  for (size_t i = 0; i < skip; ++i) {
    at = line.find_first_not_of(" \t", at);
    at = line.find_first_of(" \t", at);
    if (at == std::string::npos) return "";
  }
  at = line.find_first_not_of(" \t", at);
  if (at == std::string::npos) return "";
  const size_t end = line.find_last_not_of(" \t\r");
  return line.substr(at, end - at + 1);
}

inline bool ParseNumber(const std::string& text, long long& value) {
  char* end = nullptr;
  value = std::strtoll(text.c_str(), &end, 0);
  return !text.empty() && end != nullptr && *end == '\0';
}

// Parses `w` when it is a common directive: returns false when it is not one; else appends the
// rule, or sets `error` when it is malformed.
inline bool ParseRule(const std::vector<std::string>& w, const std::map<std::string, long long>& codes,
                      std::vector<Rule>& rules, std::string& error) {
  if (w.empty()) return false;
  const std::string& action = w[0];
  if (action != "fail" && action != "sleep" && action != "hang" && action != "crash") return false;
  const size_t want = action == "fail" || action == "sleep" ? 4 : 3;
  if (w.size() != want) {
    error = "bad " + action + " directive";
    return true;
  }
  Rule rule{action, w[1], w[2], 0};
  if (action == "fail") {
    const auto named = codes.find(w[3]);
    if (named != codes.end()) {
      rule.value = named->second;
    } else if (!ParseNumber(w[3], rule.value)) {
      error = "unknown error code " + w[3];
      return true;
    }
  } else if (action == "sleep" && (!ParseNumber(w[3], rule.value) || rule.value < 0)) {
    error = "bad sleep milliseconds";
    return true;
  }
  rules.push_back(rule);
  return true;
}

// Reads the script at `path`: drops '#' comments and blank lines, parses the common directives
// into `rules`, and hands every other line to `directive(words, line)`, which returns "" or what
// is wrong with it. False with `error` = "<path>:<line>: <why>" at the first bad line.
template <typename Directive>
bool ReadScript(const char* path, const std::map<std::string, long long>& codes, std::vector<Rule>& rules,
                Directive directive, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = std::string("cannot read ") + path;
    return false;
  }
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    const std::vector<std::string> w = Words(line);
    if (w.empty()) continue;
    std::string why;
    if (!ParseRule(w, codes, rules, why)) why = directive(w, line);
    if (!why.empty()) {
      error = std::string(path) + ":" + std::to_string(line_number) + ": " + why;
      return false;
    }
  }
  return true;
}

// Appends "<function> <target>" to the file named by the environment variable `log_variable`.
inline void Log(const char* log_variable, const char* function, const std::string& target) {
  const char* path = std::getenv(log_variable);
  if (path == nullptr || *path == '\0') return;
  static std::mutex mu;
  const std::lock_guard<std::mutex> lock(mu);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %s\n", function, target.c_str());
    std::fclose(f);
  }
}

// Applies the rules for this call: sleeps, then the first fail (its code), hang (never returns)
// or crash (SIGSEGV). Returns 0 when no fail matched.
inline long long Apply(const std::vector<Rule>& rules, const char* function, const std::string& target) {
  for (const Rule& rule : rules) {
    if (rule.function != "*" && rule.function != function) continue;
    if (!(rule.target == target || (rule.target == "*" && target != "-"))) continue;
    if (rule.action == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(rule.value));
    } else if (rule.action == "hang") {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    } else if (rule.action == "crash") {
      std::signal(SIGSEGV, SIG_DFL);  // a sanitizer's handler would turn it into an exit
      std::raise(SIGSEGV);
    } else {
      return rule.value;
    }
  }
  return 0;
}

}  // namespace fake

#endif  // DEVPLACE_TESTS_FAKES_FAKE_SCRIPT_H_
