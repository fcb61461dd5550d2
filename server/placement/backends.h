// The hardware table of SEMANTICS.md section 1: the 12 rows devplace places on, with the facts
// used to detect each (PCI allow-lists, drivers, device nodes) and to mask it (visibility
// variables). Everything that is a rule about *which row* a piece of hardware belongs to lives
// here, so the probers and the resolver share one table.
#ifndef DEVPLACE_SERVER_PLACEMENT_BACKENDS_H_
#define DEVPLACE_SERVER_PLACEMENT_BACKENDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// One row of the hardware table.
struct BackendSpec {
  v1::Row row;
  absl::string_view name;         // "cuda/nvidia", "npu", ...
  absl::string_view hardware;     // "NVIDIA GPU"
  absl::string_view vendor;       // "NVIDIA"
  absl::string_view device_type;  // PyTorch device type: "cuda", "npu", ...
  absl::string_view package;      // what the job needs installed: "torch", "torch-npu", ...
  bool auto_map;                 // device_map="auto" can place on it (not neuron, not tpu)
  // Token naming this row in ResolveDeviceRequest.runtime_backends ("cuda", "rocm", "npu", ...).
  absl::string_view runtime_backend;
  // What a job must install to use the row, as a warning's fix: "install a CUDA build of torch".
  absl::string_view install_hint;
  // PCI matching: a function belongs to the row when its vendor is in `pci_vendor_ids`, and its
  // device id is in `pci_device_ids` (empty = any), and its base+subclass is in `pci_classes`
  // (empty = any). Class is only a secondary filter: rows with a device allow-list never
  // filter by class (Neuron is class 0880, TPU has no documented class).
  std::vector<uint16_t> pci_vendor_ids;
  std::vector<uint16_t> pci_device_ids;
  std::vector<uint16_t> pci_classes;  // base<<8 | subclass, e.g. 0x0302
  // Bound-driver names (prefix match) that count as "the row's driver loaded"; empty = any
  // bound driver (TPU v5+ is driven through vfio-pci, older TPUs by Google's own driver).
  std::vector<absl::string_view> drivers;
  std::vector<absl::string_view> kernel_modules;
  std::vector<absl::string_view> mask_variables;
  std::vector<absl::string_view> device_node_patterns;
};

// All 12 rows in table order (cpu, cuda/nvidia, cuda/amd, neuron, tpu, xpu, mps, hpu, npu, mlu,
// musa, sdaa).
const std::vector<BackendSpec>& Backends();

// The row's spec; never null for a valid Row other than ROW_UNSPECIFIED (null then).
const BackendSpec* FindBackend(v1::Row row);

// The row as users write it ("cuda/nvidia", "npu"), or its enum name for a row the table lacks.
std::string RowName(v1::Row row);

// The row a PCI function belongs to, or null when it is not an accelerator devplace places on
// (audio functions of GPUs, NVSwitch, NICs and NVMe of accelerator vendors, Intel/AMD NPUs, ...).
// `pci_class` is the 24-bit class code.
const BackendSpec* ClassifyPci(uint16_t vendor_id, uint16_t device_id, uint32_t pci_class);

// Whether PyTorch's backend for the row supports this device model. False only for Intel GPUs
// outside the torch xpu validated families (e.g. UHD 770 / Iris Xe iGPUs; "Getting Started on
// Intel GPU", docs.pytorch.org); every other row: true.
bool IsTorchSupported(v1::Row row, uint16_t device_id);

// Integrated GPU heuristic: AMD APU device ids (Raphael 164e, Phoenix 15bf, Rembrandt 1681, ...)
// and Intel GPUs at the conventional iGPU address 0000:00:02.0.
bool IsIntegrated(v1::Row row, uint16_t device_id, absl::string_view pci_bus_id);

// Whether `driver` (basename of the sysfs driver link) is the row's own driver.
bool IsRowDriver(const BackendSpec& spec, absl::string_view driver);

// Device types the grammar accepts: every row's type in table order, then `xla`, comma-separated
// ("cpu, cuda, neuron, tpu, xpu, mps, hpu, npu, mlu, musa, sdaa, xla").
const std::string& PlacementDeviceTypeList();

// Whether `token` names a runtime backend in ResolveDeviceRequest.runtime_backends: a row's
// runtime_backend, or the aliases "hip" (= rocm) and "xla" (torch_xla). Comma-separated list of
// all of them in RuntimeBackendTokens().
bool IsRuntimeBackendToken(absl::string_view token);
const std::string& RuntimeBackendTokens();

// The table as the ListBackends RPC returns it.
v1::ListBackendsResponse ListBackendsResponse();

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_BACKENDS_H_
