// Helpers for the inventory store tests: the real devplace-probe command line, and checks that no
// child process or killed grandchild is left. (Scratch directories for probe scripts, and
// ReadFile: tests/common/temp_dir.h.)
#ifndef DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_
#define DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/common/command.h"  // ShellQuote, RunCommand

namespace devplace::testing {

// The devplace-probe binary, and its command line for a host tree.
std::string ProbeBinary();
std::vector<std::string> ProbeCommand(const std::string& host_root);

// Whether this process has no child left, running or zombie (reaps none that it finds alive:
// waitid with WNOWAIT).
bool NoChildren();
// Whether process `pid` is gone or a zombie (killed), polling up to `within`.
bool ProcessDead(pid_t pid, absl::Duration within);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_INVENTORY_CHILD_UTIL_H_
