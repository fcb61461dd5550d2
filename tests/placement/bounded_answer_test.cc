// A ResolveDevice answer stays bounded on big hosts. device_map="auto" over 256 GPUs
// names every device in `devices` and `max_memory` (what from_pretrained needs) but carries the
// host identity (`placed`) of the first 16 only, and says so.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
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

// Devices past the bound are not built as `placed` entries, yet their budgets, warnings and memory
// sources come from the inventory as for the first 16.
TEST(BoundedAnswer, DevicesPastTheBoundStillGetBudgetsWarningsAndSources) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 256);
  v1::Inventory inv = b.Build();
  v1::Backend& nvidia = *inv.mutable_backends(1);
  ASSERT_EQ(nvidia.row(), v1::ROW_CUDA_NVIDIA);
  for (v1::Device& d : *nvidia.mutable_devices()) (*d.mutable_attributes())["memory_source"] = "nvml";
  nvidia.mutable_devices(20)->clear_memory_free_bytes();  // total only: its budget is its total
  nvidia.mutable_devices(30)->set_supported(false);
  nvidia.mutable_devices(30)->set_unusable_reason("compute capability 3.5");
  absl::StatusOr<v1::ResolveDeviceResponse> r = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_memory().at("20"), nvidia.devices(20).memory_total_bytes());
  EXPECT_EQ(r->max_memory().at("21"), nvidia.devices(21).memory_free_bytes());
  EXPECT_THAT(r->warnings(), Contains(HasSubstr("free memory of cuda:20 is unknown")));
  EXPECT_THAT(r->warnings(), Contains(HasSubstr("cuda:30 is host device 30")));
  EXPECT_THAT(r->explanation(), Contains("I-MEM memory of cuda:0, cuda:1, cuda:2, cuda:3, cuda:4, cuda:5, cuda:6, cuda:7, "
                                         "cuda:8, cuda:9, cuda:10, cuda:11, cuda:12, cuda:13, cuda:14, cuda:15 and 240 "
                                         "more from nvml"));
  EXPECT_EQ(r->placed_size(), 16);
}

// Device lists in warnings stay bounded too: 256 GPUs of unknown memory, or of total memory only,
// give one line each naming 16 devices and the count of the rest.
TEST(BoundedAnswer, WarningsListAtMostSixteenDevices) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 256);
  v1::Inventory inv = b.Build();
  for (v1::Device& d : *inv.mutable_backends(1)->mutable_devices()) d.clear_memory_free_bytes();
  absl::StatusOr<v1::ResolveDeviceResponse> total_only = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(total_only.ok()) << total_only.status();
  EXPECT_THAT(total_only->warnings(),
              Contains(HasSubstr("free memory of cuda:0, cuda:1, cuda:2, cuda:3, cuda:4, cuda:5, cuda:6, cuda:7, "
                                 "cuda:8, cuda:9, cuda:10, cuda:11, cuda:12, cuda:13, cuda:14, cuda:15 and 240 more is "
                                 "unknown: their max_memory budgets use total memory")));
  EXPECT_EQ(total_only->max_memory().at("200"), inv.backends(1).devices(200).memory_total_bytes());
  for (v1::Device& d : *inv.mutable_backends(1)->mutable_devices()) d.clear_memory_total_bytes();
  absl::StatusOr<v1::ResolveDeviceResponse> unknown = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_THAT(unknown->warnings(), Contains(HasSubstr("the memory of cuda:0, cuda:1, cuda:2, cuda:3, cuda:4, cuda:5, "
                                                      "cuda:6, cuda:7, cuda:8, cuda:9, cuda:10, cuda:11, cuda:12, "
                                                      "cuda:13, cuda:14, cuda:15 and 240 more is unknown")));
  EXPECT_EQ(unknown->max_memory_size(), 0);
  for (const auto* answer : {&*total_only, &*unknown}) {
    for (const std::string& w : answer->warnings()) EXPECT_LT(w.size(), 600u) << w;
  }
}

// What devplaced sends (ResolveSerialized, built on an arena) is Resolve()'s answer, and its errors.
TEST(BoundedAnswer, SerializedAnswerEqualsTheMessage) {
  for (int n : {1, 8, 17, 256}) {
    InventoryBuilder b;
    b.Add(v1::ROW_CUDA_NVIDIA, n);
    const v1::Inventory inv = b.Build();
    for (const v1::ResolveDeviceRequest& req :
         {v1::ResolveDeviceRequest(Req::Infer("auto")), v1::ResolveDeviceRequest(Req::Train().Rank(0, 2))}) {
      absl::StatusOr<v1::ResolveDeviceResponse> message = placement::Resolve(inv, req);
      std::string bytes = "stale";
      ASSERT_TRUE(message.ok()) << message.status();
      ASSERT_TRUE(placement::ResolveSerialized(inv, req, &bytes).ok());
      v1::ResolveDeviceResponse parsed;
      ASSERT_TRUE(parsed.ParseFromString(bytes));
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, *message))
          << n << " GPUs: " << parsed.DebugString() << " vs " << message->DebugString();
    }
  }
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  std::string bytes = "untouched";
  const absl::Status bad = placement::ResolveSerialized(b.Build(), Req::Infer("cuda:7"), &bytes);
  EXPECT_EQ(bad, placement::Resolve(b.Build(), Req::Infer("cuda:7")).status());
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bytes, "untouched");
}

}  // namespace
}  // namespace devplace::testing
