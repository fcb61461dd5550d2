// Probers for the non-GPU accelerators: AWS Neuron (DETECTION.md section 4), Google TPU
// (section 5), Intel Gaudi (section 8), Huawei Ascend (section 9), Cambricon (section 10) and
// Moore Threads (section 11).
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"
#include "server/probe/host/neuron_sysfs.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {
namespace {

constexpr absl::string_view kNeuronClass = "/sys/class/neuron_device";
constexpr absl::string_view kAccelClass = "/sys/class/accel";
constexpr absl::string_view kCambriconProc = "/proc/driver/cambricon/mlus";
constexpr uint64_t kGiB = uint64_t{1} << 30;

// NeuronCores per device when core_count cannot be read (it is root-only): the driver's arch
// from the device id (7164/7264 v2: 2 cores, 7364 v3: configurable, others v1: 4 cores).
uint32_t DefaultNeuronCores(uint16_t device_id) {
  if (device_id == 0x7164 || device_id == 0x7264) return 2;
  if (device_id == 0x7364 || device_id == 0x7564 || device_id == 0x7565) return 0;
  return 4;
}

// A TPU chip generation: its name, HBM per chip and PyTorch devices per chip (tpu-info table).
struct TpuModel {
  const char* version;
  uint64_t hbm_gib;  // 0 = unknown
  uint32_t devices_per_chip;
};

TpuModel FindTpuModel(uint16_t device_id, uint16_t subsystem_device) {
  switch (device_id) {
    case 0x0027:
      return subsystem_device == 0x004e ? TpuModel{"v2", 8, 2} : TpuModel{"v3", 16, 2};
    case 0x0056: return {"v4lite", 0, 1};
    case 0x005e: return {"v4", 32, 1};
    case 0x0062: return {"v5p", 95, 1};
    case 0x0063: return {"v5e", 16, 1};
    case 0x006f: return {"v6e", 32, 1};
    case 0x0076: return {"7x", 192, 2};
    default: return {"unknown", 0, 1};
  }
}

// Assigns per-device nodes "<prefix><n>" to a row's functions in PCI bus order, n = 0, 1, ...
// (the order the vendor drivers number their devices in).
int AssignNodesInBusOrder(HostFacts& facts, v1::Row row, absl::string_view prefix) {
  int n = 0;
  for (PciFunction* fn : facts.OfRow(row)) {
    fn->device.set_minor(n);
    AddDeviceNode(fn->device, absl::StrCat(prefix, n));
    ++n;
  }
  return n;
}

}  // namespace

absl::StatusOr<ProbeOutcome> ProbeNeuron(const HostRoot& root, HostFacts& facts) {
  if (!root.IsDirectory(kNeuronClass)) return Skipped("no /sys/class/neuron_device (driver not loaded)");
  // neuronN has no link to its PCI function; the driver numbers devices in probe order, which
  // is taken to be PCI bus order among the functions bound to the neuron driver (a heuristic,
  // DETECTION.md section 4: the exact BDF needs an ioctl on /dev/neuronN).
  const placement::BackendSpec& spec = *placement::FindBackend(v1::ROW_NEURON);
  std::vector<PciFunction*> bound;
  for (PciFunction* fn : facts.OfRow(v1::ROW_NEURON)) {
    if (placement::IsRowDriver(spec, fn->device.driver())) bound.push_back(fn);
  }
  Problems problems;
  int devices = 0;
  for (const auto& [n, name] : ListNumbered(root, kNeuronClass, "neuron")) {
    if (n >= bound.size()) {
      problems.Add(absl::StrCat(kNeuronClass, "/", name, " has no matching neuron PCI function"));
      continue;
    }
    ++devices;
    PciFunction& fn = *bound[n];
    v1::Device& d = fn.device;
    const std::string dir = absl::StrCat(kNeuronClass, "/", name);
    for (const char* key : {"arch_type", "instance_type", "device_name"}) {
      if (std::optional<std::string> value = ReadOptional(root, absl::StrCat(dir, "/info/architecture/", key))) {
        (*d.mutable_attributes())[key] = *value;
      }
    }
    d.set_name(d.attributes().count("device_name") ? d.attributes().at("device_name") : "");
    d.set_minor(static_cast<int32_t>(n));
    AddDeviceNode(d, absl::StrCat("/dev/", name));
    const std::optional<int64_t> cores = ReadOptionalDecimal(root, dir + "/core_count");
    // core_count is root-only; the metrics tree's neuron_core<k> directories count them too.
    const uint32_t core_dirs = AddNeuronSysfsMetrics(root, dir, fn.device_id, d);
    d.set_sub_device_count(cores && *cores > 0 ? static_cast<uint32_t>(*cores)
                           : core_dirs > 0    ? core_dirs
                                              : DefaultNeuronCores(fn.device_id));
  }
  return problems.Finish(absl::StrCat(devices, " Neuron devices"));
}

absl::StatusOr<ProbeOutcome> ProbeTpu(const HostRoot& root, HostFacts& facts) {
  const std::vector<PciFunction*> chips = facts.OfRow(v1::ROW_TPU);
  if (chips.empty()) return Skipped("no TPU on the PCI bus");
  Problems problems;
  for (size_t i = 0; i < chips.size(); ++i) {
    PciFunction& fn = *chips[i];
    v1::Device& d = fn.device;
    const TpuModel model = FindTpuModel(fn.device_id, fn.subsystem_device);
    (*d.mutable_attributes())["tpu_version"] = model.version;
    if (model.hbm_gib > 0) d.set_memory_total_bytes(model.hbm_gib * kGiB);
    if (model.devices_per_chip > 1) d.set_sub_device_count(model.devices_per_chip);
    if (d.driver() == "vfio-pci") {
      // v5e and later: the chip is a VFIO device named after its IOMMU group.
      absl::StatusOr<std::string> group = root.ReadLinkBasename(fn.sysfs_path + "/iommu_group");
      problems.Add(group.status());
      if (group.ok()) AddDeviceNode(d, absl::StrCat("/dev/vfio/", *group));
    } else {
      d.set_minor(static_cast<int32_t>(i));
      AddDeviceNode(d, absl::StrCat("/dev/accel", i));
    }
  }
  return problems.Finish(absl::StrCat(chips.size(), " TPU chips"));
}

