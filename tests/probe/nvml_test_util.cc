#include "tests/probe/nvml_test_util.h"

#include <cstdlib>

#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {

std::string NvmlScript(const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/" + name + ".txt";
}

v1::Inventory ProbeTreeWithNvml(const std::string& dir, const std::string& script, const std::string& library,
                                std::chrono::milliseconds timeout) {
  setenv("FAKE_NVML_CONFIG", NvmlScript(script).c_str(), 1);
  probe::ProbeOptions options;
  options.nvml_library = library;
  options.vendor_timeout = timeout;
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(dir), options);
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

v1::Inventory ProbeHostWithNvml(const std::string& host, const std::string& script) {
  return ProbeTreeWithNvml(HostDir(host), script);
}

}  // namespace devplace::testing
