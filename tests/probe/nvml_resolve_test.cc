// End to end with NVML: probe a fixture host with the fake NVML, then resolve. Accelerate's
// device_map budgets come from NVML's free memory, and CUDA_VISIBLE_DEVICES=MIG-<uuid> finds its
// partition through the MIG UUIDs only NVML knows.
#include <cmath>
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kFree18 = 84987740160;  // h100.txt, 0000:18:00.0
constexpr uint64_t kFree9a = 42949672960;  // h100.txt, 0000:9a:00.0

uint64_t NinetyPercent(uint64_t bytes) {
  return static_cast<uint64_t>(std::floor(static_cast<long double>(bytes) * 0.9L));
}

TEST(NvmlResolve, AutoOnTwoGpusBudgetsEachGpusFreeMemory) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100");
  auto r = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cuda:1", "cpu"));
  EXPECT_EQ(r->placed(0).pci_bus_id(), "0000:18:00.0");
  EXPECT_EQ(r->placed(0).memory_free_bytes(), kFree18);
  EXPECT_EQ(r->placed(0).uuid(), "GPU-00000000-0000-4000-8000-000000000001");
  EXPECT_THAT(r->max_memory(), UnorderedElementsAre(Pair("0", kFree18), Pair("1", kFree9a),
                                                    Pair("cpu", CpuBudget(inv.host().memory_available_bytes()))));
  // Without NVML the memory is unknown and the budgets are left to Accelerate.
  auto blind = placement::Resolve(ProbeHost("nvidia-2x-h100"), Req::Infer("auto"));
  ASSERT_TRUE(blind.ok()) << blind.status();
  EXPECT_TRUE(blind->max_memory().empty());
}

TEST(NvmlResolve, AutoOnOneGpuBudgetsNinetyPercentOfItsFreeMemory) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100");
  auto r = placement::Resolve(inv, Req::Infer("auto").Env("CUDA_VISIBLE_DEVICES", "1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ(r->placed(0).pci_bus_id(), "0000:9a:00.0");
  EXPECT_EQ(r->max_memory().at("0"), NinetyPercent(kFree9a));
}

// H-HEALTH with NVML's counters: 9a:00.0 has a row pending remap (FAULT, reset required) and CUDA
// still enumerates it, so training (every GPU) uses it as cuda:1, with a warning naming the
// counter and the mask of the other GPU; strict refuses. A device_map budget leaves it out.
TEST(NvmlResolve, AnAnswerOnAGpuWithARowPendingRemapWarnsAndStrictRefuses) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100-remap-pending");
  auto r = placement::Resolve(inv, Req::Train());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->devices(), ElementsAre("cuda:0", "cuda:1"));
  const std::string warnings = absl::StrJoin(r->warnings(), "\n");
  EXPECT_THAT(warnings, HasSubstr("H-HEALTH cuda:1 is host device 1 (0000:9a:00.0), whose health is FAULT "
                                  "(remapped_rows.pending 1: rows are pending remapping"));
  EXPECT_THAT(warnings, HasSubstr("leave it out with CUDA_VISIBLE_DEVICES=GPU-00000000-0000-4000-8000-000000000001"));
  auto strict = placement::Resolve(inv, Req::Train().Strict());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(strict.status().message(), HasSubstr("strict: H-HEALTH cuda:1"));
  auto budget = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->max_memory().at("1"), 0u);
  // The same host with healthy GPUs: no warning.
  auto healthy = placement::Resolve(ProbeHostWithNvml("nvidia-2x-h100", "h100"), Req::Train());
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_THAT(absl::StrJoin(healthy->warnings(), "\n"), Not(HasSubstr("H-HEALTH")));
}

TEST(NvmlResolve, MigUuidInCudaVisibleDevicesResolvesToThePartition) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-mig", "mig");
  const std::string mig = "MIG-00000000-0000-4000-8000-0000000000a2";
  auto r = placement::Resolve(inv, Req::Infer("auto").Env("CUDA_VISIBLE_DEVICES", mig));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  ASSERT_EQ(r->placed_size(), 1);
  EXPECT_EQ(r->placed(0).partition_uuid(), mig);
  EXPECT_EQ(r->placed(0).pci_bus_id(), "0000:07:00.0");
  EXPECT_EQ(r->placed(0).memory_total_bytes(), 42144366592u);
  EXPECT_EQ(r->placed(0).memory_free_bytes(), 41070624768u);  // the instance's own free memory
  EXPECT_EQ(r->max_memory().at("0"), NinetyPercent(41070624768u));
  // MIG on, no instance named: CUDA gives the job one instance, the first available, and does not
  // enumerate the GPU without MIG (E-MIG): one device, with that instance's memory.
  auto unnamed = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_THAT(unnamed->devices(), ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ(unnamed->placed(0).partition_uuid(), "MIG-00000000-0000-4000-8000-0000000000a1");
  EXPECT_EQ(unnamed->max_memory().at("0"), NinetyPercent(42010148864u));
  EXPECT_THAT(absl::StrJoin(unnamed->warnings(), "\n"), HasSubstr("MIG is enabled: the job sees exactly one device"));
  // Without NVML the MIG UUID is unknown to the inventory.
  auto blind = placement::Resolve(ProbeHost("nvidia-mig"), Req::Infer("auto").Env("CUDA_VISIBLE_DEVICES", mig));
  ASSERT_TRUE(blind.ok()) << blind.status();
  EXPECT_THAT(absl::StrJoin(blind->warnings(), "\n"), HasSubstr("names a MIG instance this host's inventory"));
}

}  // namespace
}  // namespace devplace::testing
