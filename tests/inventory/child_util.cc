#include "tests/inventory/child_util.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace devplace::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "devplace-store-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string path = File(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

std::vector<std::string> TempDir::Script(const std::string& name, const std::string& body) const {
  return {"/bin/sh", Write(name, "set -u\n" + body + "\n")};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string ProbeBinary() { return DEVPLACE_PROBE_BINARY; }

std::vector<std::string> ProbeCommand(const std::string& host_root) {
  return {ProbeBinary(), "--host_root=" + host_root};
}

std::string ShellQuote(const std::string& s) { return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'"; }

bool NoChildren() {
  siginfo_t info{};
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

bool ProcessDead(pid_t pid, absl::Duration within) {
  const absl::Time give_up = absl::Now() + within;
  for (;;) {
    // Gone, or a zombie waiting for its (new) parent: state 'Z' after the ") " in /proc/pid/stat.
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(") ");
    if (stat.empty() || (paren != std::string::npos && stat.compare(paren + 2, 1, "Z") == 0)) return true;
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace devplace::testing
