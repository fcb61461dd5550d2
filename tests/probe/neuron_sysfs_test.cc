// Neuron enrichment from the driver's sysfs metrics (server/probe/host/neuron_sysfs.h): on the
// neuron-2x-trn1 fixture host (per-core device memory in use under neuron_core<k>) and on small
// trees written here for the incomplete and unknown-model cases.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/host/host_root.h"
#include "server/probe/host/neuron_sysfs.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(NeuronSysfsTest, FixtureHostGetsMemoryFromThePerCoreMetrics) {
  const v1::Inventory inv = ProbeHost("neuron-2x-trn1");
  const v1::Device* busy = FindDevice(inv, "0000:00:1c.0");
  ASSERT_NE(busy, nullptr);
  EXPECT_EQ(busy->memory_total_bytes(), 32 * kGiB);
  EXPECT_EQ(busy->memory_free_bytes(), 32 * kGiB - 5 * kGiB);  // cores use 4 GiB + 1 GiB
  EXPECT_EQ(busy->attributes().at("memory_source"), "neuron_sysfs");
  EXPECT_EQ(busy->attributes().at("neuron_core0_device_mem_used_bytes"), "4294967296");
  EXPECT_EQ(busy->attributes().at("neuron_core1_device_mem_used_bytes"), "1073741824");
  EXPECT_EQ(busy->sub_device_count(), 2u);
  const v1::Device* idle = FindDevice(inv, "0000:00:1d.0");
  ASSERT_NE(idle, nullptr);
  EXPECT_EQ(idle->memory_free_bytes(), 32 * kGiB);
}

TEST(NeuronSysfsTest, AnUnreadableCoreLeavesFreeMemoryUnknown) {
  TempDir tmp;
  const std::string dir = "/sys/class/neuron_device/neuron0";
  tmp.Write(dir.substr(1) + "/neuron_core0/stats/memory_usage/device_mem/total", "1024\n");
  tmp.Touch(dir.substr(1) + "/neuron_core1/stats/");
  v1::Device d;
  EXPECT_EQ(probe::AddNeuronSysfsMetrics(probe::HostRoot(tmp.path()), dir, 0x7264, d), 2u);
  EXPECT_EQ(d.memory_total_bytes(), 32 * kGiB);
  EXPECT_FALSE(d.has_memory_free_bytes());
  EXPECT_EQ(d.attributes().count("memory_source"), 0u);
  EXPECT_EQ(d.attributes().at("neuron_core0_device_mem_used_bytes"), "1024");
}

TEST(NeuronSysfsTest, UnknownModelGetsTheCoreFiguresOnly) {
  TempDir tmp;
  const std::string dir = "/sys/class/neuron_device/neuron0";
  tmp.Write(dir.substr(1) + "/neuron_core0/stats/memory_usage/device_mem/total", "2048\n");
  v1::Device d;
  EXPECT_EQ(probe::AddNeuronSysfsMetrics(probe::HostRoot(tmp.path()), dir, 0x7565, d), 1u);
  EXPECT_FALSE(d.has_memory_total_bytes());
  EXPECT_FALSE(d.has_memory_free_bytes());
  EXPECT_EQ(d.attributes().at("neuron_core0_device_mem_used_bytes"), "2048");
}

TEST(NeuronSysfsTest, NoMetricsTreeChangesNothing) {
  TempDir tmp;
  tmp.Touch("sys/class/neuron_device/neuron0/");
  v1::Device d;
  EXPECT_EQ(probe::AddNeuronSysfsMetrics(probe::HostRoot(tmp.path()), "/sys/class/neuron_device/neuron0", 0x7164, d), 0u);
  EXPECT_FALSE(d.has_memory_total_bytes());
  EXPECT_TRUE(d.attributes().empty());
  EXPECT_EQ(probe::NeuronDeviceMemoryBytes(0x7364), 96 * kGiB);
  EXPECT_EQ(probe::NeuronDeviceMemoryBytes(0x1234), std::nullopt);
}

}  // namespace
}  // namespace devplace::testing
