// Issue 12: a ResolveDevice answer stays bounded on big hosts. device_map="auto" over 256 GPUs
// names every device in `devices` and `max_memory` (what from_pretrained needs) but carries the
// host identity (`placed`) of the first 16 only, and says so.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(BoundedAnswer, AutoOver256GpusKeepsEveryDeviceAndBudgetButSixteenPlaced) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 256);
  absl::StatusOr<v1::ResolveDeviceResponse> r = placement::Resolve(b, Req::Infer("auto").ModelSize(uint64_t{512} << 30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  ASSERT_EQ(r->devices_size(), 257);  // cuda:0..255, then cpu
  EXPECT_EQ(r->devices(255), "cuda:255");
  EXPECT_EQ(r->max_memory_size(), 257);
  EXPECT_EQ(r->max_memory().at("255"), b.Build().backends(1).devices(255).memory_free_bytes());
  ASSERT_EQ(r->placed_size(), 16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(r->placed(i).device(), absl::StrCat("cuda:", i));
    EXPECT_EQ(r->placed(i).uuid(), TestUuid(v1::ROW_CUDA_NVIDIA, i));
  }
  EXPECT_THAT(r->explanation(), Contains(HasSubstr("P-BOUND placed lists the first 16 of the 256 devices used")));
  EXPECT_LT(r->ByteSizeLong(), 12u << 10);
}

TEST(BoundedAnswer, SixteenOrFewerAreAllPlaced) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 16);
  absl::StatusOr<v1::ResolveDeviceResponse> r = placement::Resolve(b, Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed_size(), 16);
  EXPECT_EQ(r->placed(15).uuid(), TestUuid(v1::ROW_CUDA_NVIDIA, 15));
  EXPECT_THAT(r->explanation(), Not(Contains(HasSubstr("P-BOUND"))));
}

}  // namespace
}  // namespace devplace::testing
