// devplace-probe --watch_xid (server/probe/vendor_libs/nvml_xid_watch.h) with the fake NVML by a
// real dlopen: nothing to watch is "unknown" (exit 0, never an XID); a failed wait is an "error"
// (exit 1, devplaced starts it again). The XIDs themselves: tests/integration's XidWatcher.*.
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// The watcher on `script` (nvidia-2x-h100's h100.txt plus `extra`) with `library`.
CommandResult Watch(const TempDir& dir, const std::string& extra, const std::string& library = DEVPLACE_FAKE_NVML,
                    const std::string& env = "") {
  std::ifstream in(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/h100.txt");
  std::ofstream(dir.path() + "/nvml.txt") << in.rdbuf() << extra;
  return RunCommand(env + " FAKE_NVML_CONFIG=" + ShellQuote(dir.path() + "/nvml.txt") + " " +
                    ShellQuote(DEVPLACE_PROBE_BINARY) + " --watch_xid --nvml_library=" + ShellQuote(library));
}

TEST(NvmlXidWatch, GpusWithoutTheEventAreUnknownAndTheWatcherEnds) {
  TempDir dir;
  const CommandResult r = Watch(dir, "device 0 event_types 0\ndevice 1 event_types 0x3\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "unknown no GPU offers the XID event (GPU 0 0000:9a:00.0: NVML_ERROR_NOT_SUPPORTED (3); GPU 1 "
                   "0000:18:00.0: NVML_ERROR_NOT_SUPPORTED (3))\n");
}

TEST(NvmlXidWatch, ALibraryWithoutTheEventCallsIsUnknown) {
  TempDir dir;
  const CommandResult r = Watch(dir, "", DEVPLACE_FAKE_CUDA);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("unknown the library lacks nvmlInit_v2, "));
  EXPECT_THAT(r.out, HasSubstr("nvmlEventSetWait_v2, nvmlEventSetFree\n"));
}

TEST(NvmlXidWatch, OneGpuRefusingRegistrationIsLeftOutTheOtherWatched) {
  TempDir dir;
  const CommandResult r = Watch(dir,
                                "fail nvmlDeviceRegisterEvents 0 NOT_SUPPORTED\n"
                                "fail nvmlEventSetWait_v2 - UNKNOWN\n");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "watching 1 2\nerror nvmlEventSetWait_v2: NVML_ERROR_UNKNOWN (999)\n");
}

}  // namespace
}  // namespace devplace::testing
