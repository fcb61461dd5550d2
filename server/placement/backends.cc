#include "server/placement/backends.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace devplace::placement {
namespace {

std::vector<BackendSpec> MakeTable() {
  using R = v1::Row;
  std::vector<BackendSpec> t;
  t.push_back({R::ROW_CPU, "cpu", "CPU", "", "cpu", "torch", false, "cpu", "install torch", {}, {}, {}, {}, {}, {}, {}});
  t.push_back({R::ROW_CUDA_NVIDIA, "cuda/nvidia", "NVIDIA GPU", "NVIDIA", "cuda", "torch", true, "cuda", "install a CUDA build of torch",
               {0x10de}, {}, {0x0300, 0x0302},  // VGA / 3D controller; not NVSwitch 0680, not audio 0403
               {"nvidia"}, {"nvidia", "nvidia_uvm"},
               {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"},
               {"/dev/nvidia<minor>", "/dev/nvidiactl (control)", "/dev/nvidia-uvm (control)"}});
  t.push_back({R::ROW_CUDA_AMD, "cuda/amd", "AMD GPU", "AMD", "cuda", "torch (ROCm build)", true, "rocm", "install a ROCm build of torch",
               {0x1002}, {}, {0x0300, 0x0380, 0x1200},  // Radeon / Instinct MI2xx / MI300X; not audio
               {"amdgpu"}, {"amdgpu"},
               {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"},
               {"/dev/dri/renderD<drm_render_minor>", "/dev/kfd (control)"}});
  t.push_back({R::ROW_NEURON, "neuron", "AWS Trainium / Inferentia", "AWS", "neuron", "torch-neuronx", false,
               "neuron", "install torch-neuronx (AWS Neuron SDK)", {0x1d0f}, {0x7064, 0x7065, 0x7066, 0x7067, 0x7164, 0x7264, 0x7364, 0x7564, 0x7565}, {},
               {"neuron"}, {"neuron"},
               {"NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"},
               {"/dev/neuron<index>"}});
  t.push_back({R::ROW_TPU, "tpu", "Google TPU", "Google", "tpu", "torch-tpu", false, "tpu", "install torch-tpu (or torch_xla and name xla)",
               {0x1ae0}, {0x0027, 0x0056, 0x005e, 0x0062, 0x0063, 0x006f, 0x0076}, {},
               {}, {},
               {"TPU_VISIBLE_CHIPS"},
               {"/dev/vfio/<iommu_group> (v5e and later)", "/dev/accel<index> (v4 and earlier)"}});
  t.push_back({R::ROW_XPU, "xpu", "Intel GPU", "Intel", "xpu", "torch", true, "xpu", "install an XPU build of torch (>= 2.7)",
               {0x8086}, {}, {0x0300, 0x0380},  // display classes only: Intel NPUs are 1200
               {"i915", "xe"}, {"i915", "xe"},
               {"ZE_AFFINITY_MASK", "ZE_FLAT_DEVICE_HIERARCHY"},
               {"/dev/dri/renderD<n>", "/dev/dri/card<n>"}});
  t.push_back({R::ROW_MPS, "mps", "Apple Silicon GPU", "Apple", "mps", "torch", true, "mps", "install torch for macOS arm64",
               {}, {}, {}, {}, {}, {}, {}});
  t.push_back({R::ROW_HPU, "hpu", "Intel Gaudi", "Intel Habana", "hpu", "habana-torch-plugin", true, "hpu", "install the Intel Gaudi PyTorch plugin (habana-torch-plugin)",
               {0x1da3}, {0x1000, 0x1001, 0x1010, 0x1011, 0x1020, 0x1021, 0x1030, 0x1060, 0x1061, 0x1062, 0x1063},
               {}, {"habanalabs"}, {"habanalabs"},
               {"HABANA_VISIBLE_MODULES"},
               {"/dev/accel/accel<minor>", "/dev/accel/accel_controlD<minor> (control)"}});
  t.push_back({R::ROW_NPU, "npu", "Huawei Ascend", "Huawei", "npu", "torch-npu", true, "npu", "install torch-npu (with the CANN toolkit)",
               {0x19e5}, {0xd100, 0xd500, 0xd801, 0xd802, 0xd803}, {},  // not HiSilicon ZIP/SEC a25x
               {}, {},
               {"ASCEND_RT_VISIBLE_DEVICES"},
               {"/dev/davinci<physical_id>", "/dev/davinci_manager (control)"}});
  t.push_back({R::ROW_MLU, "mlu", "Cambricon MLU", "Cambricon", "mlu", "torch-mlu", true, "mlu", "install torch-mlu (Cambricon Neuware)",
               {0xcabc}, {0x0100, 0x0220, 0x0270, 0x0290, 0x0365, 0x0370, 0x0371, 0x0560, 0x0570,
                          0x0580, 0x0585, 0x0590, 0x0591},
               {}, {"cambricon"}, {"cambricon_drv"},
               {"CN_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES"},
               {"/dev/cambricon_dev<minor>", "/dev/cambricon_ctl (control)"}});
  t.push_back({R::ROW_MUSA, "musa", "Moore Threads GPU", "Moore Threads", "musa", "torch-musa", true, "musa", "install torch-musa (MUSA toolkit)",
               {0x1ed5}, {}, {0x0300, 0x0302, 0x0380},  // not the HDMI/DP audio functions (0403)
               {"mtgpu"}, {"mtgpu"},
               {"MUSA_VISIBLE_DEVICES"},
               {"/dev/mtgpu.<index>", "/dev/dri/renderD<n>"}});
  // Tecorigin SDAA (docs/SEMANTICS.md, "SDAA"): no PCI vendor id is public (not in pci.ids) and no
  // device-node name is documented, so the probe does not detect it; rows come from the inventory
  // (like mps). SDAA_VISIBLE_DEVICES is the variable accelerate launch writes (utils/launch.py).
  t.push_back({R::ROW_SDAA, "sdaa", "Tecorigin SDAA", "Tecorigin", "sdaa", "torch_sdaa", true, "sdaa",
               "install torch_sdaa (Tecorigin TecoToolkit)", {}, {}, {}, {}, {},
               {"SDAA_VISIBLE_DEVICES"}, {}});
  return t;
}

bool Contains(const std::vector<uint16_t>& v, uint16_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string Hex4(uint16_t v) { return absl::StrFormat("%04x", v); }

}  // namespace

const std::vector<BackendSpec>& Backends() {
  static const std::vector<BackendSpec>* table = new std::vector<BackendSpec>(MakeTable());
  return *table;
}

const BackendSpec* FindBackend(v1::Row row) {
  for (const BackendSpec& b : Backends()) {
    if (b.row == row) return &b;
  }
  return nullptr;
}

std::string RowName(v1::Row row) {
  const BackendSpec* spec = FindBackend(row);
  return spec != nullptr ? std::string(spec->name) : v1::Row_Name(row);
}

const BackendSpec* ClassifyPci(uint16_t vendor_id, uint16_t device_id, uint32_t pci_class) {
  const uint16_t base_sub = static_cast<uint16_t>(pci_class >> 8);
  for (const BackendSpec& b : Backends()) {
    if (!Contains(b.pci_vendor_ids, vendor_id)) continue;
    if (!b.pci_device_ids.empty() && !Contains(b.pci_device_ids, device_id)) continue;
    if (!b.pci_classes.empty() && !Contains(b.pci_classes, base_sub)) continue;
    return &b;
  }
  return nullptr;
}

bool IsTorchSupported(v1::Row row, uint16_t device_id) {
  if (row != v1::ROW_XPU) return true;
  // torch xpu validated families: Data Center GPU Max (Ponte Vecchio 0bd0-0bdb), Arc A (DG2
  // 5690-56c2), Arc B (Battlemage e202-e212), Core Ultra iGPUs (Meteor Lake 7d40-7dd5, Arrow Lake
  // 7d41/7d51/7d67/7dd1, Lunar Lake 6420/64a0/64b0, Panther Lake b080-b0b0).
  if (device_id >= 0x0bd0 && device_id <= 0x0bdb) return true;
  if (device_id >= 0x5690 && device_id <= 0x56c2) return true;
  if (device_id >= 0xe202 && device_id <= 0xe212) return true;
  if (device_id >= 0x7d40 && device_id <= 0x7dd5) return true;
  if (device_id == 0x6420 || device_id == 0x64a0 || device_id == 0x64b0) return true;
  if (device_id >= 0xb080 && device_id <= 0xb0b0) return true;
  return false;
}

bool IsIntegrated(v1::Row row, uint16_t device_id, absl::string_view pci_bus_id) {
  switch (row) {
    case v1::ROW_CUDA_AMD: {
      static const uint16_t kApus[] = {0x164e, 0x15bf, 0x15c8, 0x1681, 0x15dd, 0x15d8, 0x1636,
                                       0x1638, 0x164c, 0x15e7, 0x13c0, 0x1900, 0x150e, 0x1506};
      return std::find(std::begin(kApus), std::end(kApus), device_id) != std::end(kApus);
    }
    case v1::ROW_XPU:
      return pci_bus_id == "0000:00:02.0";
    default:
      return false;
  }
}

bool IsRowDriver(const BackendSpec& spec, absl::string_view driver) {
  if (driver.empty()) return false;
  if (spec.drivers.empty()) return true;
  for (absl::string_view d : spec.drivers) {
    if (absl::StartsWith(driver, d)) return true;
  }
  return false;
}

const std::string& PlacementDeviceTypeList() {
  static const std::string* list = [] {
    std::vector<std::string> types;
    for (const BackendSpec& b : Backends()) {
      if (std::find(types.begin(), types.end(), b.device_type) == types.end()) types.emplace_back(b.device_type);
    }
    types.emplace_back("xla");
    return new std::string(absl::StrJoin(types, ", "));
  }();
  return *list;
}

const std::string& RuntimeBackendTokens() {
  static const std::string* list = [] {
    std::vector<std::string> tokens;
    for (const BackendSpec& b : Backends()) tokens.emplace_back(b.runtime_backend);
    tokens.emplace_back("hip");
    tokens.emplace_back("xla");
    return new std::string(absl::StrJoin(tokens, ", "));
  }();
  return *list;
}

bool IsRuntimeBackendToken(absl::string_view token) {
  for (absl::string_view t : absl::StrSplit(RuntimeBackendTokens(), ", ")) {
    if (t == token) return true;
  }
  return false;
}

v1::ListBackendsResponse ListBackendsResponse() {
  v1::ListBackendsResponse out;
  for (const BackendSpec& b : Backends()) {
    v1::BackendInfo* info = out.add_backends();
    info->set_row(b.row);
    info->set_name(std::string(b.name));
    info->set_hardware(std::string(b.hardware));
    info->set_vendor(std::string(b.vendor));
    info->set_device_type(std::string(b.device_type));
    info->set_package(std::string(b.package));
    info->set_auto_map(b.auto_map);
    for (uint16_t v : b.pci_vendor_ids) info->add_pci_vendor_ids(Hex4(v));
    for (uint16_t v : b.pci_device_ids) info->add_pci_device_ids(Hex4(v));
    for (uint16_t v : b.pci_classes) info->add_pci_classes(Hex4(v));
    for (absl::string_view v : b.mask_variables) info->add_mask_variables(std::string(v));
    for (absl::string_view v : b.kernel_modules) info->add_kernel_modules(std::string(v));
    for (absl::string_view v : b.device_node_patterns) info->add_device_node_patterns(std::string(v));
  }
  return out;
}

}  // namespace devplace::placement
