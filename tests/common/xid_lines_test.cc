// The XID watcher's lines (server/common/xid_lines.h): what devplace-probe --watch_xid writes,
// devplaced parses back; anything else, or too long, is not a watcher line.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/common/xid_lines.h"

namespace devplace::testing {
namespace {

std::string Parsed(const std::string& text) {
  const std::optional<XidLine> line = ParseXidLine(text);
  if (!line.has_value()) return "not a watcher line";
  std::string again = FormatXidLine(*line);
  again.pop_back();  // the newline
  return again;
}

TEST(XidLines, EachKindRoundTrips) {
  for (const std::string text : {"watching 2 8", "xid 0000:9a:00.0 79 1796612400", "unknown the library lacks X",
                                 "error nvmlEventSetWait_v2: NVML_ERROR_UNKNOWN", "xid 0000:18:00.0 4294967295 0"}) {
    EXPECT_EQ(Parsed(text), text);
  }
}

TEST(XidLines, MalformedLinesAreRefused) {
  for (const std::string text : {"", "hello", "watching 3 2", "watching -1 2", "watching 1", "xid 00000000:9A:00.0 79 1",
                                 "xid 0000:9a:00.0 0 1", "xid 0000:9a:00.0 4294967296 1", "xid 0000:9a:00.0 79",
                                 "xid 0000:9a:00.0 x 1", "fake_nvml: cannot read /nonexistent"}) {
    EXPECT_EQ(Parsed(text), "not a watcher line") << text;
  }
  EXPECT_EQ(Parsed("unknown " + std::string(300, 'a')), "not a watcher line");
}

TEST(XidLines, TextIsCutToTheBoundAndMadePrintable) {
  XidLine line;
  line.kind = XidLine::Kind::kError;
  line.text = std::string(1000, 'e') + "\n";
  std::string text = FormatXidLine(line);
  EXPECT_EQ(text.size(), kXidLineMaxBytes);
  EXPECT_EQ(text.back(), '\n');
  line.text = "a\nb\x01";
  EXPECT_EQ(FormatXidLine(line), "error a?b?\n");
}

}  // namespace
}  // namespace devplace::testing
