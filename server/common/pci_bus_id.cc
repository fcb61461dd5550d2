#include "server/common/pci_bus_id.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace devplace {
namespace {

bool IsHexDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

}  // namespace

absl::StatusOr<std::string> NormalizePciBusId(absl::string_view bus_id) {
  const absl::string_view s = absl::StripAsciiWhitespace(bus_id);
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad PCI bus id \"", s, "\" (", why, "; want dddd:bb:dd.f)"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return bad("not domain:bus:device.function");
  const std::vector<absl::string_view> dev_fn = absl::StrSplit(parts[2], '.');
  if (dev_fn.size() != 2) return bad("no '.' before the function");
  const absl::string_view domain = parts[0], bus = parts[1], dev = dev_fn[0], fn = dev_fn[1];
  if (domain.size() > 8 || bus.size() > 2 || dev.size() > 2 || fn.size() != 1) {
    return bad("field too long");
  }
  for (absl::string_view f : {domain, bus, dev, fn}) {
    if (!IsHexDigits(f)) return bad("not hex");
  }
  uint32_t d = 0, b = 0, v = 0, f = 0;
  if (!absl::SimpleHexAtoi(domain, &d) || !absl::SimpleHexAtoi(bus, &b) ||
      !absl::SimpleHexAtoi(dev, &v) || !absl::SimpleHexAtoi(fn, &f)) {
    return bad("not hex");
  }
  if (v > 0x1f) return bad("device above 1f");
  if (f > 7) return bad("function above 7");
  return absl::StrFormat("%04x:%02x:%02x.%x", d, b, v, f);
}

}  // namespace devplace
