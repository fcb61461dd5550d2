// The fixture inventories the export tests read: the probe, NVML and vendor-library goldens
// (tests/golden/{probe,nvml,accel}), parsed from their protobuf JSON.
#ifndef DEVPLACE_TESTS_EXPORT_FIXTURE_INVENTORIES_H_
#define DEVPLACE_TESTS_EXPORT_FIXTURE_INVENTORIES_H_

#include <filesystem>
#include <map>
#include <string>

#include "devplace/v1/devplace.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {

inline v1::Inventory LoadInventory(const std::string& path) {
  v1::Inventory inv;
  const std::string json = ReadFile(path);
  EXPECT_FALSE(json.empty()) << path;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &inv).ok()) << path;
  return inv;
}

// Every fixture inventory: <golden name> -> source JSON.
inline std::map<std::string, std::string> Fixtures() {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(DEVPLACE_PROBE_GOLDEN_DIR)) {
    out[e.path().stem().string()] = e.path().string();
  }
  for (const auto& e : fs::directory_iterator(DEVPLACE_NVML_GOLDEN_DIR)) {
    out["nvml-" + e.path().stem().string()] = e.path().string();
  }
  for (const auto& e : fs::directory_iterator(DEVPLACE_ACCEL_GOLDEN_DIR)) {
    out["accel-" + e.path().stem().string()] = e.path().string();
  }
  return out;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_EXPORT_FIXTURE_INVENTORIES_H_
