// HostFacts: what the probers observed, keyed by canonical PCI bus id. Probers only record
// facts (ids, driver, nodes, names, memory, health); server/probe/build_inventory.h derives the rest
// (host_index, driver_loaded, supported, usable, backend state) and builds the Inventory.
#ifndef DEVPLACE_SERVER_PROBE_HOST_FACTS_H_
#define DEVPLACE_SERVER_PROBE_HOST_FACTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::probe {

// One accelerator PCI function (one that placement::ClassifyPci puts in a row).
struct PciFunction {
  v1::Row row = v1::ROW_UNSPECIFIED;
  // The sysfs directory, e.g. "/sys/bus/pci/devices/0000:18:00.0" (a host path).
  std::string sysfs_path;
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t subsystem_device = 0;  // 0 when the file is absent
  // Observed facts in the Inventory's own message; the pci prober fills pci_bus_id, ids, class,
  // numa_node, driver, health and minor = -1; later probers add names, nodes, memory, ...
  v1::Device device;
  // Nodes of device.device_nodes that do not exist under the host root (the dev_nodes prober).
  std::vector<std::string> missing_nodes;
  // Why this process may not use the device although it is present (a vendor library refused
  // it, e.g. NVML_ERROR_NO_PERMISSION in a container); empty when nothing refused it.
  std::string inaccessible_reason;
};

// The most devices an inventory holds, per row and in all (docs/SEMANTICS.md I-BOUND): far above
// any real host (16 GPUs, or 16 Trainium2 devices, per node), low enough that the inventory,
// every ResolveDevice answer (`devices`, `max_memory`) and /metrics stay well inside the clients'
// 4 MiB message limit. The pci prober records at most these and stops reading the bus after
// kMaxAcceleratorFunctionsRead accelerator functions, so a hostile bus costs bounded time too;
// BuildInventory applies the same bound to whatever the vendor probers added.
inline constexpr int kMaxDevicesPerRow = 256;
inline constexpr int kMaxDevices = 1024;
inline constexpr int kMaxAcceleratorFunctionsRead = 4 * kMaxDevices;

// Everything the probers found on one host.
struct HostFacts {
  // Accelerator functions by canonical bus id; std::map order is PCI bus order.
  std::map<std::string, PciFunction> pci;
  // Kernel driver version per row (module version, /proc driver file, kernel release).
  std::map<v1::Row, std::string> driver_versions;
  // Row-wide facts for Backend.attributes (e.g. "cuda_driver_version" from NVML).
  std::map<v1::Row, std::map<std::string, std::string>> backend_attributes;
  // Host identity, CPU, NUMA and memory, filled by the host probers.
  v1::Host host;

  // The row's functions in PCI bus order.
  std::vector<PciFunction*> OfRow(v1::Row row);
  // The function at `bus_id` (canonical), or null when the PCI scan did not see it.
  PciFunction* Find(absl::string_view bus_id);
  // Whether any function belongs to `row`.
  bool HasRow(v1::Row row) const;
};

// Appends `path` to the device's nodes unless already listed (several probers can find the same
// render node).
void AddDeviceNode(v1::Device& device, absl::string_view path);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_FACTS_H_
