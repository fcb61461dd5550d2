// client/common/bounded_read.h: the one rule of the clients' readers, piece by piece (the table
// tests/client/reader_table.txt holds the readers built on it, in both clients, to it end to end).
#include "client/common/bounded_read.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace::reading {
namespace {

using testing::TempDir;

TEST(BoundedRead, OnlyRegularFilesAreRead) {
  TempDir dir;
  ReadBudget budget(absl::Seconds(5), kMiB);
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadRegularFile(fifo, kMiB, budget).status().message(), "not a regular file (a FIFO); not read");
  EXPECT_EQ(ReadRegularFile("/dev/zero", kMiB, budget).status().message(),
            "not a regular file (a character device); not read");
  EXPECT_EQ(ReadRegularFile(dir.path(), kMiB, budget).status().message(), "not a regular file (a directory); not read");
  EXPECT_EQ(ReadRegularFile(dir.File("missing"), kMiB, budget).status().message(),
            "cannot read it (No such file or directory)");
  const std::string loop = dir.File("loop");
  ASSERT_EQ(symlink("loop", loop.c_str()), 0);
  EXPECT_EQ(ReadRegularFile(loop, kMiB, budget).status().message(),
            "cannot read it (Too many levels of symbolic links)");
  EXPECT_EQ(budget.bytes_left(), kMiB);  // nothing was read
}

TEST(BoundedRead, CapsAndBudgets) {
  TempDir dir;
  const std::string file = dir.Write("f", std::string(100, 'x'));
  ReadBudget budget(absl::Seconds(5), 150);
  EXPECT_EQ(ReadRegularFile(file, 99, budget).status().message(), "larger than 99 bytes; not read");
  EXPECT_EQ(*ReadRegularFile(file, 100, budget), std::string(100, 'x'));
  EXPECT_EQ(budget.bytes_left(), 50u);
  absl::StatusOr<std::string> again = ReadRegularFile(file, 100, budget);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(again.status().message(), "not read: the files read before it used up 150 bytes");
  ReadBudget spent(absl::ZeroDuration(), kMiB);
  EXPECT_EQ(ReadRegularFile(file, 100, spent).status().message(), "not read: the reader's 0 s were spent");
  EXPECT_EQ(SizeText(kMiB), "1 MiB");
  EXPECT_EQ(SizeText(64 * kKiB), "64 KiB");
  EXPECT_EQ(SizeText(1000), "1000 bytes");
  EXPECT_EQ(DurationText(absl::Milliseconds(250)), "250 ms");
}

TEST(BoundedRead, LinesStopAtTheCapWithoutHoldingALongLine) {
  TempDir dir;
  const std::string file = dir.Write("f", "a\nb\r\n" + std::string(200000, 'z') + "\nlast");
  ReadBudget budget(absl::Seconds(5), kMiB);
  std::vector<std::string> lines;
  absl::StatusOr<LinesEnd> end = ReadLines(file, 1000, budget, [&](absl::string_view l) {
    lines.emplace_back(l);
    return true;
  });
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(*end, LinesEnd::kLimit);
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "b\r"}));
  lines.clear();
  end = ReadLines(dir.Write("g", "one\ntwo"), kMiB, budget, [&](absl::string_view l) {
    lines.emplace_back(l);
    return true;
  });
  EXPECT_EQ(*end, LinesEnd::kEndOfFile);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two"}));
}

TEST(BoundedRead, ListingsKeepTheFirstNamesOnly) {
  TempDir dir;
  for (const char* name : {"d", "b", "x-skip", "a", "c"}) dir.Write(name, "");
  ReadBudget budget(absl::Seconds(5), 0);
  bool more = false;
  absl::StatusOr<std::vector<std::string>> names =
      ListNames(dir.path(), 3, budget, [](absl::string_view n) { return !absl::StartsWith(n, "x"); }, &more);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(ListNames(dir.File("missing"), 3, budget, [](absl::string_view) { return true; }, &more).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ListNames(dir.File("a"), 3, budget, [](absl::string_view) { return true; }, &more).status().message(),
            "cannot list it (Not a directory)");
}

TEST(BoundedRead, TextIsMadeValidUtf8) {
  EXPECT_TRUE(IsUtf8("plain é 😀"));
  for (const char* bad : {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    EXPECT_FALSE(IsUtf8(bad)) << bad;
  }
  EXPECT_EQ(EscapeBytes("c\xff\n\x7f é\xe2\x82"), "c\\xff\\x0a\\x7f é\\xe2\\x82");
  EXPECT_EQ(CutUtf8("ab\xc3\xa9", 3), "ab");
  EXPECT_EQ(CutUtf8("ab\xc3\xa9", 4), "ab\xc3\xa9");
  EXPECT_EQ(CutUtf8("\xf0\x9f\x98\x80x", 3), "");
}

}  // namespace
}  // namespace devplace::reading
