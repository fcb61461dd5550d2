#include "server/probe/host/pci_health.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace devplace::probe {
namespace {

constexpr size_t kMaxFileBytes = 4096;
constexpr size_t kMaxValueBytes = 256;

// The file's trimmed text; nullopt when the file does not exist (nothing to report); an unknown
// counter is added (and nullopt returned) when it exists but cannot be read.
std::optional<std::string> ReadCounterFile(const HostRoot& root, const std::string& path, absl::string_view name,
                                           v1::Device& d) {
  absl::StatusOr<std::string> text = root.ReadFile(path, kMaxFileBytes);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) {
    if (d.health_counters_size() >= kMaxHealthCounters) return std::nullopt;
    v1::HealthCounter& c = *d.add_health_counters();
    c.set_name(std::string(name));
    c.set_source(absl::StrCat("sysfs ", path));
    c.set_effect(v1::HEALTH_UNSPECIFIED);
    c.set_rule(absl::StrCat("unknown: ", text.status().message()));
    return std::nullopt;
  }
  return std::string(absl::StripAsciiWhitespace(*text));
}

v1::HealthCounter* Add(v1::Device& d, absl::string_view name, const std::string& path, absl::string_view value,
                       v1::Health effect, std::string rule) {
  if (d.health_counters_size() >= kMaxHealthCounters) return nullptr;
  v1::HealthCounter& c = *d.add_health_counters();
  c.set_name(std::string(name));
  c.set_value(std::string(value.substr(0, kMaxValueBytes)));
  c.set_source(absl::StrCat("sysfs ", path));
  c.set_effect(effect);
  c.set_rule(std::move(rule));
  return &c;
}

std::string Gts(double gts) { return absl::StrCat(gts, " GT/s"); }

// current_<what> against max_<what>: a width below the maximum DEGRADED, a speed below it a note.
void ReadLinkPair(const HostRoot& root, absl::string_view dir, absl::string_view what, v1::Device& d) {
  const std::string cur_name = absl::StrCat("current_", what), max_name = absl::StrCat("max_", what);
  const std::string cur_path = absl::StrCat(dir, "/", cur_name), max_path = absl::StrCat(dir, "/", max_name);
  const std::optional<std::string> cur = ReadCounterFile(root, cur_path, cur_name, d);
  const std::optional<std::string> max = ReadCounterFile(root, max_path, max_name, d);
  const bool width = what == "link_width";
  auto parse = [&](const std::optional<std::string>& text) -> std::optional<double> {
    if (!text) return std::nullopt;
    if (!width) return ParseLinkSpeed(*text);
    uint32_t lanes = 0;
    if (!absl::SimpleAtoi(*text, &lanes) || lanes == 0 || lanes > 32) return std::nullopt;
    return lanes;
  };
  const std::optional<double> cur_v = parse(cur), max_v = parse(max);
  auto spell = [&](double v) { return width ? absl::StrCat("x", v) : Gts(v); };
  if (cur) {
    if (!cur_v) {
      Add(d, cur_name, cur_path, *cur, v1::HEALTH_UNSPECIFIED,
          absl::StrCat("unknown: not a ", width ? "lane count" : "link speed", " the kernel writes"));
    } else if (!max_v) {
      Add(d, cur_name, cur_path, *cur, v1::HEALTH_OK, absl::StrCat("PCIe link ", spell(*cur_v), "; its maximum is unknown"));
    } else if (*cur_v < *max_v) {
      // A speed below the maximum is a note: GPUs lower their link speed while idle (PCIe link
      // power management), so it would mark most idle GPUs; fewer lanes is a trained-down link.
      Add(d, cur_name, cur_path, *cur, width ? v1::HEALTH_DEGRADED : v1::HEALTH_OK,
          absl::StrCat("PCIe link ", width ? "width" : "speed", " ", spell(*cur_v), " below its maximum ", spell(*max_v),
                       width ? " (trained down: fewer lanes than the device and slot support)"
                             : " (a note, not a health change: GPUs lower their link speed while idle; one that "
                               "stays low under load trained down)"));
    } else {
      Add(d, cur_name, cur_path, *cur, v1::HEALTH_OK, absl::StrCat("PCIe link at its maximum ", spell(*max_v)));
    }
  }
  if (max) {
    Add(d, max_name, max_path, *max, max_v ? v1::HEALTH_OK : v1::HEALTH_UNSPECIFIED,
        max_v ? absl::StrCat("the most the device and its slot support: ", spell(*max_v))
              : absl::StrCat("unknown: not a ", width ? "lane count" : "link speed", " the kernel writes"));
  }
}

