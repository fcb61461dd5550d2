// `devplace slurm gres` / `slurm task-prolog` against the real devplaced on a fixture host: the
// daemon's inventory gives the same gres.conf records as the saved one, and the prolog, which
// checks the step's allocation against the /dev nodes this process can see, refuses (exit 1,
// nothing exported) when the allocated NPU's node is not among them, naming that cause; and a
// SLURM_LOCALID carrying an `export` line of its own is refused with nothing printed.
#include <unistd.h>

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
using ::testing::Not;
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
  // The cause is named: the node, not a variable.
  EXPECT_THAT(prolog.err, HasSubstr("the task cannot open the device node of 1 of them (/dev/davinci1 not in its /dev"));
}

// The issue's case: a task that sees no /dev/nvidia* node was told no value of CUDA_DEVICE_ORDER
// could select its GPU; it is told its node is missing.
TEST(SlurmDaemon, ATaskWithoutTheGpusNodeIsToldSo) {
  if (access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "this machine has /dev/nvidia0: the task would see it";
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
                               "--refresh_interval=0"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target());
  const CommandResult prolog = RunCommand("env SLURM_STEP_GPUS=0 SLURM_LOCALID=0 SLURM_NTASKS=1 " + cli + " slurm task-prolog");
  EXPECT_EQ(prolog.exit_code, 1) << prolog.out;
  EXPECT_EQ(prolog.out, "");
  EXPECT_THAT(prolog.err, HasSubstr("FAILED_PRECONDITION: Slurm allocated 1 NVIDIA GPU device(s) to this step (host #0 "
                                    "(/dev/nvidia0)), but the task cannot open the device node of 1 of them "
                                    "(/dev/nvidia0 not in its /dev"));
  EXPECT_THAT(prolog.err, Not(HasSubstr("CUDA_DEVICE_ORDER")));
}

// Issue: SLURM_LOCALID=$'0\nexport CUDA_VISIBLE_DEVICES=0,1' with SLURM_STEP_GPUS=1 printed a later
// export line widening the mask, exit 0. Now: exit 1, nothing on stdout.
TEST(SlurmDaemon, AnInjectedRankPrintsNothing) {
  const std::string prolog_cmd = absl::StrCat("SLURM_STEP_GPUS=1 SLURM_NTASKS=1 SLURM_LOCALID=\"$(printf '0\\nexport ",
                                              "CUDA_VISIBLE_DEVICES=0,1')\" ", ShellQuote(DEVPLACE_CLI_BINARY),
                                              " slurm task-prolog --inventory=",
                                              ShellQuote(DEVPLACE_SOURCE_DIR "/tests/golden/probe/nvidia-2x-h100.json"));
  const CommandResult prolog = RunCommand(prolog_cmd);
  EXPECT_EQ(prolog.exit_code, 1);
  EXPECT_EQ(prolog.out, "");
  EXPECT_THAT(prolog.err, HasSubstr("INVALID_ARGUMENT: SLURM_LOCALID='0\\nexport CUDA_VISIBLE_DEVICES=0,1': not a "
                                    "task id; accepted: a decimal integer 0..2147483646"));
  // The same without the injection: the step's one GPU and its rank.
  const CommandResult good = RunCommand(absl::StrCat("SLURM_STEP_GPUS=1 SLURM_NTASKS=1 SLURM_LOCALID=0 ",
                                                     ShellQuote(DEVPLACE_CLI_BINARY), " slurm task-prolog --inventory=",
                                                     ShellQuote(DEVPLACE_SOURCE_DIR "/tests/golden/probe/nvidia-2x-h100.json")));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(good.out, "export CUDA_VISIBLE_DEVICES=1\nexport LOCAL_RANK=0\nexport WORLD_SIZE=1\n");
}

}  // namespace
}  // namespace devplace::testing
