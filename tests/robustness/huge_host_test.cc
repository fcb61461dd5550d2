// A generated host with 100,000 NVIDIA GPUs on its PCI bus (symbolic links, as real sysfs has them,
// to one device directory; /proc/driver/nvidia/gpus entries likewise): the real daemon probes it,
// and `devplace inventory`, `devplace resolve --device_map=auto` and a /metrics scrape all answer,
// each bounded: 256 devices kept per row, the bus read only up to 4096 accelerator functions, and
// the pci probe report says so (docs/SEMANTICS.md I-BOUND).
// Before the bound: an 18 MB inventory, both commands failed with RESOURCE_EXHAUSTED (over the
// client's 4 MiB limit) and /metrics was 58 MB.
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kFunctions = 100000;

// nvidia-2x-h100 with its two GPUs and the NVSwitch replaced by kFunctions H100s: every
// /sys/bus/pci/devices/<bdf> links to the first GPU's directory and every
// /proc/driver/nvidia/gpus/<bdf> to its information directory (so all share /dev/nvidia0).
void GenerateHost(const std::string& root) {
  ASSERT_EQ(RunCommand(absl::StrCat("cp -r ", ShellQuote(FixtureHost("nvidia-2x-h100")), " ", root)).exit_code, 0);
  const fs::path devices = fs::path(root) / "sys/bus/pci/devices";
  const fs::path gpus = fs::path(root) / "proc/driver/nvidia/gpus";
  const fs::path gpu_dir = fs::path(root) / "sys/devices/pci-template";
  const fs::path info_dir = fs::path(root) / "proc/driver/nvidia/gpu-template";
  fs::rename(devices / "0000:18:00.0", gpu_dir);
  fs::rename(gpus / "0000:18:00.0", info_dir);
  fs::remove_all(devices);
  fs::remove_all(gpus);
  fs::create_directories(devices);
  fs::create_directories(gpus);
  for (int i = 0; i < kFunctions; ++i) {
    // domain, bus, device (0-31), function (0-7): 65,536 functions per domain.
    const std::string bdf =
        absl::StrFormat("%04x:%02x:%02x.%x", i >> 16, (i >> 8) & 0xff, (i >> 3) & 0x1f, i & 7);
    fs::create_symlink("../../../devices/pci-template", devices / bdf);
    fs::create_symlink("../gpu-template", gpus / bdf);
  }
}

TEST(HugeHost, HundredThousandDevicesAnswerResolveInventoryAndMetricsWithinBounds) {
  TempDir dir;
  const std::string root = dir.File("host");
  GenerateHost(root);
  DaemonProcess d(dir.path(), {"--host_root=" + root, "--probe_timeout=100s", "--refresh_interval=0",
                               "--metrics_listen=127.0.0.1:0", "--nvml_library=", "--cuda_library="});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(110))) << d.Log();

  // The inventory: 256 GPUs kept, and a probe report that says so.
  const CommandResult inventory =
      RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " inventory --json --address=", d.unix_target()));
  ASSERT_EQ(inventory.exit_code, 0) << inventory.err;
  const v1::Inventory inv = ParseInventoryJson(inventory.out);
  const v1::Backend* cuda = nullptr;
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == v1::ROW_CUDA_NVIDIA) cuda = &b;
  }
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->devices_size(), 256);
  EXPECT_EQ(cuda->devices(255).pci_bus_id(), "0000:00:1f.7");
  const v1::ProbeReport* pci = nullptr;
  for (const v1::ProbeReport& r : inv.probe_reports()) {
    if (r.name() == "pci") pci = &r;
  }
  ASSERT_NE(pci, nullptr);
  EXPECT_EQ(pci->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(pci->message(),
            "devices left out (at most 256 per row and 1024 in all, the first in PCI bus order): cuda/nvidia kept 256 "
            "of 4096; stopped reading the bus after 4096 accelerator functions: 95904 of 100000 PCI functions not "
            "read (found anyway: 100000 PCI functions; accelerators: 256 cuda/nvidia)");
  for (const v1::ProbeReport& r : inv.probe_reports()) {
    // nvidia_proc meets 99,744 /proc entries of functions left out: 16 named, the rest counted.
    EXPECT_LT(r.message().size(), 4200u) << r.name();
  }
  EXPECT_LT(inventory.out.size(), 1u << 20) << "inventory JSON bytes";

  // resolve --device_map=auto: every kept GPU, then the spill-over.
  const CommandResult resolve = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " resolve --workload=inference --no_environment ",
                                                        "--device_map=auto --json --address=", d.unix_target()));
  ASSERT_EQ(resolve.exit_code, 0) << resolve.err;
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(resolve.out, &answer).ok()) << resolve.out.substr(0, 500);
  EXPECT_EQ(answer.device(), "cuda:0");
  EXPECT_EQ(answer.devices_size(), 257);
  EXPECT_EQ(answer.devices(256), "cpu");
  EXPECT_EQ(answer.placed_size(), 16);
  EXPECT_LT(resolve.out.size(), 256u << 10) << "resolve JSON bytes";

  // One scrape: per-device series for the kept devices only.
  std::smatch m;
  const std::string log = d.Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("event=metrics_listening url=(http://127\\.0\\.0\\.1:[0-9]+/)")));
  const std::string body = dir.File("metrics.txt");
  const CommandResult scrape = RunCommand(absl::StrCat("curl -sS --max-time 10 -o ", body, " -w '%{size_download} %{time_total}' ",
                                                       m[1].str(), "metrics"));
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  const std::string metrics = ReadFile(body);
  EXPECT_THAT(metrics, HasSubstr("devplace_backend_devices{row=\"cuda_nvidia\"} 256"));
  int usable_series = 0;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) usable_series += absl::StartsWith(line, "devplace_device_usable{");
  EXPECT_EQ(usable_series, 256);
  EXPECT_LT(metrics.size(), 1u << 20) << "/metrics bytes";
  std::printf("100,000 functions: inventory %zu bytes, resolve %zu bytes, /metrics %s (bytes, seconds)\n",
              inventory.out.size(), resolve.out.size(), scrape.out.c_str());
}

}  // namespace
}  // namespace devplace::testing
