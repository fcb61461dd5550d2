// Where the tests' fixtures are: tests/fixtures/ (DEVPLACE_FIXTURES_DIR, set by tests/CMakeLists.txt).
#ifndef DEVPLACE_TESTS_COMMON_FIXTURES_H_
#define DEVPLACE_TESTS_COMMON_FIXTURES_H_

#include <string>

namespace devplace::testing {

// The fake host tree tests/fixtures/hosts/<name> (its README.md lists them), for --host_root or
// probe::HostRoot. Nothing is checked: a name without a tree gives a path that does not exist.
std::string FixtureHost(const std::string& name);

// The file or directory tests/fixtures/<path>, e.g. "nvml/h100.txt" (a fake vendor library's
// script, named by its FAKE_<LIB>_CONFIG variable). Nothing is checked.
std::string FixtureFile(const std::string& path);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_FIXTURES_H_
