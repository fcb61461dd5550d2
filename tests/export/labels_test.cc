// Node labels: a golden label file per fixture host (tests/golden/labels/<host>.txt, built from the
// probe goldens tests/golden/probe/<host>.json, nvml-<name>.txt from tests/golden/nvml, whose
// inventories carry NVML's facts: CUDA driver version, MIG mode, memory, and accel-<name>.txt from
// tests/golden/accel, with HLML / DCMI / CNDev / MTML memory and its source). Regenerate after an
// intended change with
//   DEVPLACE_UPDATE_GOLDENS=1 ctest --preset dev -R Labels
// and review the diff. Every label of every fixture and of adversarial inventories must pass the
// Kubernetes syntax check in k8s_syntax.h.
#include "server/export/labels.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/export/fixture_inventories.h"
#include "tests/export/k8s_syntax.h"

namespace devplace::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

constexpr char kPrefix[] = "devplace.feature.node.kubernetes.io/";

bool UpdateGoldens() {
  const char* v = std::getenv("DEVPLACE_UPDATE_GOLDENS");
  return v != nullptr && std::string(v) == "1";
}

std::string LabelText(const v1::Inventory& inv) {
  std::string text;
  for (const auto& [key, value] : labels::NodeLabels(inv)) text += key + "=" + value + "\n";
  return text;
}

std::map<std::string, std::string> LabelMap(const v1::Inventory& inv) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : labels::NodeLabels(inv)) {
    EXPECT_TRUE(out.emplace(key.substr(std::string(kPrefix).size()), value).second) << "duplicate key " << key;
  }
  return out;
}

TEST(LabelsGoldenTest, EveryFixtureMatchesItsGolden) {
  std::set<std::string> expected_goldens;
  for (const auto& [name, source] : Fixtures()) {
    SCOPED_TRACE(name);
    const std::string golden = std::string(DEVPLACE_LABELS_GOLDEN_DIR) + "/" + name + ".txt";
    expected_goldens.insert(name + ".txt");
    const std::string text = LabelText(LoadInventory(source));
    if (UpdateGoldens()) {
      std::ofstream(golden, std::ios::trunc) << text;
      continue;
    }
    EXPECT_EQ(text, ReadFile(golden)) << "labels of " << source << " differ from " << golden
                                      << " (if intended: DEVPLACE_UPDATE_GOLDENS=1, then review the diff)";
  }
  std::set<std::string> goldens;
  for (const auto& e : fs::directory_iterator(DEVPLACE_LABELS_GOLDEN_DIR)) goldens.insert(e.path().filename().string());
  EXPECT_EQ(goldens, expected_goldens) << "a golden without a fixture, or the reverse";
}

// <row>.healthy counts the devices whose health is OK: on nvidia-3x-h100-health one GPU is
// DEGRADED (its link trained down) and one FAULT (a fatal AER error), so 1 of 3, and 2 usable.
TEST(LabelsTest, HealthyCountsTheDevicesWhoseHealthIsOk) {
  const auto l = LabelMap(LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/nvidia-3x-h100-health.json"));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.count", "3")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.usable", "2")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.healthy", "1")));
  const auto all = LabelMap(LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/nvidia-2x-h100.json"));
  EXPECT_THAT(all, Contains(Pair("cuda-nvidia.healthy", "2")));
}

TEST(LabelsSyntaxTest, EveryFixtureLabelIsValidKubernetes) {
  for (const auto& [name, source] : Fixtures()) {
    const std::vector<labels::Label> node_labels = labels::NodeLabels(LoadInventory(source));
    EXPECT_FALSE(node_labels.empty()) << name;
    for (const auto& [key, value] : node_labels) {
      EXPECT_TRUE(absl::StartsWith(key, kPrefix)) << key;
      EXPECT_EQ(CheckLabel(key, value), "") << name << ": " << key << "=" << value;
    }
  }
}

