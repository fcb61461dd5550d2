// One golden inventory per fixture host: the probe library's output on
// tests/fixtures/hosts/<name> (probed_at and durations cleared) must equal
// tests/golden/probe/<name>.json. Regenerate after an intended change with
//   DEVPLACE_UPDATE_GOLDENS=1 ctest --preset dev -R Golden
// and review the diff line by line.
#include <filesystem>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "server/common/json.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

const std::string kHosts[] = {
    "amd-2x-mi210",           "arm64-cpu",           "cpu-only",         "hpu-2x-gaudi2",
    "mixed-nvidia-amd-igpu",  "mlu-2x-mlu370",       "musa-2x-s4000",    "neuron-2x-trn1",
    "npu-2x-910b",            "nvidia-2x-h100",      "nvidia-container", "nvidia-driver-not-loaded",
    "nvidia-fell-off-bus",    "nvidia-mig",          "tpu-2x-v5e",       "xpu-2x-arc",
    "nvidia-mixed-models",    "amd-2x-mi210-kfd-order", "nvidia-3x-h100-health", "amd-2x-mi210-ras",
};

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesGoldenJson) {
  const std::string host = GetParam();
  ExpectMatchesGolden(ProbeHost(host), std::string(DEVPLACE_GOLDEN_DIR) + "/" + host + ".json",
                      "inventory of " + host);
}

TEST_P(GoldenTest, IsDeterministic) {
  const v1::Inventory inventory = ProbeHost(GetParam());
  EXPECT_EQ(devplace::ToJson(inventory).value(), devplace::ToJson(ProbeHost(GetParam())).value());
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
