// Corrected errors rising (docs/PROBE.md "Device health"): a corrected-error count that restarts
// with the driver or the host and rose since the previous probe makes its device DEGRADED (usable,
// picked last) for that probe; a count that stayed or fell, a lifetime total, or another device in
// the slot changes nothing.
#include <cstdint>
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/backends.h"
#include "server/placement/device_state.h"
#include "server/placement/health.h"
#include "server/placement/health_carry.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::StartsWith;
using placement::CarryHealth;
using placement::IsCorrectedErrorCount;

const auto CUDA = v1::ROW_CUDA_NVIDIA;
constexpr char kCorrected[] = "ecc.errors.corrected.volatile.total";
constexpr char kLifetime[] = "ecc.errors.corrected.aggregate.total";
constexpr char kSource[] = "NVML nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)";
constexpr int64_t kFirst = 1796612400;  // 2026-12-07T03:00:00Z

// Two GPUs as a probe at `seconds` leaves them, GPU 0 (uuid `uuid`) with counter `name` at `value`
// (effect OK: a raw count); health and the backend's state derived as the probe derives them.
v1::Inventory Probe(int64_t seconds, const std::string& name, const std::string& value,
                    const std::string& uuid = "GPU-1") {
  InventoryBuilder b;
  b.Add(CUDA, 2);
  b.Device(CUDA, 0).set_pci_bus_id("0000:18:00.0");
  b.Device(CUDA, 0).set_uuid(uuid);
  v1::HealthCounter& c = *b.Device(CUDA, 0).add_health_counters();
  c.set_name(name);
  c.set_value(value);
  c.set_source(kSource);
  c.set_effect(v1::HEALTH_OK);
  c.set_rule("corrected ECC errors since the driver loaded (a raw count, never a health change)");
  v1::Inventory inv = b.Build();
  inv.mutable_probed_at()->set_seconds(seconds);
  for (v1::Device& d : *inv.mutable_backends(1)->mutable_devices()) {
    placement::ApplyHealthCounters(d);
    d.set_usable(placement::HealthUsable(d.health()));
  }
  placement::DeriveBackendState(*placement::FindBackend(CUDA), *inv.mutable_backends(1));
  return inv;
}

const v1::Device& Gpu0(const v1::Inventory& inv) { return inv.backends(1).devices(0); }

TEST(RisingCorrectedErrors, ACountThatRoseMakesTheDeviceDegradedNamingTheEarlierCount) {
  const v1::Inventory previous = Probe(kFirst, kCorrected, "3");
  v1::Inventory fresh = Probe(kFirst + 60, kCorrected, "5");
  CarryHealth(previous, fresh);
  const v1::Device& d = Gpu0(fresh);
  EXPECT_EQ(d.health(), v1::HEALTH_DEGRADED);
  EXPECT_TRUE(d.usable());
  EXPECT_EQ(d.health_counters(0).effect(), v1::HEALTH_DEGRADED);
  EXPECT_EQ(d.health_counters(0).value(), "5");
  EXPECT_THAT(d.health_counters(0).rule(), StartsWith("rising since the probe at 2026-12-07T03:00:00Z (3 then): "));
  EXPECT_THAT(d.health_reason(), StartsWith("ecc.errors.corrected.volatile.total 5: rising since"));
  EXPECT_EQ(fresh.backends(1).devices(1).health(), v1::HEALTH_OK);
  EXPECT_EQ(fresh.backends(1).state(), v1::BACKEND_STATE_READY);
}

TEST(RisingCorrectedErrors, ACountThatStayedOrFellOrALifetimeTotalChangesNothing) {
  for (const auto& [name, before, now] : {std::tuple{kCorrected, "5", "5"}, std::tuple{kCorrected, "5", "0"},
                                          std::tuple{kLifetime, "3", "9"}, std::tuple{kCorrected, "", "4"}}) {
    v1::Inventory fresh = Probe(kFirst + 60, name, now);
    CarryHealth(Probe(kFirst, name, before), fresh);
    EXPECT_EQ(Gpu0(fresh).health(), v1::HEALTH_OK) << name << " " << before << " -> " << now;
    EXPECT_EQ(Gpu0(fresh).health_counters(0).effect(), v1::HEALTH_OK);
  }
}

TEST(RisingCorrectedErrors, AnotherCardInTheSlotStartsClean) {
  v1::Inventory fresh = Probe(kFirst + 60, kCorrected, "5", "GPU-2");
  CarryHealth(Probe(kFirst, kCorrected, "3", "GPU-1"), fresh);
  EXPECT_EQ(Gpu0(fresh).health(), v1::HEALTH_OK);
}

TEST(RisingCorrectedErrors, EveryVendorsCorrectedCountIsWatchedAndNoOtherCount) {
  for (const char* name : {"ecc.errors.corrected.volatile.total", "remapped_rows.correctable",
                           "hbm_ecc.single_bit_error_cnt", "aer_dev_correctable", "ras/umc_err_count ce",
                           "ras/gfx_err_count ce"}) {
    EXPECT_TRUE(IsCorrectedErrorCount(name)) << name;
  }
  for (const char* name : {"ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.volatile.total",
                           "hbm_ecc.total_single_bit_error_cnt", "ras/umc_err_count ue", "ras/umc_err_count de",
                           "aer_dev_nonfatal", "current_link_width"}) {
    EXPECT_FALSE(IsCorrectedErrorCount(name)) << name;
  }
}

}  // namespace
}  // namespace devplace::testing
