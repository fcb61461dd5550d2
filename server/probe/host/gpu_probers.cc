// GPU probers: NVIDIA /proc files (DETECTION.md section 2, 12.4), AMD KFD topology and amdgpu
// sysfs (section 3), and DRM cards (sections 1.6, 6, 11).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/backends.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {
namespace {

constexpr absl::string_view kNvidiaProc = "/proc/driver/nvidia";
constexpr absl::string_view kMigMinors = "/proc/driver/nvidia-caps/mig-minors";
constexpr absl::string_view kKfdNodes = "/sys/class/kfd/kfd/topology/nodes";
constexpr absl::string_view kDrm = "/sys/class/drm";

// Records name, UUID and /dev/nvidia<minor> from /proc/driver/nvidia/gpus/<bdf>/information.
absl::Status ReadNvidiaInformation(const HostRoot& root, absl::string_view dir, PciFunction& fn) {
  ASSIGN_OR_RETURN(const std::string text, root.ReadFile(absl::StrCat(dir, "/information")));
  const std::map<std::string, std::string> fields = ParseColonFields(text);
  const auto field = [&fields](const char* key) {
    const auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  };
  v1::Device& d = fn.device;
  d.set_name(field("Model"));
  d.set_uuid(field("GPU UUID"));
  int32_t minor = 0;
  if (!absl::SimpleAtoi(field("Device Minor"), &minor) || minor < 0) {
    return absl::DataLossError(absl::StrCat(dir, "/information: no valid \"Device Minor\""));
  }
  d.set_minor(minor);
  AddDeviceNode(d, absl::StrCat("/dev/nvidia", minor));
  return absl::OkStatus();
}

// MIG instances of the GPU with device minor `gpu`, from the capability directories
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<X>/ci<Y> and the minors of their access
// files in mig-minors (each instance needs its GI and its CI capability node).
void ReadMigPartitions(const HostRoot& root, uint32_t gpu, const std::map<std::string, uint32_t>& minors,
                       v1::Device& device, Problems& problems) {
  const std::string mig_dir = absl::StrCat(kNvidiaProc, "/capabilities/gpu", gpu, "/mig");
  for (const auto& [gi, gi_name] : ListNumbered(root, mig_dir, "gi")) {
    for (const auto& [ci, ci_name] : ListNumbered(root, absl::StrCat(mig_dir, "/", gi_name), "ci")) {
      v1::Partition& p = *device.add_partitions();
      p.set_gpu_instance_id(gi);
      p.set_compute_instance_id(ci);
      for (const std::string& cap : {absl::StrCat("gpu", gpu, "/gi", gi, "/access"),
                                     absl::StrCat("gpu", gpu, "/gi", gi, "/ci", ci, "/access")}) {
        const auto it = minors.find(cap);
        if (it == minors.end()) {
          problems.Add(absl::StrCat(kMigMinors, " has no entry for ", cap));
          continue;
        }
        p.add_device_nodes(absl::StrCat("/dev/nvidia-caps/nvidia-cap", it->second));
      }
    }
  }
}

}  // namespace

