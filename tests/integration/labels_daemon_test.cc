// Node labels end to end: the real devplaced with --nfd_features_file writes the NFD feature file
// for a fixture host, does not rewrite it on a RefreshInventory that finds the same hardware, and
// refuses a bad flag with exit 2; the CLI's `devplace labels` prints the golden labels offline and
// from the daemon.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kRoot = DEVPLACE_SOURCE_DIR;
std::string Golden(const std::string& host) { return ReadFile(kRoot + "/tests/golden/labels/" + host + ".txt"); }

// The feature file without its two header lines (expiry directive, comment).
std::string LabelLines(const std::string& file) {
  const size_t first = file.find('\n');
  const size_t second = first == std::string::npos ? first : file.find('\n', first + 1);
  return second == std::string::npos ? "" : file.substr(second + 1);
}

struct FileId {
  ino_t inode = 0;
  struct timespec mtime {};
  bool operator==(const FileId& o) const {
    return inode == o.inode && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
  }
};
FileId Id(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, st.st_mtim};
}

TEST(LabelsDaemon, WritesTheFeatureFileAndKeepsItOnAnUnchangedRefresh) {
  TempDir dir;
  dir.Touch("features.d/");
  const std::string file = dir.File("features.d/devplace");
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--nvml_library=",
                               "--refresh_interval=0", "--nfd_features_file=" + file, "--nfd_expiry=10m"});
  ASSERT_TRUE(d.WaitForLog("event=nfd_written", absl::Seconds(20))) << d.Log();
  const std::string content = ReadFile(file);
  EXPECT_THAT(content, StartsWith("# +expiry-time=20"));
  EXPECT_EQ(LabelLines(content), Golden("nvidia-2x-h100"));
  const FileId before = Id(file);
  ASSERT_NE(before.inode, 0u);

  ConnectOptions options;
  options.address = d.unix_target();
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::StatusOr<v1::Inventory> first = client->Inventory();
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::StatusOr<v1::Inventory> refreshed = client->Refresh();
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  EXPECT_EQ(refreshed->revision(), first->revision());
  // The refresh's probe has finished (Refresh returned); give a (wrongly) triggered writer thread a
  // moment to act before checking that it did not.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(Id(file) == before) << "the feature file was rewritten on an unchanged revision";
  EXPECT_EQ(ReadFile(file), content);

  // `devplace labels` from the daemon prints the same labels.
  const CommandResult cli = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target(), " labels"));
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, Golden("nvidia-2x-h100"));

  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
  const std::string log = d.Log();
  size_t writes = 0;
  for (size_t at = log.find("event=nfd_written"); at != std::string::npos; at = log.find("event=nfd_written", at + 1)) {
    ++writes;
  }
  EXPECT_EQ(writes, 1u) << log;
}

TEST(LabelsDaemon, BadFeatureFileFlagExitsTwoWithOneLine) {
  TempDir dir;
  for (const std::string& flag : std::vector<std::string>{"--nfd_features_file=" + dir.File("no/such/dir/devplace"),
                                  "--nfd_features_file=" + dir.path(), "--nfd_expiry=10s"}) {
    SCOPED_TRACE(flag);
    const CommandResult r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=unix:", dir.File("s.sock"),
                                                    " --torch_probe_command=none ", flag));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, StartsWith("devplaced: --nfd_"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(LabelsCli, OfflineFromEverySavedFixtureInventoryPrintsTheGolden) {
  for (const char* host : {"nvidia-2x-h100", "amd-2x-mi210", "npu-2x-910b", "mixed-nvidia-amd-igpu", "cpu-only"}) {
    SCOPED_TRACE(host);
    const CommandResult r = RunCommand(
        absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " labels --inventory=",
                     ShellQuote(kRoot + "/tests/golden/probe/" + host + ".json")));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, Golden(host));
    EXPECT_EQ(r.err, "");
  }
  const CommandResult json = RunCommand(
      absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " labels --json --inventory=",
                   ShellQuote(kRoot + "/tests/golden/probe/nvidia-2x-h100.json")));
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, StartsWith("{\n  \"devplace.feature.node.kubernetes.io/"));
  EXPECT_THAT(json.out, HasSubstr("\"devplace.feature.node.kubernetes.io/cuda-nvidia.count\": \"2\""));
  const CommandResult missing = RunCommand(
      absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " labels --inventory=", ShellQuote(kRoot + "/nope.json")));
  EXPECT_EQ(missing.exit_code, 2);  // a file flag that cannot be read: a usage error
  EXPECT_THAT(missing.err, HasSubstr("--inventory="));
}

}  // namespace
}  // namespace devplace::testing
