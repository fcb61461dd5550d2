// H-HEALTH (docs/SEMANTICS.md section 9): the job's runtime still enumerates a driven device in
// HEALTH_FAULT, so the resolver answers what the job's library does and warns, naming the device,
// the reason and the mask that leaves it out; strict refuses. A LOST device is not enumerated; a
// DEGRADED one is used without a warning.
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using placement::Resolve;

const auto CUDA = v1::ROW_CUDA_NVIDIA;

// Three GPUs; GPU 0 in `health` with a reason, as the probe leaves it (not usable unless DEGRADED).
v1::Inventory FirstGpu(v1::Health health) {
  InventoryBuilder b;
  b.Add(CUDA, 3);
  v1::Device& d = b.Device(CUDA, 0);
  d.set_health(health);
  d.set_health_reason("aer_dev_fatal 1: uncorrectable fatal PCIe errors since boot");
  d.set_usable(health == v1::HEALTH_DEGRADED);
  d.set_unusable_reason(d.usable() ? "" : d.health_reason());
  return b.Build();
}

TEST(HealthHazard, AnAnswerOnAFaultDeviceWarnsWithTheMaskThatLeavesItOut) {
  const v1::Inventory inv = FirstGpu(v1::HEALTH_FAULT);
  absl::StatusOr<v1::ResolveDeviceResponse> r = Resolve(inv, Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");  // CUDA still enumerates it first
  EXPECT_EQ(r->placed(0).pci_bus_id(), inv.backends(1).devices(0).pci_bus_id());
  const std::string warnings = absl::StrJoin(r->warnings(), "\n");
  EXPECT_THAT(warnings, HasSubstr(absl::StrCat("H-HEALTH cuda:0 is host device 0 (",
                                               inv.backends(1).devices(0).pci_bus_id(), "), whose health is FAULT (aer_dev_fatal 1: ")));
  EXPECT_THAT(warnings, HasSubstr(absl::StrCat("leave it out with CUDA_VISIBLE_DEVICES=", inv.backends(1).devices(1).uuid(),
                                               ",", inv.backends(1).devices(2).uuid())));
  // A mask that leaves it out: no warning, and cuda:0 is the next GPU.
  r = Resolve(inv, Req::Train().Env("CUDA_VISIBLE_DEVICES", inv.backends(1).devices(1).uuid()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed(0).pci_bus_id(), inv.backends(1).devices(1).pci_bus_id());
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"), Not(HasSubstr("H-HEALTH")));
}

// device_map="auto" spreads over every GPU the job's runtime enumerates, the FAULT one too (with the
// warning); its max_memory budget is 0, so a job that passes max_memory puts no module there.
TEST(HealthHazard, ADeviceMapBudgetLeavesAFaultDeviceOut) {
  const absl::StatusOr<v1::ResolveDeviceResponse> r = Resolve(FirstGpu(v1::HEALTH_FAULT), Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_memory().at("0"), 0u);
  EXPECT_GT(r->max_memory().at("1"), 0u);
  EXPECT_GT(r->max_memory().at("2"), 0u);
  EXPECT_THAT(absl::StrJoin(r->explanation(), "\n"), HasSubstr("I-MEM H-HEALTH budget 0 for cuda:0 (health FAULT)"));
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"), HasSubstr("H-HEALTH cuda:0 is host device 0"));
  // Without the fault the same GPU gets its free memory.
  const absl::StatusOr<v1::ResolveDeviceResponse> ok = Resolve(FirstGpu(v1::HEALTH_DEGRADED), Req::Infer("auto"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GT(ok->max_memory().at("0"), 0u);
}

// A mask that names only the FAULT device leaves nothing to list: the fix says so and names the
// variable to give the job another device, never "leave it out" with the job's (no) other devices.
TEST(HealthHazard, AMaskOfOnlyTheFaultDeviceIsToldToNameAnotherOne) {
  const v1::Inventory inv = FirstGpu(v1::HEALTH_FAULT);
  const absl::StatusOr<v1::ResolveDeviceResponse> r =
      Resolve(inv, Req::Train().Env("CUDA_VISIBLE_DEVICES", inv.backends(1).devices(0).uuid()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed(0).pci_bus_id(), inv.backends(1).devices(0).pci_bus_id());
  const std::string warnings = absl::StrJoin(r->warnings(), "\n");
  EXPECT_THAT(warnings, HasSubstr("no other cuda/nvidia device the job sees is usable, so give it another one in "
                                  "CUDA_VISIBLE_DEVICES: run the job under devplace run"));
  EXPECT_THAT(warnings, Not(HasSubstr("leave it out")));
}

TEST(HealthHazard, StrictRefusesAnAnswerOnAFaultDevice) {
  const absl::StatusOr<v1::ResolveDeviceResponse> r = Resolve(FirstGpu(v1::HEALTH_FAULT), Req::Train().Strict());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("strict: H-HEALTH cuda:0 is host device 0"));
}

TEST(HealthHazard, ALostDeviceIsNotEnumeratedAndADegradedOneIsUsedWithoutWarning) {
  const v1::Inventory lost = FirstGpu(v1::HEALTH_LOST);
  absl::StatusOr<v1::ResolveDeviceResponse> r = Resolve(lost, Req::Train().Strict());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed(0).pci_bus_id(), lost.backends(1).devices(1).pci_bus_id());
  const v1::Inventory degraded = FirstGpu(v1::HEALTH_DEGRADED);
  r = Resolve(degraded, Req::Train().Strict());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed(0).pci_bus_id(), degraded.backends(1).devices(0).pci_bus_id());
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"), Not(HasSubstr("H-HEALTH")));
}

}  // namespace
}  // namespace devplace::testing
