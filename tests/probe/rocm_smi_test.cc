// The rocm_smi prober against Debian's real ROCm SMI (librocm-smi64-1, ROCm SMI 5.2.3), not a
// fake: devplace-probe runs in a private mount namespace (unshare -m) where the fixture host's
// sys/class and sys/bus are bind-mounted over /sys/class and /sys/bus, so the real library reads
// the fixture's KFD topology, drm and PCI trees while the probe reads the same tree as --host_root.
// Needs root (a mount namespace) and the library: without either the tests are SKIPPED and say so.
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kLibrary[] = "librocm_smi64.so.1";

// Why the real library cannot be run here, or "".
std::string Unavailable() {
  if (geteuid() != 0) return "needs root for a private mount namespace (unshare -m)";
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return std::string(kLibrary) + " is not installed (Debian package librocm-smi64-1)";
  dlclose(handle);
  if (RunCommand("unshare -m --propagation private true").exit_code != 0) return "unshare -m is refused here";
  return "";
}

#define SKIP_WITHOUT_REAL_LIBRARY()                                \
  do {                                                             \
    if (const std::string why = Unavailable(); !why.empty()) {     \
      GTEST_SKIP() << why;                                         \
    }                                                              \
  } while (0)

// devplace-probe --json on `tree` with only the rocm_smi prober, inside a mount namespace where
// `tree`'s sys/class and sys/bus are /sys/class and /sys/bus.
v1::Inventory ProbeInNamespace(const std::string& tree, std::string* raw = nullptr) {
  const std::string script =
      "mount --bind \"$1/sys/class\" /sys/class && mount --bind \"$1/sys/bus\" /sys/bus && "
      "exec \"$2\" --host_root=\"$1\" --json" + NoVendorLibraryFlags() + " --rocm_smi_library=" + kLibrary;
  const CommandResult r = RunCommand("unshare -m --propagation private /bin/sh -c " + ShellQuote(script) + " sh " +
                                     ShellQuote(tree) + " " + ShellQuote(DEVPLACE_PROBE_BINARY));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  v1::Inventory inv;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok()) << r.out << r.err;
  if (raw != nullptr) *raw = r.out + r.err;
  return inv;
}

const v1::ProbeReport& RocmSmi(const v1::Inventory& inv) {
  static const v1::ProbeReport kNone;
  const v1::ProbeReport* report = FindReport(inv, "rocm_smi");
  EXPECT_NE(report, nullptr) << "no rocm_smi report";
  return report != nullptr ? *report : kNone;
}

// ROCm SMI 5.2.3's rsmi_init asserts that every KFD topology node has an io_links directory and
// aborts the process when one has none: the abort costs the rocm_smi prober's report (CRASHED,
// naming the signal and the call), never the probe; the GPUs keep what sysfs gave.
TEST(RocmSmiRealLibrary, AbortInsideTheLibraryCostsOneProbe) {
  SKIP_WITHOUT_REAL_LIBRARY();
  ScratchHost host("amd-2x-mi210");
  for (const auto& node : std::filesystem::directory_iterator(host.Path("sys/class/kfd/kfd/topology/nodes"))) {
    std::filesystem::remove_all(node.path() / "io_links");
  }
  const v1::Inventory inv = ProbeInNamespace(host.dir());
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_CRASHED) << RocmSmi(inv).message();
  EXPECT_THAT(RocmSmi(inv).message(), HasSubstr("SIGABRT"));
  EXPECT_THAT(RocmSmi(inv).message(), HasSubstr("rsmi_init"));
  const v1::Backend* amd = FindRow(inv, v1::ROW_CUDA_AMD);
  ASSERT_NE(amd, nullptr);
  ASSERT_EQ(amd->devices_size(), 2);
  const v1::Inventory sysfs = ProbeTree(host.dir());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(amd->devices(i).name(), FindRow(sysfs, v1::ROW_CUDA_AMD)->devices(i).name());
    EXPECT_EQ(amd->devices(i).attributes().count("memory_source"), 0u);
  }
  for (const v1::ProbeReport& report : inv.probe_reports()) {
    if (report.name() != "rocm_smi") {
      EXPECT_NE(report.status(), v1::PROBE_STATUS_CRASHED) << report.name();
    }
  }
}

