// PyTorch device-string grammar (SEMANTICS.md section 7, rules G1-G6), mirroring
// pytorch/pytorch:c10/core/Device.cpp `Device::Device(const std::string&)` except where PyTorch
// is unsafe: indices above 127 (c10 1.13 silently wraps them into its 8-bit DeviceIndex) and
// `cpu:N` with N > 0 (accepted by release builds only because validation is debug-only) are
// rejected here.
#ifndef DEVPLACE_SERVER_PLACEMENT_DEVICE_STRING_H_
#define DEVPLACE_SERVER_PLACEMENT_DEVICE_STRING_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace::placement {

// Largest device index PyTorch can represent (DeviceIndex is int8_t in released builds).
inline constexpr int kMaxDeviceIndex = 127;

// A parsed device string: a type and an optional index.
struct DeviceString {
  std::string type;  // lower-case PyTorch device type, one of the placement types below
  int index = -1;    // 0..kMaxDeviceIndex, or -1 when the string has no index

  // Canonical form (G6): "type" or "type:index"; `cpu:0` canonicalises to "cpu" (G5).
  std::string ToString() const;
  bool has_index() const { return index >= 0; }
};

// Parses a non-empty run of ASCII digits (no sign, no spaces) into `out`; false when `text` is
// anything else or overflows int. The number syntax of device indices and of the vendor masks.
bool ParseDecimal(absl::string_view text, int* out);

// One entry of NEURON_RT_VISIBLE_CORES: a core index `N` (first = last = N) or an inclusive range
// `A-B` with A <= B; false for anything else. The Neuron runtime's syntax, which torch_xla's remap
// (neuron_utils.get_visible_cores_list) reads the same way.
bool ParseCoreEntry(absl::string_view entry, int* first, int* last);

// Parses `text` as a device string. `field` names where the text came from (e.g. "device_map",
// "env.ACCELERATE_TORCH_DEVICE") and prefixes every error message.
// Errors (all INVALID_ARGUMENT, the message quoting the input and listing the accepted forms):
//   G1 empty; G2 anything outside `([a-zA-Z_]+)(:([1-9][0-9]*|0))?` (whitespace, sign, leading
//   zero, second colon, missing type or index); G3 an index beyond int range ("Could not parse
//   device index") or above 127; G4 an unknown or wrongly-cased type, or a PyTorch type that is
//   not a placement target (`hip`: AMD GPUs are `cuda`; `meta`: no storage; ...); G5 `cpu:N`, N>0.
absl::StatusOr<DeviceString> ParseDeviceString(absl::string_view text, absl::string_view field);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_DEVICE_STRING_H_
