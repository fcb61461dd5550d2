#include "tests/probe/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "server/common/json.h"
#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"

namespace devplace::testing {

namespace fs = std::filesystem;

std::string HostDir(const std::string& name) { return std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/" + name; }

v1::Inventory ProbeTree(const std::string& dir) {
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(dir));
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

v1::Inventory ProbeHost(const std::string& name) { return ProbeTree(HostDir(name)); }

const v1::Backend* FindRow(const v1::Inventory& inventory, v1::Row row) {
  for (const v1::Backend& b : inventory.backends()) {
    if (b.row() == row) return &b;
  }
  return nullptr;
}

const v1::Device* FindDevice(const v1::Inventory& inventory, const std::string& bus_id) {
  for (const v1::Backend& b : inventory.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (d.pci_bus_id() == bus_id) return &d;
    }
  }
  return nullptr;
}

const v1::ProbeReport* FindReport(const v1::Inventory& inventory, const std::string& name) {
  for (const v1::ProbeReport& r : inventory.probe_reports()) {
    if (r.name() == name) return &r;
  }
  return nullptr;
}

bool UpdateGoldens() {
  const char* v = std::getenv("DEVPLACE_UPDATE_GOLDENS");
  return v != nullptr && std::string(v) == "1";
}

void ExpectMatchesGolden(const v1::Inventory& inventory, const std::string& golden, const std::string& what) {
  const absl::StatusOr<std::string> json = devplace::ToJson(inventory);
  ASSERT_TRUE(json.ok()) << json.status();
  if (UpdateGoldens()) {
    fs::create_directories(fs::path(golden).parent_path());
    std::ofstream(golden, std::ios::trunc) << *json << "\n";
    GTEST_SKIP() << "wrote " << golden;
  }
  std::ifstream in(golden);
  ASSERT_TRUE(in.good()) << "missing " << golden << "; run with DEVPLACE_UPDATE_GOLDENS=1 to create it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(*json + "\n", expected.str())
      << what << " differs from " << golden << " (if intended: DEVPLACE_UPDATE_GOLDENS=1, then review the diff)";
}

ScratchHost::ScratchHost(const std::string& fixture) : dir_(base_.File(fixture)) {
  fs::copy(HostDir(fixture), dir_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
}

void ScratchHost::Write(const std::string& rel, const std::string& content) const {
  const fs::path path = Path(rel);
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

void ScratchHost::Remove(const std::string& rel) const { fs::remove_all(Path(rel)); }

}  // namespace devplace::testing
