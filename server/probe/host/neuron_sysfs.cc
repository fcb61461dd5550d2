#include "server/probe/host/neuron_sysfs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/probe/host/prober_util.h"

namespace devplace::probe {

std::optional<uint64_t> NeuronDeviceMemoryBytes(uint16_t device_id) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  switch (device_id) {
    case 0x7064: return 8 * kGiB;   // Inferentia (Inf1)
    case 0x7164: return 32 * kGiB;  // Trainium (Trn1)
    case 0x7264: return 32 * kGiB;  // Inferentia2 (Inf2)
    case 0x7364: return 96 * kGiB;  // Trainium2 (Trn2)
    default: return std::nullopt;
  }
}

uint32_t AddNeuronSysfsMetrics(const HostRoot& root, absl::string_view dir, uint16_t device_id, v1::Device& d) {
  const auto cores = ListNumbered(root, dir, "neuron_core");
  if (cores.empty()) return 0;
  uint64_t used = 0;
  bool complete = true;
  for (const auto& [k, name] : cores) {
    const std::optional<int64_t> bytes =
        ReadOptionalDecimal(root, absl::StrCat(dir, "/", name, "/stats/memory_usage/device_mem/total"));
    if (!bytes || *bytes < 0) {
      complete = false;
      continue;
    }
    used += static_cast<uint64_t>(*bytes);
    (*d.mutable_attributes())[absl::StrCat(name, "_device_mem_used_bytes")] = absl::StrCat(*bytes);
  }
  if (const std::optional<uint64_t> total = NeuronDeviceMemoryBytes(device_id)) {
    d.set_memory_total_bytes(*total);
    if (complete) {
      d.set_memory_free_bytes(*total - std::min(used, *total));
      (*d.mutable_attributes())["memory_source"] = "neuron_sysfs";
    }
  }
  return static_cast<uint32_t>(cores.size());
}

}  // namespace devplace::probe