// What a scheduler selects on, for one host of each kind (the goldens hold the rest).
TEST(LabelsContentTest, NvidiaWithNvml) {
  const auto l = LabelMap(LoadInventory(std::string(DEVPLACE_NVML_GOLDEN_DIR) + "/2x-h100.json"));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.present", "true")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.count", "2")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.usable", "2")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.device-type", "cuda")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.cuda.driver.major", "12")));
  EXPECT_THAT(l, Contains(Key("cuda-nvidia.memory")));
  EXPECT_THAT(l, Contains(Key("cuda-nvidia.product")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.mig.capable", "true")));
  EXPECT_THAT(l, Contains(Pair("cpu.capability", "AVX512")));
}

TEST(LabelsContentTest, UnknownFactsAreOmittedNotGuessed) {
  // Without NVML: no CUDA driver version, no MIG mode, no memory.
  const auto l = LabelMap(LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/nvidia-2x-h100.json"));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.count", "2")));
  EXPECT_THAT(l, Not(Contains(Key("cuda-nvidia.cuda.driver.major"))));
  EXPECT_THAT(l, Not(Contains(Key("cuda-nvidia.mig.capable"))));
  EXPECT_THAT(l, Not(Contains(Key("cuda-nvidia.memory"))));
  EXPECT_THAT(l, Not(Contains(Key("torch.version"))));
}

TEST(LabelsContentTest, PresentButNotUsable) {
  const auto l = LabelMap(LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/nvidia-driver-not-loaded.json"));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.present", "true")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.usable", "0")));
  EXPECT_THAT(l, Contains(Pair("cuda-nvidia.state", "driver_not_loaded")));
}