struct AerFile {
  const char* name;
  const char* total;
  v1::Health if_nonzero;
  const char* rule;
};

// The AER rules (docs/PROBE.md "Device health"): fatal errors leave the link unreliable until it is
// reset (PCIe Base Specification, uncorrectable fatal errors; the kernel's AER guide), so any since
// boot is a FAULT; a non-fatal uncorrectable error lost a transaction but the link kept working:
// DEGRADED; correctable errors were corrected by the hardware: a raw counter, never a health
// change (a rising rate needs two readings over time).
constexpr AerFile kAerFiles[] = {
    {"aer_dev_fatal", "TOTAL_ERR_FATAL", v1::HEALTH_FAULT,
     "uncorrectable fatal PCIe errors since boot, the link unreliable until the device is reset"},
    {"aer_dev_nonfatal", "TOTAL_ERR_NONFATAL", v1::HEALTH_DEGRADED,
     "uncorrectable non-fatal PCIe errors since boot, transactions lost while the link kept working"},
    {"aer_dev_correctable", "TOTAL_ERR_COR", v1::HEALTH_OK,
     "correctable PCIe errors since boot, corrected by the hardware (a raw count, never a health change)"},
};

void ReadAer(const HostRoot& root, absl::string_view dir, const AerFile& file, v1::Device& d) {
  const std::string path = absl::StrCat(dir, "/", file.name);
  const std::optional<std::string> text = ReadCounterFile(root, path, file.name, d);
  if (!text) return;
  const std::optional<uint64_t> total = ParseAerTotal(*text, file.total);
  if (!total) {
    Add(d, file.name, path, "", v1::HEALTH_UNSPECIFIED, absl::StrCat("unknown: no \"", file.total, " N\" line"));
    return;
  }
  // The kinds that are not zero, as the file names them ("DLP 1, TLP 2"), for the reason.
  std::vector<std::string> kinds;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const size_t space = line.rfind(' ');
    uint64_t n = 0;
    if (space == absl::string_view::npos || absl::StartsWith(line, "TOTAL_ERR_")) continue;
    if (absl::SimpleAtoi(line.substr(space + 1), &n) && n > 0 && kinds.size() < 8) kinds.emplace_back(line);
  }
  const bool nonzero = *total > 0;
  Add(d, file.name, path, absl::StrCat(*total), nonzero ? file.if_nonzero : v1::HEALTH_OK,
      absl::StrCat(file.rule, kinds.empty() ? "" : absl::StrCat(" (", absl::StrJoin(kinds, ", "), ")")));
}

// The amdgpu driver's RAS blocks in the bit order of its feature mask (enum amdgpu_ras_block in
// Linux's amdgpu_ras.h; ROCm SMI's rsmi_gpu_block_t has the same bits for the first 14).
constexpr const char* kRasBlocks[] = {"umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn",
                                      "sem", "mp0", "mp1", "fuse", "mca", "vcn", "jpeg", "ih", "mpio"};
constexpr size_t kMaxRasFiles = 32;
constexpr absl::string_view kErrCount = "_err_count";

std::string RasRule(absl::string_view kind, absl::string_view block) {
  const std::string where = absl::StrCat("in the GPU's ", absl::AsciiStrToUpper(block), " block since the driver loaded");
  if (kind == "ue") {
    return absl::StrCat("uncorrectable errors ", where,
                        ": data was lost, the GPU is not to be used until it is reset and its bad pages retired");
  }
  if (kind == "ce") return absl::StrCat("correctable errors ", where, ", corrected by ECC (a raw count, never a health change)");
  if (kind == "de") {
    return absl::StrCat("deferred errors ", where, ", poisoned data not yet consumed (a raw count, never a health change)");
  }
  return absl::StrCat("\"", kind, "\" count ", where, " (a kind devplace does not know: never a health change)");
}

