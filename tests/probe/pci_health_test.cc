// The PCIe link and AER health counters read from sysfs (docs/PROBE.md "Device health") on the
// fixture host nvidia-3x-h100-health, and the amdgpu RAS counters on amd-2x-mi210-ras: what each
// counter makes the device, and that a counter that cannot be read is unknown, never a fault.
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

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

// The amdgpu driver's RAS counters on amd-2x-mi210-ras: 63:00.0 counts 2 uncorrectable UMC (memory)
// errors, 83:00.0 only corrected ones.
TEST(AmdgpuRasTest, UncorrectableUmcErrorsAreAFaultCorrectedOnesARawCount) {
  const v1::Inventory inv = ProbeHost("amd-2x-mi210-ras");
  const v1::Device* bad = FindDevice(inv, "0000:63:00.0");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(bad->usable());
  const v1::HealthCounter* ue = FindCounter(*bad, "ras/umc_err_count ue");
  ASSERT_NE(ue, nullptr);
  EXPECT_EQ(ue->value(), "2");
  EXPECT_EQ(ue->effect(), v1::HEALTH_FAULT);
  EXPECT_EQ(ue->source(), "sysfs /sys/bus/pci/devices/0000:63:00.0/ras/umc_err_count");
  EXPECT_THAT(bad->health_reason(), HasSubstr("ras/umc_err_count ue 2: uncorrectable errors in the GPU's UMC block"));
  EXPECT_EQ(FindCounter(*bad, "ras/umc_err_count ce")->effect(), v1::HEALTH_OK);
  const v1::HealthCounter* features = FindCounter(*bad, "ras/features");
  ASSERT_NE(features, nullptr);
  EXPECT_EQ(features->value(), "0xef");
  EXPECT_THAT(features->rule(), HasSubstr("umc, sdma, gfx, mmhub, pcie_bif, hdp, xgmi_wafl"));

  const v1::Device* ok = FindDevice(inv, "0000:83:00.0");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->health(), v1::HEALTH_OK) << ok->health_reason();
  EXPECT_TRUE(ok->usable());
  const v1::HealthCounter* ce = FindCounter(*ok, "ras/umc_err_count ce");
  ASSERT_NE(ce, nullptr);
  EXPECT_EQ(ce->value(), "3");
  EXPECT_THAT(ce->rule(), HasSubstr("never a health change"));
  EXPECT_EQ(ok->health_counters_size(), 15);  // 7 blocks x (ue, ce) and the feature mask
}

// A GPU without the ras directory (no RAS, or an older kernel) has no RAS counter; a RAS file that
// cannot be read or parsed is unknown and never a fault.
TEST(AmdgpuRasTest, UnreadableRasFilesAreUnknownNeverAFault) {
  EXPECT_EQ(FindCounter(*FindDevice(ProbeHost("amd-2x-mi210"), "0000:63:00.0"), "ras/umc_err_count ue"), nullptr);
  ScratchHost host("amd-2x-mi210-ras");
  const std::string ras = "sys/bus/pci/devices/0000:63:00.0/ras/";
  host.Write(ras + "umc_err_count", "ue: lots\nce: 9\n");
  host.Write(ras + "features", "feature mask 0xef\n");
  host.Remove(ras + "gfx_err_count");
  ASSERT_EQ(mkfifo(host.Path(ras + "gfx_err_count").c_str(), 0600), 0);  // would block a plain read
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::Device* d = FindDevice(inv, "0000:63:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_OK) << d->health_reason();
  for (const char* name : {"ras/umc_err_count", "ras/features", "ras/gfx_err_count"}) {
    const v1::HealthCounter* c = FindCounter(*d, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->effect(), v1::HEALTH_UNSPECIFIED) << name;
    EXPECT_THAT(c->rule(), HasSubstr("unknown")) << name;
  }
}

TEST(AmdgpuRasTest, ParsesTheDriversSpellings) {
  using Counts = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_THAT(probe::ParseRasErrorCount("ue: 2\nce: 9\n"), Optional(Counts{{"ue", 2}, {"ce", 9}}));
  EXPECT_THAT(probe::ParseRasErrorCount("ue: 0\nce: 1\nde: 4\n"),  // UMC on newer kernels
              Optional(Counts{{"ue", 0}, {"ce", 1}, {"de", 4}}));
  EXPECT_EQ(probe::ParseRasErrorCount("ce: 1\n"), std::nullopt);  // no ue line
  EXPECT_EQ(probe::ParseRasErrorCount("ue 1\nce 2\n"), std::nullopt);
  EXPECT_EQ(probe::ParseRasErrorCount("ue: -1\nce: 2\n"), std::nullopt);
  EXPECT_EQ(probe::ParseRasErrorCount("ue: 99999999999999999999999\n"), std::nullopt);
  EXPECT_EQ(probe::ParseRasErrorCount(""), std::nullopt);
  EXPECT_THAT(probe::ParseRasFeatureMask("feature mask: 0x3fff\n"), Optional(0x3fffu));
  EXPECT_THAT(probe::ParseRasFeatureMask("feature mask: 0x0"), Optional(0u));
  EXPECT_EQ(probe::ParseRasFeatureMask("feature mask: 3fff"), std::nullopt);
  EXPECT_EQ(probe::ParseRasFeatureMask("feature mask: 0x"), std::nullopt);
  EXPECT_EQ(probe::ParseRasFeatureMask("feature mask: 0x12345678901234567"), std::nullopt);
}

}  // namespace
}  // namespace devplace::testing
