// Helpers for the inventory store tests: a scratch directory for probe scripts, the real
// devplace-probe command line, and checks that no child process or killed grandchild is left.
#ifndef DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_
#define DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace devplace::testing {

// A fresh temporary directory, removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // <path>/<name>.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to <path>/<name>; returns the file's path.
  std::string Write(const std::string& name, const std::string& content) const;
  // Writes a /bin/sh script (the body, after a `set -u` line) and returns the command that runs
  // it: {"/bin/sh", <path>/<name>} (no exec of a just-written file, so no ETXTBSY).
  std::vector<std::string> Script(const std::string& name, const std::string& body) const;

 private:
  std::string path_;
};

// Reads a whole file ("" when missing).
std::string ReadFile(const std::string& path);

// The devplace-probe binary, and its command line for a host tree.
std::string ProbeBinary();
std::vector<std::string> ProbeCommand(const std::string& host_root);
// A shell word: `s` in single quotes.
std::string ShellQuote(const std::string& s);

// Whether this process has no child left, running or zombie (reaps none that it finds alive:
// waitid with WNOWAIT).
bool NoChildren();
// Whether process `pid` is gone or a zombie (killed), polling up to `within`.
bool ProcessDead(pid_t pid, absl::Duration within);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_
