// Differential test of devplace's device-string grammar (server/placement/device_string) against
// PyTorch's own parser, c10::Device(std::string), over a generated corpus. Both must accept or
// both reject, and agree on the canonical string, except the deviations SEMANTICS.md section 7
// names on purpose:
//   - indices above 127: c10 1.13 silently wraps them into its 8-bit DeviceIndex; devplace rejects;
//   - `cpu:N`, N > 0: c10 release builds accept it; devplace rejects (G5);
//   - c10 device types that are not placement targets (`hip`, `meta`, ...): devplace rejects (G4);
//   - out-of-tree types (`npu`, `mlu`, `musa`, `sdaa`, `neuron`, `tpu`) exist only once a plugin registers
//     them as PrivateUse1; this libtorch has none registered, so c10 rejects what devplace accepts.
#include <set>
#include <string>
#include <vector>

#include "c10/core/Device.h"
#include "gtest/gtest.h"
#include "server/placement/device_string.h"

namespace devplace::placement {
namespace {

struct C10Result {
  bool ok = false;
  std::string canonical;
  int index = -1;
};

C10Result ParseWithC10(const std::string& s) {
  C10Result r;
  try {
    const c10::Device d(s);
    r.ok = true;
    r.canonical = d.str();
    r.index = d.index();
  } catch (const std::exception&) {
  }
  return r;
}

const std::set<std::string> kPluginTypes = {"npu", "mlu", "musa", "sdaa", "neuron", "tpu"};
const std::set<std::string> kC10NonTargets = {"hip", "meta", "ipu", "ve", "fpga", "ort", "lazy", "vulkan",
                                              "mkldnn", "opengl", "opencl", "ideep", "privateuseone"};

std::vector<std::string> Corpus() {
  const std::vector<std::string> types = {"cpu", "cuda", "xpu", "mps", "hpu", "xla", "npu", "mlu", "musa", "sdaa",
                                          "neuron", "tpu", "hip", "meta", "ipu", "ve", "fpga", "ort", "lazy", "vulkan",
                                          "mkldnn", "opengl", "opencl", "ideep", "privateuseone", "CUDA", "Cuda",
                                          "gpu", "metal", "cuda_", "_", "", "cu da", "cuda1"};
  const std::vector<std::string> suffixes = {"", ":0", ":1", ":7", ":10", ":127", ":128", ":200", ":255", ":256",
                                             ":99999", ":2147483647", ":2147483648", ":99999999999", ":01", ":00",
                                             ":-1", ":+1", ":", "::0", ":0:1", ": 1", ":1 ", ":a", ":0x1", ":1.0"};
  std::vector<std::string> out;
  for (const std::string& t : types) {
    for (const std::string& s : suffixes) {
      out.push_back(t + s);
      out.push_back(" " + t + s);
      out.push_back(t + s + " ");
    }
  }
  for (const char* odd : {":0", "0", "1", "-1", "\t", "cuda\n", "cuda\0", "cuda:1\t"}) out.emplace_back(odd);
  return out;
}

// The index text of `s` is a decimal above 127 (c10 wraps it into its 8-bit DeviceIndex).
bool IndexAbove127(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return false;
  const std::string idx = s.substr(colon + 1);
  if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) return false;
  return idx.size() > 3 || std::stoi(idx) > 127;
}

TEST(GrammarDifferential, AgreesWithC10DeviceExceptTheNamedDeviations) {
  int agreed = 0, deviations = 0;
  for (const std::string& s : Corpus()) {
    SCOPED_TRACE("'" + s + "'");
    const std::string type = s.substr(0, s.find(':'));
    const absl::StatusOr<DeviceString> ours = ParseDeviceString(s, "device_map");
    if (kC10NonTargets.count(type)) {  // G4: c10 may accept it; devplace never does
      ++deviations;
      EXPECT_FALSE(ours.ok());
      continue;
    }
    // Out-of-tree types are unknown to this libtorch; syntactically they must behave like cuda.
    const bool plugin = kPluginTypes.count(type) > 0;
    if (plugin) {
      EXPECT_FALSE(ParseWithC10(s).ok) << "no PrivateUse1 backend is registered here";
    }
    const C10Result ref = ParseWithC10(plugin ? "cuda" + s.substr(type.size()) : s);
    if (ref.ok && IndexAbove127(s)) {  // G3: c10 wraps the index; devplace rejects
      ++deviations;
      EXPECT_LT(ref.index, 128);
      EXPECT_FALSE(ours.ok());
      continue;
    }
    if (ref.ok && type == "cpu" && ref.index > 0) {  // G5
      ++deviations;
      EXPECT_FALSE(ours.ok());
      continue;
    }
    if (plugin) {
      ++deviations;
    } else {
      ++agreed;
    }
    EXPECT_EQ(ours.ok(), ref.ok) << (ours.ok() ? "devplace accepts, c10 rejects" : "c10 accepts as " + ref.canonical);
    if (ours.ok() && ref.ok) {
      std::string expected = plugin ? type + ref.canonical.substr(4) : ref.canonical;
      if (expected == "cpu:0") expected = "cpu";  // G5: devplace canonicalises cpu:0 to cpu
      EXPECT_EQ(ours->ToString(), expected);
      EXPECT_EQ(ours->index, ref.index);
    }
  }
  EXPECT_GT(agreed, 500);
  EXPECT_GT(deviations, 100);
}

TEST(GrammarDifferential, C10WrapsLargeIndicesWhichIsWhyDevplaceRejectsThem) {
  // The trap BUILD-NOTES measured on this libtorch: cuda:128 parses as index -128.
  const C10Result wrapped = ParseWithC10("cuda:128");
  ASSERT_TRUE(wrapped.ok);
  EXPECT_LT(wrapped.index, 0);
  EXPECT_FALSE(ParseDeviceString("cuda:128", "device_map").ok());
}

}  // namespace
}  // namespace devplace::placement
