// TorchView runs the libtorch probe as a child (scripts stand in for devplace-torch-probe here):
// a good run replaces the view, a failed run keeps the last good view and reports the failure,
// and Cancel() kills a run in progress.
#include "server/inventory/torch_view.h"

#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// A script that prints `view` (as devplace-torch-probe's serialized Inventory) on its first run
// and fails with exit 3 after that.
std::vector<std::string> GoodThenFailing(const TempDir& dir, const v1::TorchInfo& view) {
  v1::Inventory out;
  *out.mutable_torch() = view;
  const std::string saved = dir.Write("view.bin", out.SerializeAsString());
  return dir.Script("torch-probe", "if [ -e " + dir.File("ran") + " ]; then echo 'libtorch exploded' >&2; exit 3; fi\n"
                                   "touch " + dir.File("ran") + "\ncat " + saved);
}

TEST(TorchView, KeepsTheLastGoodViewWhenARunFails) {
  TempDir dir;
  v1::TorchInfo good;
  good.set_probed(true);
  good.set_version("1.13.0");
  good.add_compiled_backends("cpu");
  inventory::TorchView view(GoodThenFailing(dir, good), absl::Seconds(5), "");
  EXPECT_THAT(view.Last().error(), HasSubstr("not probed yet"));
  v1::TorchInfo first = view.Run();
  EXPECT_TRUE(first.probed());
  EXPECT_EQ(first.version(), "1.13.0");
  EXPECT_EQ(first.error(), "");
  v1::TorchInfo second = view.Run();
  EXPECT_TRUE(second.probed());  // still what libtorch was seen to support
  EXPECT_EQ(second.version(), "1.13.0");
  EXPECT_THAT(second.error(), HasSubstr("last run failed"));
  EXPECT_THAT(second.error(), HasSubstr("exit"));
}

TEST(TorchView, AFailureBeforeAnyGoodRunSaysWhy) {
  TempDir dir;
  inventory::TorchView view(dir.Script("broken", "echo garbage"), absl::Seconds(5), "");
  const v1::TorchInfo v = view.Run();
  EXPECT_FALSE(v.probed());
  EXPECT_FALSE(v.error().empty());
  // Without a command, the error is the reason the daemon gave (the operator's "none", or no probe
  // installed), never "is empty".
  inventory::TorchView off({}, absl::Seconds(5), "devplace-torch-probe is turned off (--torch_probe_command=none)");
  EXPECT_EQ(off.Run().error(), "devplace-torch-probe is turned off (--torch_probe_command=none)");
}

TEST(TorchView, CancelKillsARunInProgressPromptly) {
  TempDir dir;
  inventory::TorchView view(dir.Script("hang", "sleep 1000"), absl::Seconds(60), "");
  const absl::Time start = absl::Now();
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    view.Cancel();
  });
  const v1::TorchInfo v = view.Run();
  canceller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(v.probed());
  EXPECT_THAT(v.error(), HasSubstr("cancelled"));
  // Later runs return at once.
  const absl::Time again = absl::Now();
  (void)view.Run();
  EXPECT_LT(absl::Now() - again, absl::Milliseconds(500));
}

}  // namespace
}  // namespace devplace::testing