absl::StatusOr<ProbeOutcome> ProbeHpu(const HostRoot& root, HostFacts& facts) {
  if (!root.IsDirectory(kAccelClass)) return Skipped("no /sys/class/accel");
  Problems problems;
  int gaudis = 0, others = 0;
  for (const auto& [n, name] : ListNumbered(root, kAccelClass, "accel")) {
    const std::string dev = absl::StrCat(kAccelClass, "/", name, "/device");
    absl::StatusOr<std::string> link = root.ReadLinkBasename(dev);
    absl::StatusOr<std::string> bus_id = link.ok() ? NormalizePciBusId(*link) : link.status();
    PciFunction* fn = bus_id.ok() ? facts.Find(*bus_id) : nullptr;
    // The accel class is shared with Intel and AMD NPUs: only Habana functions are hpu.
    if (fn == nullptr || fn->row != v1::ROW_HPU) {
      ++others;
      continue;
    }
    ++gaudis;
    v1::Device& d = fn->device;
    d.set_name(ReadOptional(root, dev + "/device_type").value_or(""));
    AddDeviceNode(d, absl::StrCat("/dev/accel/", name));
    if (std::optional<int64_t> module_id = ReadOptionalDecimal(root, dev + "/module_id")) {
      (*d.mutable_attributes())["module_id"] = absl::StrCat(*module_id);
      d.set_minor(static_cast<int32_t>(*module_id));
    }
    if (std::optional<std::string> version = ReadOptional(root, dev + "/driver_ver")) {
      facts.driver_versions[v1::ROW_HPU] = *version;
    }
    const std::optional<std::string> status = ReadOptional(root, dev + "/status");
    if (status && *status != "operational" && d.health() == v1::HEALTH_OK) {
      d.set_health(v1::HEALTH_FAULT);
      d.set_health_reason(absl::StrCat("Gaudi ", *bus_id, " reports status \"", *status, "\""));
    }
  }
  return problems.Finish(absl::StrCat(gaudis, " Gaudi devices, ", others, " other accel devices"));
}

absl::StatusOr<ProbeOutcome> ProbeNpu(const HostRoot&, HostFacts& facts) {
  if (!facts.HasRow(v1::ROW_NPU)) return Skipped("no Ascend NPU on the PCI bus");
  // /dev/davinciN is numbered by physical id; without DCMI the physical ids are taken to follow
  // PCI bus order.
  const int n = AssignNodesInBusOrder(facts, v1::ROW_NPU, "/dev/davinci");
  return Found(absl::StrCat(n, " NPUs, /dev/davinci<N> assigned in PCI bus order"));
}

absl::StatusOr<ProbeOutcome> ProbeMlu(const HostRoot& root, HostFacts& facts) {
  if (!root.IsDirectory(kCambriconProc)) return Skipped("no /proc/driver/cambricon/mlus (driver not loaded)");
  Problems problems;
  int mlus = 0;
  for (const std::string& name : root.ListDir(kCambriconProc).value_or(std::vector<std::string>())) {
    const std::string path = absl::StrCat(kCambriconProc, "/", name, "/information");
    absl::StatusOr<std::string> bus_id = NormalizePciBusId(name);
    PciFunction* fn = bus_id.ok() ? facts.Find(*bus_id) : nullptr;
    if (fn == nullptr || fn->row != v1::ROW_MLU) {
      problems.Add(absl::StrCat(kCambriconProc, "/", name, " is not an MLU of the PCI scan"));
      continue;
    }
    absl::StatusOr<std::string> text = root.ReadFile(path);
    problems.Add(text.status());
    if (!text.ok()) continue;
    ++mlus;
    const std::map<std::string, std::string> fields = ParseColonFields(*text);
    v1::Device& d = fn->device;
    if (const auto it = fields.find("Device name"); it != fields.end()) d.set_name(it->second);
    int32_t minor = 0;
    if (const auto it = fields.find("Device Minor"); it != fields.end() && absl::SimpleAtoi(it->second, &minor)) {
      d.set_minor(minor);
      AddDeviceNode(d, absl::StrCat("/dev/cambricon_dev", minor));
    } else {
      problems.Add(absl::StrCat(path, ": no valid \"Device Minor\""));
    }
    if (const auto it = fields.find("Driver Version"); it != fields.end()) {
      facts.driver_versions[v1::ROW_MLU] = it->second;
    }
  }
  return problems.Finish(absl::StrCat(mlus, " MLUs"));
}

absl::StatusOr<ProbeOutcome> ProbeMusa(const HostRoot&, HostFacts& facts) {
  if (!facts.HasRow(v1::ROW_MUSA)) return Skipped("no Moore Threads GPU on the PCI bus");
  const int n = AssignNodesInBusOrder(facts, v1::ROW_MUSA, "/dev/mtgpu.");
  return Found(absl::StrCat(n, " GPUs, /dev/mtgpu.<N> assigned in PCI bus order"));
}

}  // namespace devplace::probe
