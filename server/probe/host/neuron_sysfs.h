// AWS Neuron enrichment from the driver's own sysfs metrics (no library needed): the
// per-NeuronCore device memory in use and the core directories under
// /sys/class/neuron_device/neuronN (aws-neuron-driver, neuron_sysfs_metrics.c).
#ifndef DEVPLACE_SERVER_PROBE_HOST_NEURON_SYSFS_H_
#define DEVPLACE_SERVER_PROBE_HOST_NEURON_SYSFS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/host/host_root.h"

namespace devplace::probe {

// Device memory (HBM / DRAM) of one Neuron device by PCI device id, from AWS's published device
// specifications: Inferentia 0x7064 8 GiB, Trainium 0x7164 32 GiB, Inferentia2 0x7264 32 GiB,
// Trainium2 0x7364 96 GiB; nullopt for others.
std::optional<uint64_t> NeuronDeviceMemoryBytes(uint16_t device_id);

// Adds to `d` what neuronN's metrics tree under `dir` (a host path such as
// "/sys/class/neuron_device/neuron0") says: for each neuron_core<k> directory the bytes of device
// memory in use (stats/memory_usage/device_mem/total) as attribute "neuron_core<k>_device_mem_used_bytes";
// memory_total_bytes from NeuronDeviceMemoryBytes(device_id); memory_free_bytes = total - the
// cores' sum, with attribute "memory_source" = "neuron_sysfs", when every core's figure could be
// read. Returns the number of neuron_core<k> directories (0 when the driver exposes none).
uint32_t AddNeuronSysfsMetrics(const HostRoot& root, absl::string_view dir, uint16_t device_id, v1::Device& d);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_NEURON_SYSFS_H_
