// libFuzzer target: the device-string grammar never crashes, and whatever it accepts prints to a
// canonical string that parses back to the same device (G6).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/placement/device_string.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<devplace::placement::DeviceString> parsed = devplace::placement::ParseDeviceString(text, "fuzz");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) abort();  // every rejection says why
    return 0;
  }
  absl::StatusOr<devplace::placement::DeviceString> again =
      devplace::placement::ParseDeviceString(parsed->ToString(), "fuzz");
  if (!again.ok() || again->ToString() != parsed->ToString()) abort();
  return 0;
}
