// --nfd_features_file against a hostile local user: the daemon (often root) writes the feature file
// into the directory it opened and checked at start. A directory another user owns or may write
// (without the sticky bit) is refused with exit 2; swapping the directory for a link after the
// start does not make the daemon write into the link's target.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::StartsWith;

TEST(NfdDirectory, SwappedForALinkAfterStartTheFileNeverLandsInTheLinksTarget) {
  TempDir dir;
  ASSERT_EQ(RunCommand(absl::StrCat("cp -r ", ShellQuote(FixtureHost("cpu-only")), " ", dir.File("host"))).exit_code, 0);
  dir.Touch("features.d/");
  dir.Touch("root-only/");
  ASSERT_EQ(chmod(dir.File("root-only").c_str(), 0700), 0);
  const std::string file = dir.File("features.d/devplace");
  DaemonProcess d(dir.path(), {"--host_root=" + dir.File("host"), "--refresh_interval=0",
                               "--nfd_features_file=" + file, "--nfd_expiry=10m"});
  ASSERT_TRUE(d.WaitForLog("event=nfd_written path=" + file + " revision=1", absl::Seconds(20))) << d.Log();

  // The swap: the directory moves away and a link to a directory of the attacker's choice takes
  // its path. Then the hardware changes and a SIGHUP re-probes: a new revision to write.
  ASSERT_EQ(rename(dir.File("features.d").c_str(), dir.File("features.d.old").c_str()), 0);
  ASSERT_EQ(symlink(dir.File("root-only").c_str(), dir.File("features.d").c_str()), 0);
  dir.Write("host/sys/devices/system/cpu/online", "0-3\n");
  d.Signal(SIGHUP);
  ASSERT_TRUE(d.WaitForLog("event=nfd_written path=" + file + " revision=2", absl::Seconds(20))) << d.Log();

  EXPECT_TRUE(std::filesystem::is_empty(dir.File("root-only"))) << "the daemon wrote through the link";
  EXPECT_THAT(ReadFile(dir.File("features.d.old/devplace")), StartsWith("# +expiry-time="));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(20)), 0);
}

// Exit 2 with one line that names the flag and says what is wrong.
void ExpectRefused(const std::string& dir, const std::string& file, const std::string& why) {
  const CommandResult r = RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=unix:", dir,
                                                  "/s.sock --torch_probe_command=none --metrics_listen= "
                                                  "--nfd_features_file=",
                                                  file));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, StartsWith(absl::StrCat("devplaced: --nfd_features_file=", file, ": directory ")));
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(NfdDirectory, ADirectoryOthersMayWriteIsRefused) {
  TempDir dir;
  dir.Touch("features.d/");
  ASSERT_EQ(chmod(dir.File("features.d").c_str(), 0777), 0);
  ExpectRefused(dir.path(), dir.File("features.d/devplace"),
                "is writable by group or others without the sticky bit (mode 0777)");
}

TEST(NfdDirectory, ADirectoryAnotherUserOwnsIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory to another user";
  TempDir dir;
  dir.Touch("features.d/");
  ASSERT_EQ(chown(dir.File("features.d").c_str(), 65534, 65534), 0);
  ExpectRefused(dir.path(), dir.File("features.d/devplace"), "is owned by uid 65534, not by root or uid 0");
}

}  // namespace
}  // namespace devplace::testing
