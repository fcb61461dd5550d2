// The rule for NVIDIA's critical XIDs (docs/PROBE.md "XID critical errors"): a critical XID since
// devplaced started makes its GPU FAULT with an "xid.<n>" counter; the application XIDs the NVIDIA
// device plugin ignores are counted and change nothing; a reading for a GPU not in the inventory,
// or on another row, is dropped.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/xid_health.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using placement::ApplyXidReadings;
using placement::XidReading;

const absl::Time kAt = absl::FromUnixSeconds(1796612400);  // 2026-12-07T03:00:00Z

// Two NVIDIA GPUs (9a:00.0, 18:00.0), OK and usable, and one AMD GPU at 9a:00.0 too.
v1::Inventory TwoGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2).Add(v1::ROW_CUDA_AMD, 1);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).set_pci_bus_id("0000:9a:00.0");
  b.Device(v1::ROW_CUDA_NVIDIA, 1).set_pci_bus_id("0000:18:00.0");
  b.Device(v1::ROW_CUDA_AMD, 0).set_pci_bus_id("0000:9a:00.0");
  v1::Inventory inv = b.Build();
  for (v1::Backend& backend : *inv.mutable_backends()) {
    for (v1::Device& d : *backend.mutable_devices()) d.set_health(v1::HEALTH_OK);
  }
  return inv;
}

const v1::Backend& Row(const v1::Inventory& inv, v1::Row row) {
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == row) return b;
  }
  static const v1::Backend kNone;
  ADD_FAILURE() << "no row " << row;
  return kNone;
}

TEST(XidHealth, ACriticalXidMakesItsGpuFaultWithItsCount) {
  v1::Inventory inv = TwoGpus();
  ApplyXidReadings({{"0000:9a:00.0", 79, 2, kAt}}, inv);
  const v1::Backend& cuda = Row(inv, v1::ROW_CUDA_NVIDIA);
  const v1::Device& gpu = cuda.devices(0);
  EXPECT_EQ(gpu.health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(gpu.usable());
  ASSERT_EQ(gpu.health_counters_size(), 1);
  EXPECT_EQ(gpu.health_counters(0).name(), "xid.79");
  EXPECT_EQ(gpu.health_counters(0).value(), "2");
  EXPECT_EQ(gpu.health_counters(0).source(), "NVML nvmlEventSetWait_v2");
  EXPECT_EQ(gpu.health_counters(0).effect(), v1::HEALTH_FAULT);
  EXPECT_THAT(gpu.health_reason(), HasSubstr("xid.79 2: critical XID 79 since devplaced started (last at "
                                             "2026-12-07T03:00:00Z): reset the GPU"));
  EXPECT_THAT(gpu.unusable_reason(), HasSubstr("xid.79 2"));
  EXPECT_EQ(cuda.state_reason(), "1 of 2 devices usable");
  // The other GPU, and the AMD GPU at the same address on another row, are untouched.
  EXPECT_EQ(cuda.devices(1).health(), v1::HEALTH_OK);
  EXPECT_TRUE(cuda.devices(1).usable());
  EXPECT_EQ(Row(inv, v1::ROW_CUDA_AMD).devices(0).health_counters_size(), 0);
}

TEST(XidHealth, TheDevicePluginsApplicationXidsAreCountedButChangeNothing) {
  for (const uint64_t xid : {13, 31, 43, 45, 68}) {
    v1::Inventory inv = TwoGpus();
    ApplyXidReadings({{"0000:18:00.0", xid, 1, kAt}}, inv);
    const v1::Device& gpu = Row(inv, v1::ROW_CUDA_NVIDIA).devices(1);
    EXPECT_EQ(gpu.health(), v1::HEALTH_OK) << xid;
    EXPECT_TRUE(gpu.usable()) << xid;
    ASSERT_EQ(gpu.health_counters_size(), 1);
    EXPECT_EQ(gpu.health_counters(0).effect(), v1::HEALTH_OK);
    EXPECT_THAT(gpu.health_counters(0).rule(), HasSubstr("application XID"));
  }
  for (const uint64_t xid : {8, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120}) {
    EXPECT_FALSE(placement::IsApplicationXid(xid)) << xid;
  }
}

TEST(XidHealth, AReadingForAGpuNotInTheInventoryIsDropped) {
  v1::Inventory inv = TwoGpus();
  const v1::Inventory before = inv;
  ApplyXidReadings({{"0000:3b:00.0", 79, 1, kAt}, {"", 79, 1, kAt}}, inv);
  EXPECT_EQ(inv.SerializeAsString(), before.SerializeAsString());
}

}  // namespace
}  // namespace devplace::testing
