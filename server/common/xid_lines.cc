#include "server/common/xid_lines.h"

#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/pci_bus_id.h"

namespace devplace {
namespace {

constexpr uint64_t kMaxXid = std::numeric_limits<uint32_t>::max();

std::string Printable(absl::string_view text, size_t room) {
  std::string out(text.substr(0, room));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

}  // namespace

std::string FormatXidLine(const XidLine& line) {
  switch (line.kind) {
    case XidLine::Kind::kWatching:
      return absl::StrCat("watching ", line.gpus, " ", line.gpus_total, "\n");
    case XidLine::Kind::kXid:
      return absl::StrCat("xid ", Printable(line.bus_id, 32), " ", line.xid, " ", line.unix_seconds, "\n");
    case XidLine::Kind::kUnknown:
      return absl::StrCat("unknown ", Printable(line.text, kXidLineMaxBytes - 9), "\n");
    case XidLine::Kind::kError:
      break;
  }
  return absl::StrCat("error ", Printable(line.text, kXidLineMaxBytes - 7), "\n");
}

std::optional<XidLine> ParseXidLine(absl::string_view text) {
  if (text.size() >= kXidLineMaxBytes) return std::nullopt;
  const size_t space = text.find(' ');
  const absl::string_view word = text.substr(0, space);
  const absl::string_view rest = space == absl::string_view::npos ? "" : text.substr(space + 1);
  XidLine line;
  if (word == "unknown" || word == "error") {
    line.kind = word == "unknown" ? XidLine::Kind::kUnknown : XidLine::Kind::kError;
    line.text = Printable(rest, kXidLineMaxBytes);
    return line;
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ');
  if (word == "watching" && fields.size() == 2) {
    line.kind = XidLine::Kind::kWatching;
    if (!absl::SimpleAtoi(fields[0], &line.gpus) || !absl::SimpleAtoi(fields[1], &line.gpus_total) ||
        line.gpus < 0 || line.gpus > line.gpus_total) {
      return std::nullopt;
    }
    return line;
  }
  if (word == "xid" && fields.size() == 3) {
    line.kind = XidLine::Kind::kXid;
    absl::StatusOr<std::string> bus = NormalizePciBusId(fields[0]);
    if (!bus.ok() || *bus != fields[0]) return std::nullopt;
    line.bus_id = *bus;
    if (!absl::SimpleAtoi(fields[1], &line.xid) || line.xid == 0 || line.xid > kMaxXid ||
        !absl::SimpleAtoi(fields[2], &line.unix_seconds)) {
      return std::nullopt;
    }
    return line;
  }
  return std::nullopt;
}

}  // namespace devplace
