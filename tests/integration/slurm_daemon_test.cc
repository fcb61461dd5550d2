// `devplace slurm gres` / `slurm task-prolog` against the real devplaced on a fixture host: the
// daemon's inventory gives the same gres.conf records as the saved one, and the prolog, which
// checks the step's allocation against the /dev nodes this process can see, refuses (exit 1,
// nothing exported) when the allocated NPU's node is not among them.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The record lines (not comments) of gres.conf text.
std::vector<std::string> Records(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) out.emplace_back(line);
  }
  return out;
}

TEST(SlurmDaemon, GresFromTheDaemonMatchesTheSavedInventoryAndThePrologNeverWidens) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/npu-2x-910b",
                               "--refresh_interval=0"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target());
  const CommandResult live = RunCommand(cli + " slurm gres");
  ASSERT_EQ(live.exit_code, 0) << live.err;
  const CommandResult saved = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " slurm gres --inventory=",
                                                      ShellQuote(DEVPLACE_SOURCE_DIR "/tests/golden/probe/npu-2x-910b.json")));
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_THAT(Records(live.out), ::testing::SizeIs(2));
  EXPECT_EQ(Records(live.out), Records(saved.out));

  // This test process sees no /dev/davinci1: an allocation of it cannot be shown, so nothing is.
  const CommandResult prolog = RunCommand("env SLURM_STEP_GPUS=1 SLURM_LOCALID=0 SLURM_NTASKS=1 " + cli + " slurm task-prolog");
  EXPECT_EQ(prolog.exit_code, 1) << prolog.out;
  EXPECT_EQ(prolog.out, "");
  EXPECT_THAT(prolog.err, StartsWith("devplace: slurm task-prolog: FAILED_PRECONDITION: "));
  EXPECT_THAT(prolog.err, HasSubstr("refusing to widen"));
}

}  // namespace
}  // namespace devplace::testing
