// docs/SEMANTICS.md T-XLA-PJRT: whether xm.xla_device() finds an XLA device, for the releases that ask it to
// (Accelerate before 0.28 is_tpu_available, Transformers before 4.39 is_torch_tpu_available). torch_xla 1.13 (XRT)
// raises RuntimeError without a TPU, so those checks fail; from 2.0 a host without a TPU and without PJRT_DEVICE
// defaults to PJRT_DEVICE=CPU and the job gets xla:0; in 2.1 to 2.4 PJRT_SELECT_DEFAULT_DEVICE=0 makes it raise
// NotImplementedError, which the checks do not catch. Each boundary on both sides: the library release and the
// torch_xla release (told by the job's packages, else its torch's, else assumed PJRT).
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/placement/resolve_case.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
const auto H = HostOf;
constexpr auto TA = v1::CONVENTION_TRAINING_ARGUMENTS, ACC = v1::CONVENTION_ACCELERATE;
constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;
constexpr const char* kRaises = "raises NotImplementedError";

Req Versions(const std::string& tf, const std::string& acc, Req r) {
  if (!tf.empty()) r.Transformers(tf);
  r.Accelerate(acc);
  return r;
}

Req Xla(Req r, const char* torch_xla, bool cuda = false) {
  if (cuda) {
    r.Runtime({"cuda", "xla"});
  } else {
    r.Runtime({"xla"});
  }
  if (*torch_xla) r.Packages({{"torch", "2.1.0"}, {"torch_xla", torch_xla}});
  return r;
}

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  const auto cpu_host = H({});
  const auto cuda2 = H({{v1::ROW_CUDA_NVIDIA, 2}});
  const auto xpu2 = H({{v1::ROW_XPU, 2}});
  // ---- Accelerate before 0.28 on a host without CUDA: torch_xla's release decides ----------------------------
  c.push_back({.id = "acc_0_27_xla_2_1_cpu_host", .host = cpu_host,
               .request = Versions("", "0.27.2", Xla(Req::Train(ACC), "2.1.0")), .device = "xla:0",
               .words = {"T-XLA-PJRT xm.xla_device() in torch_xla 2.1.0", "PJRT_DEVICE=CPU"},
               .warnings = {"defaults to PJRT_DEVICE=CPU", "uninstall torch_xla to get cpu"}});
  c.push_back({.id = "acc_0_25_xla_2_0_cpu_host", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.0.0")), .device = "xla:0"});
  c.push_back({.id = "acc_0_25_xla_1_13_cpu_host", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "1.13.1")), .device = "cpu",
               .words = {"Missing XLA configuration", "xm.xla_device() finds no XLA device"}});
  // A non-CUDA accelerator is no CUDA GPU: is_tpu_available() goes on to xm.xla_device().
  c.push_back({.id = "acc_0_25_xla_2_5_xpu_host", .host = xpu2,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.5.0")), .device = "xla:0"});
  c.push_back({.id = "acc_0_25_xla_2_5_cuda_host", .host = cuda2,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.5.0", true)), .device = "cuda",
               .words = {"a CUDA GPU is available"}});
  // The library's side of the boundary: 0.28 tests only the import, whatever torch_xla's release.
  c.push_back({.id = "acc_0_28_xla_1_13_cpu_host", .host = cpu_host,
               .request = Versions("", "0.28.0", Xla(Req::Train(ACC), "1.13.1")), .device = "xla:0",
               .warnings = {"only tests that it imports"}});
  // 0.28 on with torch_xla 1.13 on a host without a TPU: the XLA branch's xm.xla_device() raises RuntimeError.
  c.push_back({.id = "acc_0_28_xla_1_13_branch_fails", .host = cpu_host,
               .request = Versions("", "0.28.0", Xla(Req::Train(ACC), "1.13.1")), .device = "xla:0",
               .warnings = {"its XLA branch) sets its device from xm.xla_device(), which raises RuntimeError",
                            "Missing XLA configuration", "Set USE_TORCH_XLA=0"}});
  // torch_xla's release not told: its torch's MAJOR.MINOR, else PJRT assumed.
  c.push_back({.id = "acc_0_25_torch_1_13_untold_xla", .host = cpu_host,
               .request = Versions("", "0.25.0", Req::Train(ACC).Runtime({"xla"}).Packages({{"torch", "1.13.1"}})),
               .device = "cpu", .words = {"the release paired with the job's torch 1.13.1"}});
  c.push_back({.id = "acc_0_25_torch_2_2_untold_xla", .host = cpu_host,
               .request = Versions("", "0.25.0", Req::Train(ACC).Runtime({"xla"}).Packages({{"torch", "2.2.0"}})),
               .device = "xla:0"});
  c.push_back({.id = "acc_0_25_nothing_told", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "")), .device = "xla:0",
               .words = {"its release not told: assumed"}});
  // ---- The variables torch_xla reads ------------------------------------------------------------------------
  c.push_back({.id = "acc_0_25_xla_1_13_pjrt_cpu", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "1.13.1").Env("PJRT_DEVICE", "CPU")),
               .device = "xla:0"});
  c.push_back({.id = "acc_0_25_xla_2_0_xrt_config", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.0.0").Env("XRT_TPU_CONFIG", "localservice;0;localhost:51011")),
               .device = "cpu"});
  c.push_back({.id = "acc_0_25_xla_2_0_select_0", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.0.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "cpu", .absent_warnings = {kRaises}});
  // 2.1 on: NotImplementedError, which is_tpu_available() does not catch. The answer is the device without
  // torch_xla, beside a warning with the cause and the fixes; strict refuses.
  c.push_back({.id = "acc_0_25_xla_2_1_select_0", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.1.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "cpu",
               .warnings = {"Accelerate 0.25.0's is_tpu_available() calls xm.xla_device()", kRaises,
                            "the job fails at start", "Unset PJRT_SELECT_DEFAULT_DEVICE"}});
  c.push_back({.id = "acc_0_25_xla_2_1_select_0_strict", .host = cpu_host,
               .request = Versions("", "0.25.0",
                                   Xla(Req::Train(ACC), "2.1.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0").Strict()),
               .code = kPrecondition, .error_words = {kRaises}});
  c.push_back({.id = "acc_0_25_xla_2_1_select_1", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.1.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "1")),
               .device = "xla:0"});
  // 2.5 on: xla_device has no requires_pjrt; the runtime's RuntimeError, which the check catches.
  c.push_back({.id = "acc_0_25_xla_2_5_select_0", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.5.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "cpu", .words = {"$PJRT_DEVICE is not set."}, .absent_warnings = {kRaises}});
  c.push_back({.id = "acc_0_25_xla_2_4_select_0", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.4.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "cpu", .warnings = {kRaises}});
  // GPU_NUM_DEVICES: PJRT's GPU from 2.1 to 2.8 (none on this host), ignored from 2.9.
  c.push_back({.id = "acc_0_25_xla_2_8_gpu_num_devices", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.8.0").Env("GPU_NUM_DEVICES", "2")),
               .device = "cpu"});
  c.push_back({.id = "acc_0_25_xla_2_9_gpu_num_devices", .host = cpu_host,
               .request = Versions("", "0.25.0", Xla(Req::Train(ACC), "2.9.0").Env("GPU_NUM_DEVICES", "2")),
               .device = "xla:0"});
  // 0.28 on: the XLA branch itself calls xm.xla_device().
  c.push_back({.id = "acc_0_28_xla_2_3_select_0", .host = cpu_host,
               .request = Versions("", "0.28.0", Xla(Req::Train(ACC), "2.3.0").Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "xla:0", .warnings = {"PartialState (its XLA branch)", kRaises}});
  // ---- TrainingArguments before 4.39 ------------------------------------------------------------------------
  c.push_back({.id = "ta_4_36_xla_2_1_cpu_host", .host = cpu_host,
               .request = Versions("4.36.2", "0.25.0", Xla(Req::Train(TA), "2.1.0")), .device = "xla:0"});
  c.push_back({.id = "ta_4_36_xla_1_13_cpu_host", .host = cpu_host,
               .request = Versions("4.36.2", "0.25.0", Xla(Req::Train(TA), "1.13.1")), .device = "cpu"});
  // On a CUDA host PartialState is not XLA; TrainingArguments' own check passes PartialState's bare `cuda` on
  // where torch_xla finds a device (2.x: its CPU), and takes its own chain (cuda:0) where it raises (1.13).
  c.push_back({.id = "ta_4_38_xla_2_1_cuda_host", .host = cuda2,
               .request = Versions("4.38.2", "0.27.2", Xla(Req::Train(TA), "2.1.0", true)), .device = "cuda"});
  c.push_back({.id = "ta_4_38_xla_1_13_cuda_host", .host = cuda2,
               .request = Versions("4.38.2", "0.27.2", Xla(Req::Train(TA), "1.13.1", true)), .device = "cuda:0"});
  c.push_back({.id = "ta_4_39_xla_1_13_cuda_host", .host = cuda2,
               .request = Versions("4.39.0", "0.27.2", Xla(Req::Train(TA), "1.13.1", true)), .device = "cuda"});
  c.push_back({.id = "ta_4_38_xla_2_1_cuda_host_select_0", .host = cuda2,
               .request = Versions("4.38.2", "0.27.2",
                                   Xla(Req::Train(TA), "2.1.0", true).Env("PJRT_SELECT_DEFAULT_DEVICE", "0")),
               .device = "cuda:0",
               .warnings = {"Transformers 4.38.2's is_torch_tpu_available() (TrainingArguments._setup_devices)", kRaises}});
  return c;
}

