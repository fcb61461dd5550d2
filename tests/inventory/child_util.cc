#include "tests/inventory/child_util.h"

#include <sys/wait.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {

std::string ProbeBinary() { return DEVPLACE_PROBE_BINARY; }

std::vector<std::string> ProbeCommand(const std::string& host_root) {
  return {ProbeBinary(), "--host_root=" + host_root};
}


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
