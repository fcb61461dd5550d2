#include "tests/common/fixtures.h"

namespace devplace::testing {

std::string FixtureHost(const std::string& name) { return FixtureFile("hosts/" + name); }

std::string FixtureFile(const std::string& path) { return std::string(DEVPLACE_FIXTURES_DIR) + "/" + path; }

}  // namespace devplace::testing