absl::StatusOr<ProbeOutcome> ProbeNvidiaProc(const HostRoot& root, HostFacts& facts) {
  if (!root.IsDirectory(kNvidiaProc)) return Skipped("no /proc/driver/nvidia (driver not loaded)");
  Problems problems;
  std::vector<std::string> found;
  if (std::optional<std::string> text = ReadOptional(root, absl::StrCat(kNvidiaProc, "/version"))) {
    absl::StatusOr<std::string> version = ParseNvidiaDriverVersion(*text);
    problems.Add(version.status());
    if (version.ok()) {
      facts.driver_versions[v1::ROW_CUDA_NVIDIA] = *version;
      found.push_back(absl::StrCat("driver ", *version));
    }
  }

  const std::string gpus_dir = absl::StrCat(kNvidiaProc, "/gpus");
  int gpus = 0;
  for (const std::string& name : root.ListDir(gpus_dir).value_or(std::vector<std::string>())) {
    absl::StatusOr<std::string> bus_id = NormalizePciBusId(name);
    problems.Add(bus_id.status());
    if (!bus_id.ok()) continue;
    PciFunction* fn = facts.Find(*bus_id);
    if (fn == nullptr || fn->row != v1::ROW_CUDA_NVIDIA) {
      problems.Add(absl::StrCat(gpus_dir, "/", name, " is not an NVIDIA GPU of the PCI scan"));
      continue;
    }
    problems.Add(ReadNvidiaInformation(root, absl::StrCat(gpus_dir, "/", name), *fn));
    ++gpus;
  }
  found.push_back(absl::StrCat(gpus, " GPUs in ", gpus_dir));

  if (std::optional<std::string> text = ReadOptional(root, kMigMinors)) {
    absl::StatusOr<std::map<std::string, uint32_t>> minors = ParseMigMinors(*text);
    problems.Add(minors.status());
    int partitions = 0;
    for (PciFunction* fn : facts.OfRow(v1::ROW_CUDA_NVIDIA)) {
      if (!minors.ok() || fn->device.minor() < 0) continue;
      ReadMigPartitions(root, static_cast<uint32_t>(fn->device.minor()), *minors, fn->device, problems);
      partitions += fn->device.partitions_size();
    }
    found.push_back(absl::StrCat(partitions, " MIG instances"));
  }
  return problems.Finish(absl::StrJoin(found, ", "));
}

absl::StatusOr<ProbeOutcome> ProbeAmd(const HostRoot& root, HostFacts& facts) {
  const std::vector<PciFunction*> gpus = facts.OfRow(v1::ROW_CUDA_AMD);
  const bool kfd = root.IsDirectory(kKfdNodes);
  if (gpus.empty() && !kfd) return Skipped("no AMD GPU on the PCI bus and no KFD topology");
  Problems problems;
  for (PciFunction* fn : gpus) {
    v1::Device& d = fn->device;
    const std::optional<int64_t> total = ReadOptionalDecimal(root, fn->sysfs_path + "/mem_info_vram_total");
    if (total && *total > 0) {
      d.set_memory_total_bytes(static_cast<uint64_t>(*total));
      const std::optional<int64_t> used = ReadOptionalDecimal(root, fn->sysfs_path + "/mem_info_vram_used");
      if (used && *used >= 0 && *used <= *total) d.set_memory_free_bytes(static_cast<uint64_t>(*total - *used));
    }
    d.set_name(ReadOptional(root, fn->sysfs_path + "/product_name").value_or(""));
    ReadAmdgpuRasCounters(root, fn->sysfs_path, d);
  }

  int kfd_gpus = 0;
  // E-ORDER (HIP): libhsakmt numbers the topology's nodes in ascending sysfs node id and ROCr
  // makes one GPU agent per node with SIMDs, in that order; HIP's device ordinals (and the
  // ordinals of ROCR_VISIBLE_DEVICES) follow those agents. So the n-th GPU node here is HIP
  // device n, whatever its PCI position (docs/SEMANTICS.md section 3).
  int32_t hip_ordinal = 0;
  for (const auto& [node, name] : ListNumbered(root, kKfdNodes, "")) {
    const std::string dir = absl::StrCat(kKfdNodes, "/", name);
    absl::StatusOr<std::string> text = root.ReadFile(dir + "/properties");
    problems.Add(text.status());
    if (!text.ok()) continue;
    const std::map<std::string, std::string> props = ParseSpaceFields(*text);
    const auto number = [&props](const char* key) {
      uint64_t value = 0;
      const auto it = props.find(key);
      return it != props.end() && absl::SimpleAtoi(it->second, &value) ? value : 0;
    };
    if (number("simd_count") == 0) continue;  // a CPU node
    const int32_t ordinal = hip_ordinal++;    // counted even when the node matches no PCI GPU
    // location_id = bus << 8 | device << 3 | function (bits 31:28: partition id).
    const uint64_t location = number("location_id");
    const std::string bus_id = absl::StrFormat("%04x:%02x:%02x.%x", number("domain"), (location >> 8) & 0xff,
                                               (location >> 3) & 0x1f, location & 0x7);
    PciFunction* fn = facts.Find(bus_id);
    if (fn == nullptr || fn->row != v1::ROW_CUDA_AMD) {
      problems.Add(absl::StrCat(dir, " names ", bus_id, ", not an AMD GPU of the PCI scan"));
      continue;
    }
    ++kfd_gpus;
    v1::Device& d = fn->device;
    d.set_runtime_ordinal(ordinal);
    if (const uint64_t gfx = number("gfx_target_version"); gfx > 0) {
      (*d.mutable_attributes())["gfx_target_version"] = GfxTargetName(static_cast<uint32_t>(gfx));
    }
    if (const uint64_t render = number("drm_render_minor"); render > 0) {
      AddDeviceNode(d, absl::StrCat("/dev/dri/renderD", render));
    }
    // ROCm names a GPU "GPU-" + the 16 hex digits of its unique_id (ROCR_VISIBLE_DEVICES form).
    if (const uint64_t unique_id = number("unique_id"); unique_id > 0) {
      d.set_uuid(absl::StrFormat("GPU-%016x", unique_id));
    }
    if (!d.has_memory_total_bytes()) {
      uint64_t bytes = 0;
      for (const auto& [bank, bank_name] : ListNumbered(root, dir + "/mem_banks", "")) {
        const std::map<std::string, std::string> bank_props =
            ParseSpaceFields(root.ReadFile(absl::StrCat(dir, "/mem_banks/", bank_name, "/properties")).value_or(""));
        uint64_t size = 0;
        const auto it = bank_props.find("size_in_bytes");
        if (it != bank_props.end() && absl::SimpleAtoi(it->second, &size)) bytes += size;
      }
      if (bytes > 0) d.set_memory_total_bytes(bytes);
    }
  }
  return problems.Finish(absl::StrCat(gpus.size(), " AMD GPUs on the PCI bus, ", kfd_gpus,
                                      " GPU nodes in the KFD topology"));
}

