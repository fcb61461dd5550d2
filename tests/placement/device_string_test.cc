// Device-string grammar (SEMANTICS.md section 7): accepted forms, canonical output, and every
// malformed input as a clear INVALID_ARGUMENT naming the field.
#include "server/placement/device_string.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace devplace::placement {
namespace {

using ::testing::HasSubstr;

TEST(DeviceString, AcceptsEveryPlacementTypeWithAndWithoutIndex) {
  for (const char* t : {"cpu", "cuda", "xpu", "mps", "hpu", "npu", "mlu", "musa", "neuron", "tpu", "xla"}) {
    absl::StatusOr<DeviceString> bare = ParseDeviceString(t, "f");
    ASSERT_TRUE(bare.ok()) << t << bare.status();
    EXPECT_EQ(bare->type, t);
    EXPECT_EQ(bare->index, -1);
    EXPECT_EQ(bare->ToString(), t);
  }
  absl::StatusOr<DeviceString> d = ParseDeviceString("cuda:10", "f");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, 10);
  EXPECT_EQ(d->ToString(), "cuda:10");
  EXPECT_EQ(ParseDeviceString("npu:127", "f")->index, 127);
  EXPECT_EQ(ParseDeviceString("cuda:0", "f")->ToString(), "cuda:0");
}

TEST(DeviceString, G5CpuZeroCanonicalisesAndCpuOneIsRejected) {
  EXPECT_EQ(ParseDeviceString("cpu:0", "f")->ToString(), "cpu");
  absl::StatusOr<DeviceString> bad = ParseDeviceString("cpu:1", "device_map");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("only index 0"));
}

struct Bad {
  const char* input;
  const char* words;
};

class Malformed : public ::testing::TestWithParam<Bad> {};

TEST_P(Malformed, IsInvalidArgumentNamingTheFieldAndForms) {
  absl::StatusOr<DeviceString> got = ParseDeviceString(GetParam().input, "device_map");
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << GetParam().input;
  const std::string msg(got.status().message());
  EXPECT_THAT(msg, HasSubstr("device_map: "));
  EXPECT_THAT(msg, HasSubstr(GetParam().words));
  EXPECT_THAT(msg, HasSubstr("accepted forms"));
}

INSTANTIATE_TEST_SUITE_P(
    G1toG4, Malformed,
    ::testing::Values(Bad{"", "Device string must not be empty"},
                      Bad{"cuda:01", "Invalid device string: 'cuda:01'"},
                      Bad{"cuda:-1", "Invalid device string: 'cuda:-1'"},
                      Bad{"cuda:+1", "Invalid device string: 'cuda:+1'"},
                      Bad{" cuda", "Invalid device string: ' cuda'"},
                      Bad{"cuda ", "Invalid device string: 'cuda '"},
                      Bad{"cuda: 1", "Invalid device string"},
                      Bad{"cuda:0:1", "Invalid device string: 'cuda:0:1'"},
                      Bad{"cuda:", "Invalid device string: 'cuda:'"},
                      Bad{":0", "Invalid device string: ':0'"},
                      Bad{"0", "Invalid device string: '0'"},
                      Bad{"cuda1", "Invalid device string: 'cuda1'"},
                      Bad{"cu-da", "Invalid device string"},
                      Bad{"cuda:99999999999", "Could not parse device index '99999999999'"},
                      Bad{"cuda:128", "out of range"},
                      Bad{"cuda:200", "device index 200"},
                      Bad{"CUDA", "did you mean 'cuda'"},
                      Bad{"Cuda:0", "did you mean 'cuda'"},
                      Bad{"gpu", "device type at start of device string: gpu"},
                      Bad{"metal", "device type at start of device string: metal"},
                      Bad{"hip:0", "AMD GPUs are `cuda`"},
                      Bad{"meta", "no storage"},
                      Bad{"privateuseone:0", "name the out-of-tree backend"},
                      Bad{"mkldnn", "use `cpu`"},
                      Bad{"cuda:\xff", "Invalid device string"},
                      Bad{"\xe2\x82\xac", "Invalid device string"}));

TEST(DeviceString, NeverCrashesOnArbitraryBytes) {
  // Every single byte and every pair of "interesting" bytes after a valid prefix.
  for (int c = 0; c < 256; ++c) {
    const std::string one(1, static_cast<char>(c));
    (void)ParseDeviceString(one, "f");
    (void)ParseDeviceString("cuda:" + one, "f");
    (void)ParseDeviceString(one + ":0", "f");
  }
  (void)ParseDeviceString(std::string("cuda\0:0", 7), "f");
  EXPECT_FALSE(ParseDeviceString(std::string("cuda\0", 5), "f").ok());
  EXPECT_FALSE(ParseDeviceString(std::string(100000, 'a'), "f").ok());
  EXPECT_FALSE(ParseDeviceString("cuda:" + std::string(1000, '9'), "f").ok());
}

}  // namespace
}  // namespace devplace::placement