class XlaPjrtCases : public ::testing::TestWithParam<ResolveCase> {};

// The version check, and the warnings: each of `warnings` in some warning, none of `absent_warnings` in any; an
// error's `error_words` in its message.
TEST_P(XlaPjrtCases, Resolves) {
  const ResolveCase& k = GetParam();
  ExpectVersionCase(k);
  absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(k.host(), k.request);
  if (!got.ok()) {
    for (const std::string& w : k.error_words) EXPECT_THAT(std::string(got.status().message()), HasSubstr(w));
    return;
  }
  const std::string warnings = absl::StrJoin(got->warnings(), "\n");
  for (const std::string& w : k.warnings) EXPECT_THAT(warnings, HasSubstr(w));
  for (const std::string& w : k.absent_warnings) EXPECT_THAT(warnings, Not(HasSubstr(w)));
}

INSTANTIATE_TEST_SUITE_P(Semantics, XlaPjrtCases, ::testing::ValuesIn(Cases()), CaseId);

// Every row of tests/placement/pjrt_default.txt (torch_xla's own default-device code, executed at its release tags by
// scripts/fidelity/pjrt_default.py) against Accelerate 0.25's is_tpu_available() on a host without a TPU or CUDA GPU:
// a device is xla:0; none (RuntimeError, caught) is cpu; raises (NotImplementedError) is cpu with the warning.
TEST(XlaPjrt, DefaultDeviceIsTorchXlaExecutedAtItsTags) {
  std::ifstream in(DEVPLACE_PJRT_DEFAULT);
  ASSERT_TRUE(in) << DEVPLACE_PJRT_DEFAULT;
  const v1::Inventory inv = HostOf({})();
  std::string line;
  int rows = 0, raises = 0, devices = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = absl::StrSplit(line, ' ');
    ASSERT_EQ(f.size(), 3u) << line;
    Req r = Versions("", "0.25.0", Req::Train(ACC).Runtime({"xla"}).Packages({{"torch", "2.1.0"}, {"torch_xla", f[0].c_str()}}));
    if (f[1] != "-") {
      const std::vector<std::string> kv = absl::StrSplit(f[1], absl::MaxSplits('=', 1));
      ASSERT_EQ(kv.size(), 2u) << line;
      r.Env(kv[0], kv[1]);
    }
    absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(inv, r);
    ASSERT_TRUE(got.ok()) << line << ": " << got.status();
    const std::string warnings = absl::StrJoin(got->warnings(), "\n");
    EXPECT_EQ(got->device(), f[2] == "device" ? "xla:0" : "cpu") << line;
    if (f[2] == "raises") {
      EXPECT_THAT(warnings, HasSubstr(kRaises)) << line;
    } else {
      EXPECT_THAT(warnings, Not(HasSubstr(kRaises))) << line;
    }
    ++rows;
    raises += f[2] == "raises";
    devices += f[2] == "device";
  }
  // The table spans both generations: XRT (1.13: no device), PJRT's CPU default, and 2.1 to 2.4's NotImplementedError.
  EXPECT_GE(rows, 7 * 15);
  EXPECT_GT(raises, 0);
  EXPECT_GT(devices, 0);
}

}  // namespace
}  // namespace devplace::testing
