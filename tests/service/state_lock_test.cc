// The lock of the daemon's state directory (StateDirectoryLock, lease_file.h) on real files and a
// real flock(2): one holder at a time (a second open of the lock file, as a second daemon makes,
// is refused naming the holder's pid and the fix), released with its holder; a missing directory,
// a lock file that is a symbolic link or a directory others may write are errors of their own.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/lease_file.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using service::StateDirectoryLock;

TEST(StateDirectoryLock, OneHolderAtATimeTheSecondIsToldWhoAndWhatToDo) {
  TempDir dir;
  const std::string lease_file = dir.File("leases.state");
  absl::StatusOr<StateDirectoryLock> first = StateDirectoryLock::Take(lease_file);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->path(), dir.File("devplaced.lock"));
  EXPECT_EQ(ReadFile(dir.File("devplaced.lock")), absl::StrCat(getpid(), "\n"));
  struct stat st {};
  ASSERT_EQ(stat(dir.File("devplaced.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0);

  // Another lease file in the same directory shares its health file: refused the same.
  for (const std::string& other : {lease_file, dir.File("other.state")}) {
    absl::StatusOr<StateDirectoryLock> second = StateDirectoryLock::Take(other);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(second.status().message(),
                HasSubstr(absl::StrCat("--lease_state_file=", other, " is in use by another devplaced (pid ", getpid(),
                                       ", holding ", dir.File("devplaced.lock"), "): stop that daemon, or give this "
                                       "one another --lease_state_file")));
  }
  // The holder's pid is known only from the file: without it the message says so.
  ASSERT_EQ(truncate(dir.File("devplaced.lock").c_str(), 0), 0);
  EXPECT_THAT(StateDirectoryLock::Take(lease_file).status().message(), HasSubstr("(pid unknown, holding "));

  // Released with its holder (moved first: the moved-from one holds nothing).
  std::optional<StateDirectoryLock> moved(*std::move(first));
  moved.reset();
  absl::StatusOr<StateDirectoryLock> again = StateDirectoryLock::Take(lease_file);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(StateDirectoryLock, AMissingDirectoryIsNotFoundALinkOrAnOpenDirectoryIsRefused) {
  TempDir dir;
  EXPECT_EQ(StateDirectoryLock::Take(dir.File("missing/leases.state")).status().code(), absl::StatusCode::kNotFound);

  std::filesystem::create_directory(dir.File("linked"));
  std::filesystem::create_symlink(dir.File("elsewhere"), dir.File("linked/devplaced.lock"));
  absl::Status link = StateDirectoryLock::Take(dir.File("linked/leases.state")).status();
  EXPECT_EQ(link.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(link.message(), HasSubstr("linked/devplaced.lock is a symbolic link"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("elsewhere")));

  std::filesystem::create_directory(dir.File("open"));
  ASSERT_EQ(chmod(dir.File("open").c_str(), 01777), 0);
  absl::Status open = StateDirectoryLock::Take(dir.File("open/leases.state")).status();
  EXPECT_EQ(open.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(std::filesystem::exists(dir.File("open/devplaced.lock")));
}

}  // namespace
}  // namespace devplace::testing
