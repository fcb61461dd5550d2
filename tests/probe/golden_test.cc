// One golden inventory per fixture host: the probe library's output on
// tests/fixtures/hosts/<name> (probed_at and durations cleared) must equal
// tests/golden/probe/<name>.json. Regenerate after an intended change with
//   DEVPLACE_UPDATE_GOLDENS=1 ctest --preset dev -R Golden
// and review the diff line by line.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/inventory/json.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

const std::string kHosts[] = {
    "amd-2x-mi210",           "arm64-cpu",           "cpu-only",         "hpu-2x-gaudi2",
    "mixed-nvidia-amd-igpu",  "mlu-2x-mlu370",       "musa-2x-s4000",    "neuron-2x-trn1",
    "npu-2x-910b",            "nvidia-2x-h100",      "nvidia-container", "nvidia-driver-not-loaded",
    "nvidia-fell-off-bus",    "nvidia-mig",          "tpu-2x-v5e",       "xpu-2x-arc",
};

bool UpdateGoldens() {
  const char* v = std::getenv("DEVPLACE_UPDATE_GOLDENS");
  return v != nullptr && std::string(v) == "1";
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesGoldenJson) {
  const std::string host = GetParam();
  const absl::StatusOr<std::string> json = inventory::ToJson(ProbeHost(host));
  ASSERT_TRUE(json.ok()) << json.status();
  const std::string golden = std::string(DEVPLACE_GOLDEN_DIR) + "/" + host + ".json";
  if (UpdateGoldens()) {
    std::filesystem::create_directories(DEVPLACE_GOLDEN_DIR);
    std::ofstream(golden, std::ios::trunc) << *json << "\n";
    GTEST_SKIP() << "wrote " << golden;
  }
  std::ifstream in(golden);
  ASSERT_TRUE(in.good()) << "missing " << golden << "; run with DEVPLACE_UPDATE_GOLDENS=1 to create it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(*json + "\n", expected.str())
      << "inventory of " << host << " differs from " << golden
      << " (if intended: DEVPLACE_UPDATE_GOLDENS=1, then review the diff)";
}

TEST_P(GoldenTest, IsDeterministic) {
  const v1::Inventory inventory = ProbeHost(GetParam());
  EXPECT_EQ(inventory::ToJson(inventory).value(), inventory::ToJson(ProbeHost(GetParam())).value());
}

INSTANTIATE_TEST_SUITE_P(Hosts, GoldenTest, ::testing::ValuesIn(kHosts),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) c = (c == '-') ? '_' : c;
                           return name;
                         });

// Every fixture host has a golden test, and every golden file a fixture host.
TEST(GoldenCoverageTest, EveryHostHasAGolden) {
  std::set<std::string> hosts, listed(std::begin(kHosts), std::end(kHosts)), goldens;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(DEVPLACE_FIXTURES_DIR) + "/hosts")) {
    if (entry.is_directory()) hosts.insert(entry.path().filename().string());
  }
  EXPECT_EQ(hosts, listed);
  if (UpdateGoldens()) return;
  for (const auto& entry : std::filesystem::directory_iterator(DEVPLACE_GOLDEN_DIR)) {
    goldens.insert(entry.path().stem().string());
  }
  EXPECT_EQ(goldens, listed);
}

}  // namespace
}  // namespace devplace::testing
