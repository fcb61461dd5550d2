// HostRoot against fixture trees (plain dirs, relative and dangling symlinks).
#include "server/probe/host/host_root.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/probe/test_util.h"

namespace devplace::probe {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;

TEST(HostRootTest, ResolvesUnderRoot) {
  EXPECT_EQ(HostRoot("/").Resolve("/sys/bus"), "/sys/bus");
  EXPECT_EQ(HostRoot("/host/").Resolve("/sys/bus"), "/host/sys/bus");
  EXPECT_EQ(HostRoot("/host").Resolve("/proc/cpuinfo"), "/host/proc/cpuinfo");
}

TEST(HostRootTest, ReadsFilesAndTrims) {
  const HostRoot root(testing::HostDir("neuron-2x-trn1"));
  EXPECT_EQ(root.ReadFile("/sys/module/neuron/version").value(), "2.24.7.0\n");
  EXPECT_EQ(root.ReadTrimmed("/sys/module/neuron/version").value(), "2.24.7.0");
  // core_count is printed without a trailing newline.
  EXPECT_EQ(root.ReadFile("/sys/class/neuron_device/neuron0/core_count").value(), "2");
  EXPECT_EQ(root.ReadFile("/sys/module/neuron/version", 4).value(), "2.24");
  EXPECT_TRUE(absl::IsNotFound(root.ReadFile("/sys/module/nvidia/version").status()));
}

TEST(HostRootTest, ReadsDanglingLinkBasename) {
  const HostRoot root(testing::HostDir("nvidia-2x-h100"));
  EXPECT_FALSE(root.Exists("/sys/bus/pci/devices/0000:18:00.0/driver"));  // dangles in the fixture
  EXPECT_EQ(root.ReadLinkBasename("/sys/bus/pci/devices/0000:18:00.0/driver").value(), "nvidia");
  EXPECT_TRUE(absl::IsNotFound(root.ReadLinkBasename("/sys/bus/pci/devices/0000:18:00.0/nothing").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(root.ReadLinkBasename("/sys/bus/pci/devices/0000:18:00.0/vendor").status()));
}

TEST(HostRootTest, FollowsLinksToDirectories) {
  const HostRoot root(testing::HostDir("amd-2x-mi210"));
  EXPECT_EQ(root.ReadLinkBasename("/sys/class/drm/card1/device").value(), "0000:63:00.0");
  EXPECT_THAT(root.ListDir("/sys/class/drm/card1/device/drm").value(), ElementsAre("card1", "renderD128"));
  EXPECT_TRUE(root.IsDirectory("/sys/class/drm/card2/device"));
}

TEST(HostRootTest, ListsSorted) {
  const HostRoot root(testing::HostDir("xpu-2x-arc"));
  EXPECT_THAT(root.ListDir("/sys/bus/pci/devices").value(),
              ElementsAre("0000:00:02.0", "0000:03:00.0", "0000:04:00.0", "0000:07:00.0"));
  EXPECT_THAT(root.ListDir("/sys/class/drm").value(), Contains("card1-DP-1"));
  EXPECT_TRUE(absl::IsNotFound(root.ListDir("/sys/class/kfd").status()));
}

TEST(HostRootTest, OpenChecksTheRoot) {
  EXPECT_TRUE(HostRoot::Open(testing::HostDir("cpu-only")).ok());
  EXPECT_TRUE(absl::IsNotFound(HostRoot::Open("/nonexistent/devplace").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HostRoot::Open(testing::HostDir("cpu-only") + "/proc/cpuinfo").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HostRoot::Open("").status()));
}

}  // namespace
}  // namespace devplace::probe
