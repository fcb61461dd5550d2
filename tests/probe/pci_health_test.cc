// The PCIe link and AER health counters read from sysfs (docs/PROBE.md "Device health") on the
// fixture host nvidia-3x-h100-health: what each counter makes the device, and that a counter that
// cannot be read is unknown, never a fault.
#include <sys/stat.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/host/pci_health.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr char kHost[] = "nvidia-3x-h100-health";

const v1::HealthCounter* FindCounter(const v1::Device& d, const std::string& name) {
  for (const v1::HealthCounter& c : d.health_counters()) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

TEST(PciHealthTest, LinkAtItsMaximumAndCorrectedErrorsAreOk) {
  const v1::Inventory inv = ProbeHost(kHost);
  const v1::Device* d = FindDevice(inv, "0000:18:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_OK);
  EXPECT_EQ(d->health_reason(), "");
  EXPECT_TRUE(d->usable());
  EXPECT_EQ(d->health_counters_size(), 7);
  const v1::HealthCounter* cor = FindCounter(*d, "aer_dev_correctable");
  ASSERT_NE(cor, nullptr);
  EXPECT_EQ(cor->value(), "3");
  EXPECT_EQ(cor->effect(), v1::HEALTH_OK);
  EXPECT_EQ(cor->source(), "sysfs /sys/bus/pci/devices/0000:18:00.0/aer_dev_correctable");
  EXPECT_THAT(cor->rule(), HasSubstr("BadTLP 3"));
}

TEST(PciHealthTest, LinkTrainedDownIsDegradedAndStillUsable) {
  const v1::Inventory inv = ProbeHost(kHost);
  const v1::Device* d = FindDevice(inv, "0000:3b:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_DEGRADED);
  EXPECT_TRUE(d->usable());
  const v1::HealthCounter* width = FindCounter(*d, "current_link_width");
  ASSERT_NE(width, nullptr);
  EXPECT_EQ(width->value(), "8");
  EXPECT_EQ(width->effect(), v1::HEALTH_DEGRADED);
  EXPECT_EQ(width->source(), "sysfs /sys/bus/pci/devices/0000:3b:00.0/current_link_width");
  EXPECT_THAT(width->rule(), HasSubstr("x8 below its maximum x16"));
  const v1::HealthCounter* speed = FindCounter(*d, "current_link_speed");
  ASSERT_NE(speed, nullptr);
  EXPECT_EQ(speed->value(), "8.0 GT/s PCIe");
  // A lower speed is a note: GPUs lower their link speed while idle, so it would mark most of them.
  EXPECT_EQ(speed->effect(), v1::HEALTH_OK);
  EXPECT_THAT(speed->rule(), HasSubstr("8 GT/s below its maximum 32 GT/s (a note, not a health change"));
  EXPECT_EQ(FindCounter(*d, "max_link_width")->effect(), v1::HEALTH_OK);
  EXPECT_EQ(d->health_reason(),
            "current_link_width 8: PCIe link width x8 below its maximum x16 (trained down: fewer lanes than the device "
            "and slot support)");
}

TEST(PciHealthTest, FatalAerErrorIsAFaultAndNotUsable) {
  const v1::Inventory inv = ProbeHost(kHost);
  const v1::Device* d = FindDevice(inv, "0000:9a:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(d->usable());
  const v1::HealthCounter* fatal = FindCounter(*d, "aer_dev_fatal");
  ASSERT_NE(fatal, nullptr);
  EXPECT_EQ(fatal->value(), "1");
  EXPECT_EQ(fatal->effect(), v1::HEALTH_FAULT);
  EXPECT_THAT(d->health_reason(), HasSubstr("aer_dev_fatal 1: uncorrectable fatal PCIe errors since boot"));
  EXPECT_THAT(d->unusable_reason(), HasSubstr("aer_dev_fatal 1"));
}

TEST(PciHealthTest, NonFatalErrorsDegrade) {
  ScratchHost host(kHost);
  host.Write("sys/bus/pci/devices/0000:18:00.0/aer_dev_nonfatal", "DLP 0\nCmpltTO 2\nTOTAL_ERR_NONFATAL 2\n");
  const v1::Device* d = nullptr;
  const v1::Inventory inv = ProbeTree(host.dir());
  d = FindDevice(inv, "0000:18:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_DEGRADED);
  EXPECT_TRUE(d->usable());
  EXPECT_THAT(d->health_reason(), HasSubstr("aer_dev_nonfatal 2: uncorrectable non-fatal PCIe errors"));
}

// A counter that cannot be read (garbage, no total line, not a regular file, a link speed the
// kernel calls "Unknown") is unknown: it is listed with effect UNSPECIFIED and changes nothing.
TEST(PciHealthTest, UnreadableCountersAreUnknownNeverAFault) {
  ScratchHost host(kHost);
  const std::string dev = "sys/bus/pci/devices/0000:9a:00.0/";
  host.Write(dev + "aer_dev_fatal", "DLP 9\n");                    // no TOTAL_ERR_FATAL line
  host.Write(dev + "current_link_width", "lots\n");
  host.Write(dev + "current_link_speed", "Unknown\n");
  host.Remove(dev + "aer_dev_nonfatal");
  ASSERT_EQ(mkfifo(host.Path(dev + "aer_dev_nonfatal").c_str(), 0600), 0);  // would block a plain read
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::Device* d = FindDevice(inv, "0000:9a:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_OK) << d->health_reason();
  EXPECT_TRUE(d->usable());
  for (const char* name : {"aer_dev_fatal", "current_link_width", "current_link_speed", "aer_dev_nonfatal"}) {
    const v1::HealthCounter* c = FindCounter(*d, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->effect(), v1::HEALTH_UNSPECIFIED) << name;
    EXPECT_THAT(c->rule(), HasSubstr("unknown")) << name;
  }
}

// A kernel or device without the files (before Linux 4.19, or no AER capability) reports nothing.
TEST(PciHealthTest, AbsentFilesAddNoCounter) {
  const v1::Inventory inv = ProbeHost("nvidia-2x-h100");
  const v1::Device* d = FindDevice(inv, "0000:18:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health_counters_size(), 0);
  EXPECT_EQ(d->health(), v1::HEALTH_OK);
}

TEST(PciHealthTest, ParsesTheKernelsSpellings) {
  EXPECT_THAT(probe::ParseLinkSpeed("16.0 GT/s PCIe"), Optional(16.0));
  EXPECT_THAT(probe::ParseLinkSpeed("2.5 GT/s PCIe\n"), Optional(2.5));
  EXPECT_THAT(probe::ParseLinkSpeed("8 GT/s"), Optional(8.0));  // kernels before 5.x
  EXPECT_EQ(probe::ParseLinkSpeed("Unknown"), std::nullopt);
  EXPECT_EQ(probe::ParseLinkSpeed("Unknown speed"), std::nullopt);
  EXPECT_EQ(probe::ParseLinkSpeed("-8 GT/s"), std::nullopt);
  EXPECT_THAT(probe::ParseAerTotal("RxErr 1\nTOTAL_ERR_COR 7\n", "TOTAL_ERR_COR"), Optional(7u));
  EXPECT_EQ(probe::ParseAerTotal("TOTAL_ERR_CORX 7\n", "TOTAL_ERR_COR"), std::nullopt);
  EXPECT_EQ(probe::ParseAerTotal("TOTAL_ERR_COR many\n", "TOTAL_ERR_COR"), std::nullopt);
  EXPECT_EQ(probe::ParseAerTotal("TOTAL_ERR_COR 99999999999999999999999\n", "TOTAL_ERR_COR"), std::nullopt);
}

}  // namespace
}  // namespace devplace::testing
