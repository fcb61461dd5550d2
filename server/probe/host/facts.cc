#include "server/probe/host/facts.h"

#include <algorithm>

namespace devplace::probe {

std::vector<PciFunction*> HostFacts::OfRow(v1::Row row) {
  std::vector<PciFunction*> out;
  for (auto& [bus_id, fn] : pci) {
    if (fn.row == row) out.push_back(&fn);
  }
  return out;
}

PciFunction* HostFacts::Find(absl::string_view bus_id) {
  const auto it = pci.find(std::string(bus_id));
  return it == pci.end() ? nullptr : &it->second;
}

bool HostFacts::HasRow(v1::Row row) const {
  return std::any_of(pci.begin(), pci.end(), [row](const auto& entry) { return entry.second.row == row; });
}

void AddDeviceNode(v1::Device& device, absl::string_view path) {
  for (const std::string& existing : device.device_nodes()) {
    if (existing == path) return;
  }
  device.add_device_nodes(std::string(path));
}

}  // namespace devplace::probe