void ReadRasBlock(const HostRoot& root, const std::string& ras_dir, absl::string_view file, v1::Device& d) {
  const std::string path = absl::StrCat(ras_dir, "/", file), name = absl::StrCat("ras/", file);
  const std::optional<std::string> text = ReadCounterFile(root, path, name, d);
  if (!text) return;
  const auto counts = ParseRasErrorCount(*text);
  if (!counts) {
    Add(d, name, path, "", v1::HEALTH_UNSPECIFIED,
        "unknown: not the \"ue: N\" and \"ce: N\" lines the amdgpu driver writes");
    return;
  }
  const absl::string_view block = absl::StripSuffix(file, kErrCount);
  for (const auto& [kind, n] : *counts) {
    Add(d, absl::StrCat(name, " ", kind), path, absl::StrCat(n), kind == "ue" && n > 0 ? v1::HEALTH_FAULT : v1::HEALTH_OK,
        RasRule(kind, block));
  }
}

void ReadRasFeatures(const HostRoot& root, const std::string& ras_dir, v1::Device& d) {
  const std::string path = ras_dir + "/features", name = "ras/features";
  const std::optional<std::string> text = ReadCounterFile(root, path, name, d);
  if (!text) return;
  const std::optional<uint64_t> mask = ParseRasFeatureMask(*text);
  if (!mask) {
    Add(d, name, path, "", v1::HEALTH_UNSPECIFIED, "unknown: not the \"feature mask: 0x..\" line the amdgpu driver writes");
    return;
  }
  std::vector<std::string> on;
  for (size_t bit = 0; bit < 64; ++bit) {
    if ((*mask >> bit & 1) == 0) continue;
    on.push_back(bit < std::size(kRasBlocks) ? kRasBlocks[bit] : absl::StrCat("bit ", bit));
  }
  Add(d, name, path, absl::StrCat("0x", absl::Hex(*mask)), v1::HEALTH_OK,
      on.empty() ? "RAS is off on every block: the driver counts no errors (a note, not a health change)"
                 : absl::StrCat("RAS error counting on for ", absl::StrJoin(on, ", "), " (a note)"));
}

}  // namespace

std::optional<std::vector<std::pair<std::string, uint64_t>>> ParseRasErrorCount(absl::string_view text) {
  std::vector<std::pair<std::string, uint64_t>> out;
  bool ue = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    uint64_t n = 0;
    if (colon == absl::string_view::npos || colon == 0 || colon > 8 || out.size() >= 8 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(colon + 1)), &n)) {
      return std::nullopt;
    }
    out.emplace_back(std::string(line.substr(0, colon)), n);
    ue = ue || out.back().first == "ue";
  }
  if (!ue) return std::nullopt;
  return out;
}

std::optional<uint64_t> ParseRasFeatureMask(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  uint64_t mask = 0;
  if (!absl::ConsumePrefix(&text, "feature mask:")) return std::nullopt;
  text = absl::StripLeadingAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&text, "0x") || text.empty() || text.size() > 16 || !absl::SimpleHexAtoi(text, &mask)) {
    return std::nullopt;
  }
  return mask;
}

std::optional<double> ParseLinkSpeed(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const size_t space = text.find(' ');
  if (space == absl::string_view::npos || !absl::StartsWith(text.substr(space + 1), "GT/s")) return std::nullopt;
  double gts = 0;
  if (!absl::SimpleAtod(text.substr(0, space), &gts) || !(gts > 0) || gts > 1000) return std::nullopt;
  return gts;
}

std::optional<uint64_t> ParseAerTotal(absl::string_view text, absl::string_view total_name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, total_name) || !absl::ConsumePrefix(&line, " ")) continue;
    uint64_t n = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &n)) return n;
    return std::nullopt;
  }
  return std::nullopt;
}

void ReadPciHealthCounters(const HostRoot& root, absl::string_view dir, v1::Device& d) {
  ReadLinkPair(root, dir, "link_width", d);
  ReadLinkPair(root, dir, "link_speed", d);
  for (const AerFile& file : kAerFiles) ReadAer(root, dir, file, d);
}

void ReadAmdgpuRasCounters(const HostRoot& root, absl::string_view dir, v1::Device& d) {
  const std::string ras_dir = absl::StrCat(dir, "/ras");
  absl::StatusOr<std::vector<std::string>> names = root.ListDir(ras_dir);
  if (absl::IsNotFound(names.status())) return;
  if (!names.ok()) {
    Add(d, "ras", ras_dir, "", v1::HEALTH_UNSPECIFIED, absl::StrCat("unknown: ", names.status().message()));
    return;
  }
  size_t files = 0;
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kErrCount) || ++files > kMaxRasFiles) continue;
    ReadRasBlock(root, ras_dir, name, d);
  }
  ReadRasFeatures(root, ras_dir, d);
}

}  // namespace devplace::probe
