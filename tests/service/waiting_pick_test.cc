// A waiting pick keeps only what the rules read of its request: the pick's answer is the same with
// the kept request as with the whole one, and the kept one is a small part of a request at the
// limits (256 env entries of about 3 KiB; 1,024 DRA devices of 64 attributes).
#include "server/service/waiting_pick.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/placement/pick.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

v1::Inventory EightGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 8);
  return b.Build();
}

void ExpectSameAnswer(const v1::Inventory& inventory, const v1::PickDevicesRequest& request) {
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  const placement::PickOutcome whole = placement::Pick(inventory, request, {});
  const placement::PickOutcome part = placement::Pick(inventory, kept, {});
  EXPECT_EQ(whole.status, part.status);
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(whole.response, part.response)) << diff;
}

TEST(KeptForWaiting, EnvKeepsTheVariablesTheRulesReadAndTheirNearMisses) {
  v1::PickDevicesRequest request;
  request.set_count(2);
  request.set_wait_ms(60'000);
  auto& env = *request.mutable_job()->mutable_env();
  for (int i = 0; i < 250; ++i) env[absl::StrCat("JOB_SETTING_", i)] = std::string(2900, 'v');
  env["CUDA_VISIBLE_DEVICES"] = "5,2,7";
  env["LOCAL_RANK"] = "1";
  env["CUDA_VISIBLE_DEVICE"] = "0";  // a near miss: the answer warns about it (E-TYPO)
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  EXPECT_EQ(kept.job().env_size(), 3);
  EXPECT_EQ(kept.job().env().at("CUDA_VISIBLE_DEVICES"), "5,2,7");
  EXPECT_EQ(kept.job().env().count("CUDA_VISIBLE_DEVICE"), 1u);
  EXPECT_EQ(kept.wait_ms(), 60'000u);
  EXPECT_GT(request.ByteSizeLong(), 700'000u);
  EXPECT_LT(kept.ByteSizeLong(), 200u);
  ExpectSameAnswer(EightGpus(), request);
}

TEST(KeptForWaiting, DraDevicesKeepTheAttributesTheyAreMatchedBy) {
  const v1::Inventory inventory = EightGpus();
  v1::PickDevicesRequest request;
  v1::DeviceAllocation& a = *request.mutable_job()->mutable_device_allocation();
  a.set_source("/var/run/kubernetes.io/dra-device-attributes");
  for (int i = 0; i < 1024; ++i) {
    v1::AllocatedDevice& d = *a.add_devices();
    d.set_claim("claim");
    d.set_request("gpu");
    d.set_driver("gpu.nvidia.com");
    d.set_pool("node");
    d.set_name(absl::StrCat("gpu-", i));
    auto& attributes = *d.mutable_attributes();
    // Two of them are this host's GPUs 3 and 6 (by PCI address and by a qualified uuid).
    if (i == 3) attributes["pciBusID"] = inventory.backends(1).devices(3).pci_bus_id();
    if (i == 6) attributes["gpu.nvidia.com/uuid"] = inventory.backends(1).devices(6).uuid();
    if (i != 3 && i != 6) attributes["uuid"] = absl::StrCat("GPU-elsewhere-", i);
    attributes["minor"] = absl::StrCat(100 + i);
    for (int k = 0; attributes.size() < 64; ++k) attributes[absl::StrFormat("x%02d", k)] = "some value";
  }
  const v1::PickDevicesRequest kept = service::KeptForWaiting(request);
  ASSERT_EQ(kept.job().device_allocation().devices_size(), 1024);
  EXPECT_EQ(kept.job().device_allocation().devices(3).attributes_size(), 2);  // pciBusID, minor
  EXPECT_EQ(kept.job().device_allocation().devices(6).attributes().count("gpu.nvidia.com/uuid"), 1u);
  EXPECT_LT(kept.ByteSizeLong() * 5, request.ByteSizeLong());
  ExpectSameAnswer(inventory, request);
  request.set_count(2);
  ExpectSameAnswer(inventory, request);
}

}  // namespace
}  // namespace devplace::testing