// What the real library gave on amd-2x-mi210, as a golden inventory (tests/golden/rocm_smi;
// DEVPLACE_UPDATE_GOLDENS=1 rewrites it).
TEST(RocmSmiRealLibrary, GoldenInventory) {
  SKIP_WITHOUT_REAL_LIBRARY();
  v1::Inventory inv = ProbeInNamespace(HostDir("amd-2x-mi210"));
  inv.clear_probed_at();
  for (v1::ProbeReport& report : *inv.mutable_probe_reports()) report.set_duration_ms(0);
  ExpectMatchesGolden(inv, std::string(DEVPLACE_ROCM_SMI_GOLDEN_DIR) + "/amd-2x-mi210.json",
                      "inventory of amd-2x-mi210 with Debian's ROCm SMI");
}

// The real library reads the AMD fixture as devplace's sysfs probers do: the same GPUs by bus id,
// the same VRAM total and used, the same unique id, and the processes of the fixture's
// /sys/class/kfd/kfd/proc.
TEST(RocmSmiRealLibrary, ReadsTheAmdFixtureAsTheSysfsProbersDo) {
  SKIP_WITHOUT_REAL_LIBRARY();
  for (const std::string host : {"amd-2x-mi210", "amd-2x-mi210-kfd-order"}) {
    SCOPED_TRACE(host);
    const v1::Inventory inv = ProbeInNamespace(HostDir(host));
    const v1::ProbeReport& report = RocmSmi(inv);
    ASSERT_EQ(report.status(), v1::PROBE_STATUS_OK) << report.message();
    EXPECT_THAT(report.message(), ::testing::StartsWith("2 ROCm SMI devices, 2 matched by bus id, 2 with memory"));
    const v1::Inventory sysfs = ProbeTree(HostDir(host));
    const v1::Backend* amd = FindRow(inv, v1::ROW_CUDA_AMD);
    ASSERT_NE(amd, nullptr);
    ASSERT_EQ(amd->devices_size(), 2);
    std::set<uint32_t> pids;
    for (const v1::Device& d : amd->devices()) {
      SCOPED_TRACE(d.pci_bus_id());
      const v1::Device* s = FindDevice(sysfs, d.pci_bus_id());
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(d.attributes().at("memory_source"), "rocm_smi");
      EXPECT_EQ(d.name(), s->name());
      EXPECT_EQ(d.uuid(), s->uuid());
      EXPECT_EQ(d.memory_total_bytes(), s->memory_total_bytes());
      EXPECT_EQ(d.memory_free_bytes(), s->memory_free_bytes());
      EXPECT_EQ(d.usage().source(), "rocm_smi");
      EXPECT_TRUE(d.usage().processes_known());
      for (const v1::DeviceUsageProcess& p : d.usage().processes()) pids.insert(p.pid());
    }
    std::set<uint32_t> listed;
    const std::filesystem::path proc = HostDir(host) + "/sys/class/kfd/kfd/proc";
    if (std::filesystem::is_directory(proc)) {
      for (const auto& entry : std::filesystem::directory_iterator(proc)) {
        listed.insert(static_cast<uint32_t>(std::stoul(entry.path().filename().string())));
      }
    }
    EXPECT_EQ(pids, listed) << "processes ROCm SMI gave against the fixture's /sys/class/kfd/kfd/proc";
  }
}

// A process with queues on both GPUs: ROCm SMI lists it on both (rsmi_compute_process_gpus_get)
// with one VRAM figure for the two together (rsmi_compute_process_info_by_pid_get sums its
// vram_<gpu_id> files), so devplace lists it on each GPU without a memory figure rather than
// doubling or misplacing one.
TEST(RocmSmiRealLibrary, AProcessOnTwoGpusHasNoPerGpuMemory) {
  SKIP_WITHOUT_REAL_LIBRARY();
  ScratchHost host("amd-2x-mi210");
  const std::string proc = "sys/class/kfd/kfd/proc/4242/";
  host.Write(proc + "queues/1/gpuid", "53238\n");
  host.Write(proc + "queues/1/type", "compute\n");
  host.Write(proc + "queues/1/size", "1048576\n");
  host.Write(proc + "vram_53238", "1048576\n");
  const v1::Inventory inv = ProbeInNamespace(host.dir());
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  for (const std::string bus_id : {"0000:63:00.0", "0000:83:00.0"}) {
    SCOPED_TRACE(bus_id);
    const v1::Device* d = FindDevice(inv, bus_id);
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(d->usage().processes_known());
    ASSERT_EQ(d->usage().processes_size(), 1);
    EXPECT_EQ(d->usage().processes(0).pid(), 4242u);
    EXPECT_FALSE(d->usage().processes(0).has_used_memory_bytes());
  }
}

}  // namespace
}  // namespace devplace::testing
