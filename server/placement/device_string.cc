#include "server/placement/device_string.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/placement/backends.h"

namespace devplace::placement {
namespace {


// PyTorch device types c10 parses that are not placement targets, with the reason.
struct NonTarget {
  absl::string_view type;
  absl::string_view why;
};
constexpr NonTarget kNonTargets[] = {
    {"hip", "AMD GPUs are `cuda` devices in PyTorch's ROCm build and Hugging Face code never "
            "produces `hip:N`; use `cuda` or `cuda:N`"},
    {"meta", "`meta` tensors have no storage; it is not a device a job runs on"},
    {"privateuseone", "name the out-of-tree backend instead (npu, mlu, musa, neuron)"},
    {"ipu", "Graphcore IPUs are not a devplace hardware row"},
    {"ve", "NEC Vector Engine is not a devplace hardware row"},
    {"fpga", "not a devplace hardware row"},
    {"ort", "ONNX Runtime is not a placement target"},
    {"lazy", "the lazy tensor backend is not a placement target"},
    {"vulkan", "the Vulkan backend is not a placement target"},
    {"mkldnn", "MKLDNN is a CPU tensor layout; use `cpu`"},
    {"opengl", "not a placement target"},
    {"opencl", "not a placement target"},
    {"ideep", "IDEEP is a CPU layout; use `cpu`"},
    {"maia", "not a devplace hardware row"},
    {"mtia", "not a devplace hardware row"},
};

bool IsPlacementType(absl::string_view t) {
  for (absl::string_view p : absl::StrSplit(PlacementDeviceTypeList(), ", ")) {
    if (p == t) return true;
  }
  return false;
}

std::string Accepted() {
  return absl::StrCat("accepted forms: a device type (", PlacementDeviceTypeList(),
                      ") optionally followed by ':' and an index 0..", kMaxDeviceIndex,
                      " without sign or leading zero, e.g. cuda:0");
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, "; ", Accepted()));
}

}  // namespace

bool ParseDecimal(absl::string_view text, int* out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return false;
  }
  int32_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return false;
  *out = v;
  return true;
}

bool ParseCoreEntry(absl::string_view entry, int* first, int* last) {
  const std::vector<absl::string_view> ab = absl::StrSplit(entry, '-');
  if (ab.size() != 1 && ab.size() != 2) return false;
  if (!ParseDecimal(ab[0], first)) return false;
  if (ab.size() == 1) {
    *last = *first;
    return true;
  }
  return ParseDecimal(ab[1], last) && *first <= *last;
}

std::string DeviceString::ToString() const {
  if (index < 0 || (type == "cpu" && index == 0)) return type;
  return absl::StrCat(type, ":", index);
}

absl::StatusOr<DeviceString> ParseDeviceString(absl::string_view text, absl::string_view field) {
  // G1
  if (text.empty()) return Invalid(field, "Device string must not be empty");
  // G2: ([a-zA-Z_]+)(:([1-9][0-9]*|0))? over the whole string.
  size_t i = 0;
  while (i < text.size() && (absl::ascii_isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
  const absl::string_view type = text.substr(0, i);
  absl::string_view index_text;
  bool ok = !type.empty();
  if (ok && i < text.size()) {
    if (text[i] != ':') {
      ok = false;
    } else {
      index_text = text.substr(i + 1);
      ok = !index_text.empty() &&
           std::all_of(index_text.begin(), index_text.end(),
                       [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) &&
           (index_text == "0" || index_text[0] != '0');
    }
  }
  if (!ok) return Invalid(field, absl::StrCat("Invalid device string: '", text, "'"));

  // G4: the type, case-sensitive.
  if (!IsPlacementType(type)) {
    for (const NonTarget& n : kNonTargets) {
      if (n.type == type) {
        return Invalid(field, absl::StrCat("'", text, "' names PyTorch device type '", type,
                                           "', which is not a placement target: ", n.why));
      }
    }
    std::string hint;
    const std::string lower = absl::AsciiStrToLower(type);
    if (lower != type && IsPlacementType(lower)) {
      hint = absl::StrCat(" (device types are case-sensitive: did you mean '", lower, "'?)");
    }
    return Invalid(field, absl::StrCat("Expected one of ", PlacementDeviceTypeList(),
                                       " device type at start of device string: ", type, hint));
  }

  DeviceString out;
  out.type = std::string(type);
  if (!index_text.empty()) {
    // G3
    int32_t index = 0;
    if (!absl::SimpleAtoi(index_text, &index)) {
      return Invalid(field, absl::StrCat("Could not parse device index '", index_text,
                                         "' in device string '", text, "'"));
    }
    if (index > kMaxDeviceIndex) {
      return Invalid(field, absl::StrCat("device index ", index, " in '", text,
                                         "' is out of range: PyTorch device indices are 0..",
                                         kMaxDeviceIndex, " (DeviceIndex is 8-bit)"));
    }
    // G5
    if (out.type == "cpu" && index != 0) {
      return Invalid(field, absl::StrCat("'", text, "': the cpu device has only index 0 (use 'cpu')"));
    }
    out.index = index;
  }
  return out;
}

}  // namespace devplace::placement
