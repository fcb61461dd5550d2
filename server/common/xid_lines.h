// The lines `devplace-probe --watch_xid` (the XID watcher, server/probe/vendor_libs/nvml_xid_watch.h)
// writes to devplaced (server/inventory/xid_watcher.h), one per line, at most kXidLineMaxBytes each
// with its newline (docs/PROBE.md "XID critical errors"):
//
//   watching <n> <of>           events registered on n of the library's `of` GPUs
//   xid <bus id> <xid> <time>   a critical XID: the GPU's canonical PCI address, the XID number
//                               (1 to 2^32-1) and when the watcher saw it (Unix seconds)
//   unknown <why>               nothing can be watched (a missing call, no GPU offers the event)
//   error <why>                 a call failed; the watcher exits after it
//
// Both sides use this one formatter and parser.
#ifndef DEVPLACE_SERVER_COMMON_XID_LINES_H_
#define DEVPLACE_SERVER_COMMON_XID_LINES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace devplace {

// The longest line, newline included; a longer one is not a watcher line.
inline constexpr size_t kXidLineMaxBytes = 256;

struct XidLine {
  enum class Kind { kWatching, kXid, kUnknown, kError };
  Kind kind = Kind::kError;
  int gpus = 0, gpus_total = 0;  // kWatching
  std::string bus_id;            // kXid: canonical "dddd:bb:dd.f"
  uint64_t xid = 0;              // kXid
  int64_t unix_seconds = 0;      // kXid
  std::string text;              // kUnknown, kError: printable ASCII, cut to fit the line
};

// The line with its newline, never longer than kXidLineMaxBytes (text is cut and its
// non-printable bytes become '?').
std::string FormatXidLine(const XidLine& line);

// Parses one line (without its newline); nullopt when it is not a well-formed watcher line
// (an unknown word, a bad number, a bus id that is not canonical, an XID of 0 or above 2^32-1).
std::optional<XidLine> ParseXidLine(absl::string_view line);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_XID_LINES_H_
