// The daemon's rule for a health counter that turns unknown (docs/PROBE.md "Device health"): a
// FAULT or LOST reading is kept, with the probe time it was read at, until a probe reads the
// counter again; a device that changed (uuid) or went away keeps nothing.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/backends.h"
#include "server/placement/device_state.h"
#include "server/placement/health.h"
#include "server/placement/health_carry.h"
#include "server/placement/xid_health.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using placement::KeepFaultReadings;

const auto CUDA = v1::ROW_CUDA_NVIDIA;
constexpr char kName[] = "aer_dev_fatal";
constexpr char kSource[] = "sysfs /sys/bus/pci/devices/0000:9a:00.0/aer_dev_fatal";
constexpr char kFatalRule[] = "uncorrectable fatal PCIe errors since boot";
constexpr char kUnreadable[] = "not a regular file";

// Two GPUs as a probe at `seconds` (Unix time) leaves them, GPU 0 with one counter: `effect` with
// `value` and `rule`, or unknown (effect UNSPECIFIED, value empty, `rule` why). Health, usable and
// the backend's state are derived by the probe's own functions.
v1::Inventory Probe(int64_t seconds, v1::Health effect, const std::string& value, const std::string& rule) {
  InventoryBuilder b;
  b.Add(CUDA, 2);
  b.Device(CUDA, 0).set_pci_bus_id("0000:9a:00.0");
  v1::HealthCounter& c = *b.Device(CUDA, 0).add_health_counters();
  c.set_name(kName);
  c.set_value(value);
  c.set_source(kSource);
  c.set_effect(effect);
  c.set_rule(rule);
  v1::Inventory inv = b.Build();
  inv.mutable_probed_at()->set_seconds(seconds);
  v1::Backend& backend = *inv.mutable_backends(1);
  EXPECT_EQ(backend.row(), CUDA);
  for (v1::Device& d : *backend.mutable_devices()) {
    placement::ApplyHealthCounters(d);
    d.set_usable(placement::HealthUsable(d.health()));
    d.set_unusable_reason(d.usable() ? "" : placement::HealthUnusableReason(d));
  }
  placement::DeriveBackendState(*placement::FindBackend(CUDA), backend);
  return inv;
}

v1::Inventory Fault(int64_t seconds) { return Probe(seconds, v1::HEALTH_FAULT, "TOTAL_ERR_FATAL 1", kFatalRule); }
v1::Inventory Unknown(int64_t seconds) { return Probe(seconds, v1::HEALTH_UNSPECIFIED, "", kUnreadable); }

constexpr int64_t kFirst = 1796612400;  // 2026-12-07T03:00:00Z

TEST(KeepFaultReadings, AFaultCounterThatTurnsUnknownKeepsItsReadingAndTheDeviceStaysFault) {
  const v1::Inventory before = Fault(kFirst);
  ASSERT_EQ(before.backends(1).devices(0).health(), v1::HEALTH_FAULT);
  v1::Inventory now = Unknown(kFirst + 60);
  ASSERT_EQ(now.backends(1).devices(0).health(), v1::HEALTH_OK);  // what the probe alone says
  ASSERT_EQ(now.backends(1).state_reason(), "");

  KeepFaultReadings(before, now);
  const v1::Device& d = now.backends(1).devices(0);
  ASSERT_EQ(d.health_counters_size(), 1);
  const v1::HealthCounter& c = d.health_counters(0);
  EXPECT_EQ(c.effect(), v1::HEALTH_FAULT);
  EXPECT_EQ(c.value(), "TOTAL_ERR_FATAL 1");
  EXPECT_EQ(c.source(), kSource);
  EXPECT_EQ(c.rule(), absl::StrCat("kept from the probe at 2026-12-07T03:00:00Z: ", kFatalRule,
                                   "; unknown now: ", kUnreadable));
  EXPECT_EQ(d.health(), v1::HEALTH_FAULT);
  EXPECT_EQ(d.health_reason(), absl::StrCat("aer_dev_fatal TOTAL_ERR_FATAL 1: ", c.rule()));
  EXPECT_FALSE(d.usable());
  EXPECT_THAT(d.unusable_reason(), StartsWith("aer_dev_fatal TOTAL_ERR_FATAL 1: kept from the probe at "));
  EXPECT_THAT(d.unusable_reason(), HasSubstr("(reset the device or reboot the host)"));
  EXPECT_EQ(now.backends(1).state(), v1::BACKEND_STATE_READY);
  EXPECT_EQ(now.backends(1).state_reason(), "1 of 2 devices usable");
  EXPECT_TRUE(now.backends(1).devices(1).usable());
  EXPECT_EQ(now.backends(1).devices(1).health_counters_size(), 0);

  // Unknown again at the next probe: still the first reading's time, not the previous snapshot's.
  v1::Inventory later = Unknown(kFirst + 120);
  KeepFaultReadings(now, later);
  EXPECT_EQ(later.backends(1).devices(0).health_counters(0).rule(), c.rule());
  EXPECT_EQ(later.backends(1).devices(0).health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(later.backends(1).devices(0).usable());
}

TEST(KeepFaultReadings, ACounterReadAgainDecides) {
  v1::Inventory kept = Unknown(kFirst + 60);
  KeepFaultReadings(Fault(kFirst), kept);
  ASSERT_EQ(kept.backends(1).devices(0).health(), v1::HEALTH_FAULT);
  v1::Inventory read = Probe(kFirst + 120, v1::HEALTH_OK, "TOTAL_ERR_FATAL 0", "no fatal error");
  const v1::Inventory expected = read;
  KeepFaultReadings(kept, read);
  EXPECT_EQ(read.SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(read.backends(1).devices(0).health(), v1::HEALTH_OK);
  EXPECT_TRUE(read.backends(1).devices(0).usable());
}

TEST(KeepFaultReadings, LostIsKeptDegradedIsNot) {
  v1::Inventory now = Unknown(kFirst + 60);
  KeepFaultReadings(Probe(kFirst, v1::HEALTH_LOST, "1", "lost"), now);
  EXPECT_EQ(now.backends(1).devices(0).health(), v1::HEALTH_LOST);
  now = Unknown(kFirst + 60);
  const v1::Inventory unchanged = now;
  KeepFaultReadings(Probe(kFirst, v1::HEALTH_DEGRADED, "TOTAL_ERR_NONFATAL 1", "nonfatal"), now);
  EXPECT_EQ(now.SerializeAsString(), unchanged.SerializeAsString());
}

TEST(KeepFaultReadings, NothingIsKeptForAnotherDeviceOrACounterTheHostNoLongerOffers) {
  // Another GPU at the same address (its uuid changed): nothing kept.
  v1::Inventory swapped = Unknown(kFirst + 60);
  swapped.mutable_backends(1)->mutable_devices(0)->set_uuid("GPU-00000000-0000-4000-8000-0000000000ff");
  v1::Inventory expected = swapped;
  KeepFaultReadings(Fault(kFirst), swapped);
  EXPECT_EQ(swapped.SerializeAsString(), expected.SerializeAsString());

  // The device went away: the one at the other address keeps nothing of it.
  v1::Inventory moved = Unknown(kFirst + 60);
  moved.mutable_backends(1)->mutable_devices(0)->set_pci_bus_id("0000:9b:00.0");
  expected = moved;
  KeepFaultReadings(Fault(kFirst), moved);
  EXPECT_EQ(moved.SerializeAsString(), expected.SerializeAsString());

  // The counter is gone (the host no longer offers the file): nothing kept.
  v1::Inventory gone = Unknown(kFirst + 60);
  gone.mutable_backends(1)->mutable_devices(0)->clear_health_counters();
  expected = gone;
  KeepFaultReadings(Fault(kFirst), gone);
  EXPECT_EQ(gone.SerializeAsString(), expected.SerializeAsString());

  // A counter of the same name from another source is another counter.
  v1::Inventory other = Unknown(kFirst + 60);
  other.mutable_backends(1)->mutable_devices(0)->mutable_health_counters(0)->set_source("sysfs elsewhere");
  expected = other;
  KeepFaultReadings(Fault(kFirst), other);
  EXPECT_EQ(other.SerializeAsString(), expected.SerializeAsString());
}

}  // namespace
}  // namespace devplace::testing