TEST(LabelsContentTest, CpuOnlyHostHasHostLabelsOnly) {
  const auto l = LabelMap(LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/cpu-only.json"));
  for (const auto& [key, value] : l) EXPECT_TRUE(absl::StartsWith(key, "cpu.")) << key;
  EXPECT_THAT(l, Contains(Key("cpu.capability")));
}

// An inventory with one row and the given devices.
v1::Inventory OneRow(v1::Row row, const std::string& name, const std::vector<v1::Device>& devices) {
  v1::Inventory inv;
  inv.add_backends()->set_row(v1::ROW_CPU);
  v1::Backend* b = inv.add_backends();
  b->set_row(row);
  b->set_name(name);
  b->set_device_type("cuda");
  b->set_package("torch");
  b->set_state(v1::BACKEND_STATE_READY);
  for (const v1::Device& d : devices) *b->add_devices() = d;
  return inv;
}

v1::Device Dev(const std::string& name, std::optional<uint64_t> mib, bool usable = true) {
  v1::Device d;
  d.set_name(name);
  if (mib) d.set_memory_total_bytes(*mib * 1024 * 1024);
  d.set_usable(usable);
  return d;
}

TEST(LabelsContentTest, HeterogeneousRowTakesMinimumMemoryAndSaysMixed) {
  const auto l = LabelMap(OneRow(v1::ROW_CUDA_AMD, "cuda/amd",
                                 {Dev("AMD Instinct MI210", 65520), Dev("AMD Radeon Graphics", 512, false)}));
  EXPECT_THAT(l, Contains(Pair("cuda-amd.memory", "512")));
  EXPECT_THAT(l, Contains(Pair("cuda-amd.product", "mixed")));
  EXPECT_THAT(l, Contains(Pair("cuda-amd.count", "2")));
  EXPECT_THAT(l, Contains(Pair("cuda-amd.usable", "1")));
}

TEST(LabelsContentTest, OneUnknownMemoryOmitsTheMemoryLabel) {
  const auto l = LabelMap(OneRow(v1::ROW_XPU, "xpu", {Dev("Intel Arc A770", 16384), Dev("Intel Arc A770", std::nullopt)}));
  EXPECT_THAT(l, Not(Contains(Key("xpu.memory"))));
  EXPECT_THAT(l, Contains(Pair("xpu.product", "Intel-Arc-A770")));
}

TEST(LabelsSanitizeTest, Rules) {
  EXPECT_EQ(labels::SanitizeLabelValue("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(labels::SanitizeLabelValue("Tesla V100/SXM2 (16GB)"), "Tesla-V100-SXM2-16GB");
  EXPECT_EQ(labels::SanitizeLabelValue("535.104.05+custom"), "535.104.05-custom");
  EXPECT_EQ(labels::SanitizeLabelValue("Ascend 910B \u00e9\u2122 \u6607\u817e"), "Ascend-910B");
  EXPECT_EQ(labels::SanitizeLabelValue("  __x__  "), "x");
  EXPECT_EQ(labels::SanitizeLabelValue("NO AVX"), "NO-AVX");
  EXPECT_EQ(labels::SanitizeLabelValue(""), "");
  EXPECT_EQ(labels::SanitizeLabelValue("\u6607\u817e"), "");
  EXPECT_EQ(labels::SanitizeLabelValue(std::string(200, 'a')), std::string(63, 'a'));
  // A cut that ends on a separator loses it.
  EXPECT_EQ(labels::SanitizeLabelValue(std::string(62, 'a') + " b"), std::string(62, 'a'));
}

TEST(LabelsSyntaxTest, AdversarialInventoriesStayValidAndNothingIsDropped) {
  const std::vector<std::string> names = {
      "GPU with spaces", "vendor/model/rev", "\u00c9lan \u2122 \u6607\u817e 910", std::string(200, 'x'),
      std::string(70, '-') + "end", "", "...", "a+b=c", "tab\there\nnewline", "\xff\xfe invalid utf8"};
  for (const std::string& name : names) {
    v1::Inventory inv = OneRow(v1::ROW_CUDA_NVIDIA, "cuda/nvidia", {Dev(name, 40960)});
    v1::Backend* b = inv.mutable_backends(1);
    b->set_driver_version(name.empty() ? "550.54.15+" : name + "+1");
    (*b->mutable_attributes())["cuda_driver_version"] = "12.4+x";
    inv.mutable_host()->mutable_cpu()->set_architecture(name);
    inv.mutable_host()->mutable_cpu()->set_torch_cpu_capability(name);
    inv.mutable_torch()->set_probed(true);
    inv.mutable_torch()->set_version(name + "+cu121");
    const auto l = LabelMap(inv);
    for (const auto& [key, value] : labels::NodeLabels(inv)) {
      EXPECT_EQ(CheckLabel(key, value), "") << "from name '" << name << "': " << key << "=" << value;
    }
    // Known facts keep their label even when sanitising leaves little (or nothing) of them.
    EXPECT_THAT(l, Contains(Key("cuda-nvidia.driver"))) << name;
    EXPECT_THAT(l, Contains(Key("torch.version"))) << name;
    EXPECT_THAT(l, Contains(Pair("cuda-nvidia.cuda.driver.minor", "4"))) << name;
    if (!name.empty()) {
      EXPECT_THAT(l, Contains(Key("cuda-nvidia.product"))) << name;
      EXPECT_THAT(l, Contains(Key("cpu.capability"))) << name;
    }
  }
}

TEST(FeatureFileTest, ExpiryHeaderFirstThenOneLinePerLabel) {
  const v1::Inventory inv = LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/amd-2x-mi210.json");
  const absl::Time expiry = absl::FromUnixSeconds(1806487200);  // 2027-03-31T10:00:00Z
  const std::string text = labels::FeatureFileText(inv, expiry);
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "# +expiry-time=2027-03-31T10:00:00Z");
  EXPECT_TRUE(absl::StartsWith(lines[1], "# ")) << lines[1];
  EXPECT_FALSE(absl::StartsWith(lines[1], "# +")) << "a second directive NFD would reject: " << lines[1];
  EXPECT_TRUE(absl::EndsWith(text, "\n"));
  EXPECT_EQ(text.substr(text.find('\n', text.find('\n') + 1) + 1), LabelText(inv));
  EXPECT_LT(text.size(), 64u * 1024) << "NFD ignores feature files over 64 KiB";
}

}  // namespace
}  // namespace devplace::testing
