#include <algorithm>
// The PCI scan (DETECTION.md section 1), driver versions from /sys/module, and the device-node
// check that runs after every prober has listed its nodes.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {
namespace {

constexpr absl::string_view kPciDevices = "/sys/bus/pci/devices";

// Drivers that are part of the kernel tree: without a MODULE_VERSION their version is the
// kernel release (DETECTION.md section 1.5).
constexpr absl::string_view kInTreeModules[] = {"amdgpu", "i915", "xe", "habanalabs"};

absl::StatusOr<uint32_t> ReadHex(const HostRoot& root, absl::string_view path) {
  ASSIGN_OR_RETURN(const std::string text, root.ReadTrimmed(path));
  absl::StatusOr<uint32_t> value = ParseHex(text);
  if (!value.ok()) return absl::DataLossError(absl::StrCat(path, ": ", value.status().message()));
  return value;
}

// Reads one PCI function; returns false (and no error) when it is not an accelerator.
absl::StatusOr<bool> ReadPciFunction(const HostRoot& root, absl::string_view name, PciFunction& fn) {
  ASSIGN_OR_RETURN(const std::string bus_id, NormalizePciBusId(name));
  fn.sysfs_path = absl::StrCat(kPciDevices, "/", name);
  const std::string& dir = fn.sysfs_path;
  ASSIGN_OR_RETURN(const uint32_t vendor, ReadHex(root, dir + "/vendor"));
  ASSIGN_OR_RETURN(const uint32_t device, ReadHex(root, dir + "/device"));
  ASSIGN_OR_RETURN(const uint32_t pci_class, ReadHex(root, dir + "/class"));
  const placement::BackendSpec* spec =
      placement::ClassifyPci(static_cast<uint16_t>(vendor), static_cast<uint16_t>(device), pci_class);
  if (spec == nullptr) return false;

  fn.row = spec->row;
  fn.vendor_id = static_cast<uint16_t>(vendor);
  fn.device_id = static_cast<uint16_t>(device);
  fn.subsystem_device = static_cast<uint16_t>(ReadHex(root, dir + "/subsystem_device").value_or(0));
  v1::Device& d = fn.device;
  d.set_pci_bus_id(bus_id);
  d.set_vendor_id(HexId(vendor, 4));
  d.set_device_id(HexId(device, 4));
  d.set_pci_class(HexId(pci_class, 6));
  d.set_minor(-1);
  // The kernel prints -1 for "unknown"; anything below that is garbage and means the same.
  d.set_numa_node(static_cast<int32_t>(std::max<int64_t>(-1, ReadOptionalDecimal(root, dir + "/numa_node").value_or(-1))));

  absl::StatusOr<std::string> driver = root.ReadLinkBasename(dir + "/driver");
  if (driver.ok()) {
    d.set_driver(*driver);
  } else if (!absl::IsNotFound(driver.status())) {
    return driver.status();
  }

  // Config space answers all-ones when the device stopped responding (sysfs ids are cached).
  d.set_health(v1::HEALTH_OK);
  absl::StatusOr<std::string> config = root.ReadFile(dir + "/config", 2);
  if (config.ok() && *config == "\xff\xff") {
    d.set_health(v1::HEALTH_LOST);
    d.set_health_reason(absl::StrCat(spec->hardware, " fell off the bus: PCI config space reads 0xffff"));
  }
  ReadPciHealthCounters(root, dir, d);
  return true;
}

}  // namespace

absl::StatusOr<ProbeOutcome> ProbePci(const HostRoot& root, HostFacts& facts) {
  absl::StatusOr<std::vector<std::string>> names = root.ListDir(kPciDevices);
  if (absl::IsNotFound(names.status())) return Skipped("no /sys/bus/pci/devices");
  if (!names.ok()) return names.status();
  Problems problems;
  std::map<v1::Row, int> per_row, seen_per_row;
  int kept = 0, seen = 0;
  size_t read = 0;
  for (const std::string& name : *names) {
    if (seen >= kMaxAcceleratorFunctionsRead) break;  // a hostile bus: bounded time too
    ++read;
    PciFunction fn;
    absl::StatusOr<bool> accelerator = ReadPciFunction(root, name, fn);
    problems.Add(accelerator.status());
    if (!accelerator.ok() || !*accelerator) continue;
    ++seen;
    ++seen_per_row[fn.row];
    if (per_row[fn.row] >= kMaxDevicesPerRow || kept >= kMaxDevices) continue;  // past the bound: left out
    ++per_row[fn.row];
    ++kept;
    const std::string bus_id = fn.device.pci_bus_id();
    facts.pci[bus_id] = std::move(fn);
  }
  std::vector<std::string> rows, left_out;
  for (const auto& [row, count] : per_row) {
    rows.push_back(absl::StrCat(count, " ", placement::FindBackend(row)->name));
    if (seen_per_row[row] > count) {
      left_out.push_back(absl::StrCat(placement::FindBackend(row)->name, " kept ", count, " of ", seen_per_row[row]));
    }
  }
  if (read < names->size()) {
    problems.AddFirst(absl::StrCat("stopped reading the bus after ", kMaxAcceleratorFunctionsRead,
                                   " accelerator functions: ", names->size() - read, " of ", names->size(),
                                   " PCI functions not read"));
  }
  if (!left_out.empty()) {
    problems.AddFirst(absl::StrCat("devices left out (at most ", kMaxDevicesPerRow, " per row and ", kMaxDevices,
                                   " in all, the first in PCI bus order): ", absl::StrJoin(left_out, ", ")));
  }
  return problems.Finish(absl::StrCat(names->size(), " PCI functions; accelerators: ",
                                      rows.empty() ? "none" : absl::StrJoin(rows, ", ")));
}

absl::StatusOr<ProbeOutcome> ProbeModules(const HostRoot& root, HostFacts& facts) {
  if (facts.pci.empty()) return Skipped("no accelerator on the PCI bus");
  std::vector<std::string> found;
  for (const placement::BackendSpec& spec : placement::Backends()) {
    if (!facts.HasRow(spec.row)) continue;
    std::string version;
    for (absl::string_view module : spec.kernel_modules) {
      version = ReadOptional(root, absl::StrCat("/sys/module/", module, "/version")).value_or("");
      if (!version.empty()) break;
    }
    if (version.empty()) {
      bool bound = false;
      for (const PciFunction* fn : facts.OfRow(spec.row)) {
        bound = bound || placement::IsRowDriver(spec, fn->device.driver());
      }
      bool in_tree = false;
      for (absl::string_view module : spec.kernel_modules) {
        for (absl::string_view t : kInTreeModules) in_tree = in_tree || module == t;
      }
      if (bound && in_tree) version = facts.host.kernel_release();
    }
    if (version.empty()) continue;
    facts.driver_versions[spec.row] = version;
    found.push_back(absl::StrCat(spec.name, " ", version));
  }
  return Found(found.empty() ? "no module version found" : absl::StrJoin(found, ", "));
}

absl::StatusOr<ProbeOutcome> ProbeDeviceNodes(const HostRoot& root, HostFacts& facts) {
  if (facts.pci.empty()) return Skipped("no accelerator on the PCI bus");
  int listed = 0, present = 0;
  for (auto& [bus_id, fn] : facts.pci) {
    fn.missing_nodes.clear();
    for (const std::string& node : fn.device.device_nodes()) {
      ++listed;
      if (root.Exists(node)) {
        ++present;
      } else {
        fn.missing_nodes.push_back(node);
      }
    }
  }
  return Found(absl::StrCat(present, " of ", listed, " device nodes present"));
}

}  // namespace devplace::probe