namespace devplace::testing {
namespace {

using placement::FaultReadings;

// What survives a restart (the daemon's health file): only FAULT and LOST counters, a kept one
// without its "unknown now" part, so that the readings do not change while it stays unreadable; a
// later daemon's first probe keeps them from it with the time of the probe that read them.
TEST(FaultReadings, HoldOnlyFaultCountersAndKeepThemAcrossARestart) {
  EXPECT_EQ(FaultReadings(Unknown(kFirst)).backends_size(), 0);
  EXPECT_EQ(FaultReadings(Probe(kFirst, v1::HEALTH_DEGRADED, "x8", "trained down")).backends_size(), 0);
  const v1::Inventory read = FaultReadings(Fault(kFirst));
  ASSERT_EQ(read.backends_size(), 1);
  EXPECT_EQ(read.backends(0).row(), CUDA);
  ASSERT_EQ(read.backends(0).devices_size(), 1);  // GPU 1 has no FAULT counter
  const v1::Device& d = read.backends(0).devices(0);
  EXPECT_EQ(d.pci_bus_id(), "0000:9a:00.0");
  ASSERT_EQ(d.health_counters_size(), 1);
  EXPECT_EQ(d.health_counters(0).rule(), kFatalRule);
  EXPECT_EQ(read.probed_at().seconds(), kFirst);

  v1::Inventory kept = Unknown(kFirst + 60);
  KeepFaultReadings(Fault(kFirst), kept);
  const v1::Inventory still = FaultReadings(kept);
  ASSERT_EQ(still.backends_size(), 1);
  EXPECT_EQ(still.backends(0).devices(0).health_counters(0).rule(),
            absl::StrCat("kept from the probe at 2026-12-07T03:00:00Z: ", kFatalRule));
  v1::Inventory later = Unknown(kFirst + 120);
  KeepFaultReadings(kept, later);
  v1::Inventory same = FaultReadings(later);
  same.clear_probed_at();
  v1::Inventory first = still;
  first.clear_probed_at();
  EXPECT_EQ(same.SerializeAsString(), first.SerializeAsString());

  // A new daemon's first probe, the counter unknown: kept from the file, naming the first probe.
  for (const v1::Inventory& file : {read, still}) {
    v1::Inventory restarted = Unknown(kFirst + 3600);
    KeepFaultReadings(file, restarted);
    const v1::Device& r = restarted.backends(1).devices(0);
    EXPECT_EQ(r.health(), v1::HEALTH_FAULT);
    EXPECT_EQ(r.health_counters(0).rule(), absl::StrCat("kept from the probe at 2026-12-07T03:00:00Z: ", kFatalRule,
                                                        "; unknown now: ", kUnreadable));
  }
}

TEST(FaultReadings, LeaveOutXidCounters) {
  v1::Inventory inv = Fault(kFirst);
  v1::HealthCounter& c = *inv.mutable_backends(1)->mutable_devices(0)->mutable_health_counters(0);
  c.set_name("xid.79");
  c.set_source(std::string(placement::kXidSource));
  EXPECT_EQ(FaultReadings(inv).backends_size(), 0);
}

}  // namespace
}  // namespace devplace::testing
