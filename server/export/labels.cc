#include "server/export/labels.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace devplace::labels {
namespace {

constexpr size_t kMaxValue = 63;

bool Allowed(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }

std::string TrimNonAlnum(std::string s) {
  size_t b = 0, e = s.size();
  while (b < e && !absl::ascii_isalnum(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && !absl::ascii_isalnum(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Leading "MAJOR.MINOR" numbers of a version string.
std::optional<std::pair<uint64_t, uint64_t>> MajorMinor(absl::string_view version) {
  absl::ConsumePrefix(&version, "v");  // "v5.10.22"
  std::vector<absl::string_view> parts = absl::StrSplit(version, '.');
  if (parts.size() < 2) return std::nullopt;
  auto digits = [](absl::string_view s) {
    size_t n = 0;
    while (n < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[n]))) ++n;
    return s.substr(0, n);
  };
  uint64_t major = 0, minor = 0;
  // The major part must be all digits; the minor part its leading digits ("18-amd64" -> 18).
  if (digits(parts[0]).size() != parts[0].size() || !absl::SimpleAtoi(parts[0], &major)) return std::nullopt;
  if (!absl::SimpleAtoi(digits(parts[1]), &minor)) return std::nullopt;
  return std::make_pair(major, minor);
}

std::string StateValue(v1::BackendState state) {
  const std::string& name = v1::BackendState_Name(state);
  absl::string_view view = name;
  absl::ConsumePrefix(&view, "BACKEND_STATE_");
  return absl::AsciiStrToLower(view);
}

void AddRow(const v1::Backend& row, std::map<std::string, std::string>& out) {
  const std::string slug = absl::StrReplaceAll(row.name(), {{"/", "-"}});
  auto put = [&](absl::string_view name, std::string value) { out[absl::StrCat(slug, ".", name)] = std::move(value); };
  put("present", "true");
  put("state", StateValue(row.state()));
  put("count", absl::StrCat(row.devices_size()));
  put("usable", absl::StrCat(std::count_if(row.devices().begin(), row.devices().end(),
                                           [](const v1::Device& d) { return d.usable(); })));
  put("healthy", absl::StrCat(std::count_if(row.devices().begin(), row.devices().end(),
                                            [](const v1::Device& d) { return d.health() == v1::HEALTH_OK; })));
  // product: the one name of the named devices when every unnamed device has the PCI id of a named
  // one (e.g. a GPU that fell off the bus next to its twin); "mixed" otherwise; omitted when no
  // device is named.
  std::map<std::string, std::string> name_of_id;  // "vendor:device" -> name
  std::string product;
  bool mixed = false;
  for (const v1::Device& d : row.devices()) {
    if (d.name().empty()) continue;
    if (!product.empty() && product != d.name()) mixed = true;
    product = d.name();
    name_of_id[absl::StrCat(d.vendor_id(), ":", d.device_id())] = d.name();
  }
  for (const v1::Device& d : row.devices()) {
    if (d.name().empty() && (d.device_id().empty() || !name_of_id.count(absl::StrCat(d.vendor_id(), ":", d.device_id())))) {
      mixed = true;
    }
  }
  if (!product.empty()) put("product", mixed ? "mixed" : SanitizeLabelValue(product));
  // memory: the minimum in MiB, only when every device's memory is known.
  std::optional<uint64_t> min_bytes;
  bool all_known = row.devices_size() > 0;
  for (const v1::Device& d : row.devices()) {
    if (!d.has_memory_total_bytes()) {
      all_known = false;
      break;
    }
    min_bytes = std::min(min_bytes.value_or(UINT64_MAX), d.memory_total_bytes());
  }
  if (all_known && min_bytes) put("memory", absl::StrCat(*min_bytes / (1024 * 1024)));
  // memory.source: the vendor library every device's memory figure came from (e.g. "hlml"),
  // only when the memory label is set and one library gave them all.
  std::set<std::string> sources;
  for (const v1::Device& d : row.devices()) {
    const auto it = d.attributes().find("memory_source");
    sources.insert(it != d.attributes().end() ? it->second : "");
  }
  if (all_known && min_bytes && sources.size() == 1 && !sources.begin()->empty()) {
    put("memory.source", SanitizeLabelValue(*sources.begin()));
  }
  if (!row.driver_version().empty()) {
    put("driver", SanitizeLabelValue(row.driver_version()));
    if (auto mm = MajorMinor(row.driver_version())) {
      put("driver.major", absl::StrCat(mm->first));
      put("driver.minor", absl::StrCat(mm->second));
    }
  }
  if (!row.device_type().empty()) put("device-type", SanitizeLabelValue(row.device_type()));
  if (!row.package().empty()) put("package", SanitizeLabelValue(row.package()));

  if (row.row() == v1::ROW_CUDA_NVIDIA) {
    if (auto it = row.attributes().find("cuda_driver_version"); it != row.attributes().end()) {
      if (auto mm = MajorMinor(it->second)) {
        put("cuda.driver.major", absl::StrCat(mm->first));
        put("cuda.driver.minor", absl::StrCat(mm->second));
      }
    }
    bool mode_known = false, enabled = false;
    for (const v1::Device& d : row.devices()) {
      if (auto it = d.attributes().find("mig_mode"); it != d.attributes().end()) {
        mode_known = true;
        enabled |= it->second == "enabled";
      }
      if (d.partitions_size() > 0) mode_known = enabled = true;
    }
    if (mode_known) {
      put("mig.capable", "true");
      put("mig.enabled", enabled ? "true" : "false");
    }
  }
}

}  // namespace

std::string SanitizeLabelValue(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (Allowed(c)) {
      out.push_back(c);
    } else if (out.empty() || out.back() != '-') {
      out.push_back('-');
    }
  }
  out = TrimNonAlnum(std::move(out));
  if (out.size() > kMaxValue) out = TrimNonAlnum(out.substr(0, kMaxValue));
  return out;
}

std::vector<Label> NodeLabels(const v1::Inventory& inventory) {
  std::map<std::string, std::string> names;
  for (const v1::Backend& row : inventory.backends()) {
    if (row.row() == v1::ROW_CPU || row.row() == v1::ROW_UNSPECIFIED) continue;
    AddRow(row, names);
  }
  const v1::Cpu& cpu = inventory.host().cpu();
  if (!cpu.architecture().empty()) names["cpu.arch"] = SanitizeLabelValue(cpu.architecture());
  if (!cpu.torch_cpu_capability().empty()) names["cpu.capability"] = SanitizeLabelValue(cpu.torch_cpu_capability());
  if (inventory.torch().probed() && !inventory.torch().version().empty()) {
    names["torch.version"] = SanitizeLabelValue(inventory.torch().version());
  }
  std::vector<Label> labels;
  labels.reserve(names.size());
  for (auto& [name, value] : names) labels.emplace_back(absl::StrCat(kLabelPrefix, name), std::move(value));
  return labels;
}

std::string FeatureFileText(const v1::Inventory& inventory, absl::Time expiry) {
  std::string text = absl::StrCat(
      "# +expiry-time=", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", expiry, absl::UTCTimeZone()), "\n",
      "# devplace node labels, inventory revision ", inventory.revision(),
      "; rewritten by devplaced before the expiry time while it runs\n");
  for (const auto& [key, value] : NodeLabels(inventory)) absl::StrAppend(&text, key, "=", value, "\n");
  return text;
}

}  // namespace devplace::labels
