// server/common/host_file.h: the server's one reader of host files, on real files of each kind
// (regular, FIFO, device node, directory, /proc) and at its size cap.
#include "server/common/host_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace {
namespace {

using ::testing::HasSubstr;
using devplace::testing::TempDir;

TEST(ReadHostFile, ReadsARegularFileWhole) {
  TempDir dir;
  const std::string path = dir.Write("version", "2.24.7.0\n");
  EXPECT_EQ(ReadHostFile(path).value(), "2.24.7.0\n");
  EXPECT_EQ(ReadHostFile(dir.Write("empty", "")).value(), "");
}

TEST(ReadHostFile, CapsTheSizeByErrorOrByCutting) {
  TempDir dir;
  const std::string path = dir.Write("ten", "0123456789");
  EXPECT_EQ(ReadHostFile(path, 10).value(), "0123456789");  // exactly the cap: whole
  const absl::StatusOr<std::string> over = ReadHostFile(path, 9);
  EXPECT_TRUE(absl::IsFailedPrecondition(over.status())) << over.status();
  EXPECT_EQ(over.status().message(), "not read: " + path + " is larger than 9 bytes");
  EXPECT_EQ(ReadHostFile(path, 4, HostFileLimit::kTruncate).value(), "0123");
  // The default cap, 1 MiB, on a file one byte over it, read in 4 KiB pieces.
  const std::string big = dir.Write("big", std::string(kHostFileMaxBytes + 1, 'x'));
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadHostFile(big).status()));
  EXPECT_EQ(ReadHostFile(big, kHostFileMaxBytes, HostFileLimit::kTruncate)->size(), kHostFileMaxBytes);
}

TEST(ReadHostFile, NeverOpensAFifoADeviceNodeOrADirectory) {
  TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO without a writer would block: the answer must come at once.
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<std::string> f = ReadHostFile(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(absl::IsFailedPrecondition(f.status())) << f.status();
  EXPECT_EQ(f.status().message(), "not read: " + fifo + " is a FIFO, not a regular file");

  const absl::StatusOr<std::string> zero = ReadHostFile("/dev/zero");  // endless if it were read
  EXPECT_EQ(zero.status().message(), "not read: /dev/zero is a character device, not a regular file");
  const absl::StatusOr<std::string> d = ReadHostFile(dir.path());
  EXPECT_EQ(d.status().message(), "not read: " + dir.path() + " is a directory, not a regular file");
  // A link is followed to what it names.
  ASSERT_EQ(symlink("/dev/zero", dir.File("zero-link").c_str()), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadHostFile(dir.File("zero-link")).status()));
}

TEST(ReadHostFile, MapsErrorsToCodesNamingThePath) {
  TempDir dir;
  const absl::StatusOr<std::string> missing = ReadHostFile(dir.File("missing"));
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_EQ(missing.status().message(), "cannot open " + dir.File("missing") + ": No such file or directory");
  EXPECT_TRUE(absl::IsNotFound(ReadHostFile(dir.Write("file", "x") + "/below").status()));  // ENOTDIR
  const std::string long_name = dir.File(std::string(5000, 'a'));
  EXPECT_TRUE(absl::IsInvalidArgument(ReadHostFile(long_name).status()));  // ENAMETOOLONG
  // The process of a /proc/<pid> file ended between open and read: ESRCH is "not found".
  const absl::Status gone = HostErrnoStatus(ESRCH, "cannot read", "/proc/123/stat");
  EXPECT_TRUE(absl::IsNotFound(gone));
  EXPECT_EQ(gone.message(), "cannot read /proc/123/stat: No such process");
  EXPECT_TRUE(absl::IsPermissionDenied(HostErrnoStatus(EACCES, "cannot open", "/x")));
  EXPECT_TRUE(absl::IsInternal(HostErrnoStatus(EIO, "cannot read", "/x")));
}

TEST(ReadHostFile, ReadsProcFilesThatReportNoSize) {
  // /proc files have st_size 0: the reader reads to the end, not to the reported size.
  const absl::StatusOr<std::string> stat = ReadHostFile("/proc/self/stat", 4096, HostFileLimit::kTruncate);
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_THAT(*stat, HasSubstr(absl::StrCat(getpid(), " (")));
  // A process that has ended and been reaped: its /proc directory is gone.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(absl::IsNotFound(ReadHostFile(absl::StrCat("/proc/", child, "/stat")).status()));
}

}  // namespace
}  // namespace devplace