absl::StatusOr<ProbeOutcome> ProbeDrm(const HostRoot& root, HostFacts& facts) {
  if (!root.IsDirectory(kDrm)) return Skipped("no /sys/class/drm");
  Problems problems;
  int cards = 0;
  for (const auto& [card, name] : ListNumbered(root, kDrm, "card")) {
    const std::string dir = absl::StrCat(kDrm, "/", name);
    absl::StatusOr<std::string> link = root.ReadLinkBasename(dir + "/device");
    if (!link.ok()) continue;  // a card without a PCI parent
    absl::StatusOr<std::string> bus_id = NormalizePciBusId(*link);
    if (!bus_id.ok()) continue;  // a platform (non-PCI) display device
    PciFunction* fn = facts.Find(*bus_id);
    if (fn == nullptr) continue;  // not an accelerator (e.g. a BMC's VGA)
    ++cards;
    v1::Device& d = fn->device;
    // The row's node patterns say whether jobs need the card and/or the render node.
    bool wants_card = false, wants_render = false;
    for (absl::string_view pattern : placement::FindBackend(fn->row)->device_node_patterns) {
      if (absl::StrContains(pattern, "(control)")) continue;
      wants_card = wants_card || absl::StartsWith(pattern, "/dev/dri/card");
      wants_render = wants_render || absl::StartsWith(pattern, "/dev/dri/renderD");
    }
    if (wants_card) AddDeviceNode(d, absl::StrCat("/dev/dri/", name));
    if (wants_render) {
      for (const auto& [minor, render] : ListNumbered(root, dir + "/device/drm", "renderD")) {
        AddDeviceNode(d, absl::StrCat("/dev/dri/", render));
      }
    }
    if (!d.has_memory_total_bytes()) {
      if (std::optional<int64_t> lmem = ReadOptionalDecimal(root, dir + "/lmem_total_bytes"); lmem && *lmem > 0) {
        d.set_memory_total_bytes(static_cast<uint64_t>(*lmem));
      }
    }
    // Tiles (stacks): i915 lists card<N>/gt/gt<k>, xe lists card<N>/device/tile<k>.
    const size_t tiles = std::max(ListNumbered(root, dir + "/gt", "gt").size(),
                                  ListNumbered(root, dir + "/device", "tile").size());
    if (tiles > 1) d.set_sub_device_count(static_cast<uint32_t>(tiles));
  }
  return problems.Finish(absl::StrCat(cards, " DRM cards of accelerators"));
}

}  // namespace devplace::probe
