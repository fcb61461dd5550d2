// The rocm_smi prober (server/probe/vendor_libs/rocm_smi_prober.cc), two ways:
// - RocmSmiFake.*: against the fake ROCm SMI (tests/fakes/fake_rocm_smi.cc, scripts in
//   tests/fixtures/rocm_smi), loaded with a real dlopen in the prober's own process on the AMD
//   fixture hosts, as any user: the prober's check of the KFD topology looks under the fixture's
//   sys/ (ProbeOptions::library_sysfs). Enumeration and merge by bus id, memory, processes (one
//   GPU, two GPUs, ended meanwhile, no KFD process accounting), usage never busy, refusals,
//   unsupported and failing calls, a missing or wrong library, a hang and a crash that cost only
//   this prober's data, and a golden inventory (tests/golden/rocm_smi/fake-amd-2x-mi210.json);
//   RocmSmiFakeAbi.* holds the fake's exports to Debian's real library's.
// - RocmSmiRealLibrary.*: against Debian's real ROCm SMI (librocm-smi64-1, ROCm SMI 5.2.3):
//   devplace-probe runs in a private mount namespace (unshare -m) where the fixture host's
//   sys/class and sys/bus are bind-mounted over /sys/class and /sys/bus, so the real library reads
//   the fixture's KFD topology, drm and PCI trees while the probe reads the same tree as
//   --host_root. Needs root (a mount namespace) and the library: without either the tests are
//   SKIPPED and say so.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"
#include "tests/common/command.h"
#include "tests/probe/defined_symbols.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::AllOf;
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

// ---- the fake ROCm SMI ----

constexpr uint64_t kMi210Vram = 68702699520;
constexpr char kFirst[] = "0000:63:00.0";   // device 1 of tests/fixtures/rocm_smi/mi210.txt
constexpr char kSecond[] = "0000:83:00.0";  // device 0

std::string FakeScript(const std::string& name) {
  return absl::StrCat(DEVPLACE_FIXTURES_DIR, "/rocm_smi/", name, ".txt");
}

// The mi210 script with `extra` directives in front (rules apply in file order).
std::string ScriptWith(const TempDir& tmp, const std::string& extra) {
  return tmp.Write("script.txt", extra + "\n" + ReadFile(FakeScript("mi210")));
}

// What one probe of a host tree with the fake needs.
struct FakeRun {
  std::string tree;                                  // the host tree (--host_root)
  std::string script = FakeScript("mi210");          // FAKE_ROCM_SMI_CONFIG
  std::string library = DEVPLACE_FAKE_ROCM_SMI;      // --rocm_smi_library
  std::chrono::milliseconds timeout{5000};           // --probe_timeout
  std::string sysfs = "";                            // library_sysfs; "": the tree's sys/
};

// The inventory of `run.tree` with only the rocm_smi prober; probed_at and durations cleared.
v1::Inventory ProbeWithFake(const FakeRun& run) {
  setenv("FAKE_ROCM_SMI_CONFIG", run.script.c_str(), 1);
  probe::ProbeOptions options;
  options.rocm_smi_library = run.library;
  options.vendor_timeout = run.timeout;
  options.library_sysfs = run.sysfs.empty() ? run.tree + "/sys" : run.sysfs;
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(run.tree), options);
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

v1::Inventory ProbeMi210(const std::string& script = FakeScript("mi210")) {
  return ProbeWithFake({HostDir("amd-2x-mi210"), script});
}

// `inv` without its last probe report (rocm_smi's) is what the sysfs probers alone make of `tree`.
void ExpectOnlyTheReportAdded(const v1::Inventory& inv, const std::string& tree) {
  v1::Inventory without = inv;
  without.mutable_probe_reports()->RemoveLast();
  EXPECT_EQ(without.SerializeAsString(), ProbeTree(tree).SerializeAsString());
}

// The process `pid` of the device's usage, or null.
const v1::DeviceUsageProcess* Process(const v1::Device& d, uint32_t pid) {
  for (const v1::DeviceUsageProcess& p : d.usage().processes()) {
    if (p.pid() == pid) return &p;
  }
  return nullptr;
}

TEST(RocmSmiFake, EnumeratesTheGpusByBusIdWithNamesUniqueIdsAndMemory) {
  const v1::Inventory inv = ProbeMi210();
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  // No "library lacks ...": the fake exports every function the prober looks up.
  EXPECT_EQ(RocmSmi(inv).message(), "2 ROCm SMI devices, 2 matched by bus id, 2 with memory");
  const v1::Inventory sysfs = ProbeHost("amd-2x-mi210");
  // The script lists 83:00.0 first: each figure lands on its own bus id.
  const std::map<std::string, std::pair<std::string, uint64_t>> expected = {
      {kFirst, {"GPU-0de0b6b3a7640001", 2147483648}}, {kSecond, {"GPU-0de0b6b3a7640002", 6442450944}}};
  for (const auto& [bus_id, want] : expected) {
    SCOPED_TRACE(bus_id);
    const v1::Device* d = FindDevice(inv, bus_id);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->name(), "AMD Instinct MI210");
    EXPECT_EQ(d->uuid(), want.first);
    EXPECT_EQ(d->memory_total_bytes(), kMi210Vram);
    EXPECT_EQ(d->memory_free_bytes(), kMi210Vram - want.second);
    EXPECT_NE(d->memory_free_bytes(), FindDevice(sysfs, bus_id)->memory_free_bytes());  // the library's, not sysfs'
    EXPECT_EQ(d->attributes().at("memory_source"), "rocm_smi");
    EXPECT_TRUE(d->usable()) << d->unusable_reason();
  }
}

// ROCm SMI's process list is system-wide: each process goes on the GPUs it uses, with its VRAM
// when it uses one GPU and without a figure when it uses several (one figure for all of them).
// ROCm SMI tells no compute mode, so a GPU with processes is not busy.
TEST(RocmSmiFake, ProcessesGoOnTheirGpusAndNoGpuIsBusy) {
  const v1::Inventory inv = ProbeMi210();
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  const v1::Device& second = *FindDevice(inv, kSecond);
  EXPECT_EQ(second.usage().source(), "rocm_smi");
  EXPECT_TRUE(second.usage().processes_known());
  EXPECT_EQ(second.usage().process_count(), 2u);
  ASSERT_NE(Process(second, 4242), nullptr);
  EXPECT_EQ(Process(second, 4242)->used_memory_bytes(), 4294967296u);
  EXPECT_EQ(Process(second, 4242)->kind(), v1::DEVICE_USAGE_PROCESS_KIND_COMPUTE);
  EXPECT_EQ(Process(second, 4242)->uid(), 1000u);  // the fixture's /proc/4242/status
  ASSERT_NE(Process(second, 5151), nullptr);
  EXPECT_FALSE(Process(second, 5151)->has_used_memory_bytes());
  EXPECT_EQ(second.usage().memory_used_bytes(), 6442450944u);
  const v1::Device& first = *FindDevice(inv, kFirst);
  EXPECT_EQ(first.usage().process_count(), 1u);
  ASSERT_NE(Process(first, 5151), nullptr);
  EXPECT_FALSE(Process(first, 5151)->has_used_memory_bytes());
  EXPECT_EQ(first.usage().memory_used_bytes(), 2147483648u);
  for (const v1::Device* d : {&first, &second}) {
    EXPECT_FALSE(d->usage().busy()) << d->pci_bus_id();
    EXPECT_EQ(d->usage().compute_mode(), v1::DEVICE_USAGE_COMPUTE_MODE_UNSPECIFIED);
  }
}

TEST(RocmSmiFake, UnsupportedMemoryLeavesTheSysfsFigures) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_dev_memory_total_get 0 NOT_SUPPORTED"));
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  EXPECT_EQ(RocmSmi(inv).message(), "2 ROCm SMI devices, 2 matched by bus id, 1 with memory");
  const v1::Device* second = FindDevice(inv, kSecond);
  const v1::Inventory sysfs_only = ProbeHost("amd-2x-mi210");  // held: FindDevice points into it
  const v1::Device* sysfs = FindDevice(sysfs_only, kSecond);
  EXPECT_EQ(second->memory_total_bytes(), sysfs->memory_total_bytes());
  EXPECT_EQ(second->memory_free_bytes(), sysfs->memory_free_bytes());
  EXPECT_EQ(second->attributes().count("memory_source"), 0u);
  EXPECT_EQ(FindDevice(inv, kFirst)->attributes().at("memory_source"), "rocm_smi");
}

TEST(RocmSmiFake, RefusedDeviceIsNotAccessibleAndTheOtherIs) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_dev_name_get 1 PERMISSION"));
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  EXPECT_THAT(RocmSmi(inv).message(), HasSubstr("1 not accessible"));
  const v1::Device* refused = FindDevice(inv, kFirst);
  EXPECT_FALSE(refused->usable());
  EXPECT_THAT(refused->unusable_reason(),
              HasSubstr("ROCm SMI rsmi_dev_name_get: RSMI_STATUS_PERMISSION (4): this process may not use " +
                        std::string(kFirst)));
  EXPECT_EQ(refused->health(), v1::HEALTH_OK);
  EXPECT_TRUE(FindDevice(inv, kSecond)->usable());
}

TEST(RocmSmiFake, UnexpectedErrorIsAnErrorButTheRestIsMerged) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_dev_memory_usage_get 0 UNKNOWN_ERROR"));
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(RocmSmi(inv).message(),
              AllOf(HasSubstr("0000:83:00.0: ROCm SMI rsmi_dev_memory_usage_get: RSMI_STATUS_UNKNOWN_ERROR (-1)"),
                    HasSubstr("(found anyway: ")));
  EXPECT_EQ(FindDevice(inv, kFirst)->memory_free_bytes(), kMi210Vram - 2147483648);
  EXPECT_EQ(FindDevice(inv, kSecond)->usage().process_count(), 2u);
}

TEST(RocmSmiFake, InitFailureIsAnErrorAndSysfsStays) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_init - INIT_ERROR"));
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(RocmSmi(inv).message(), "rsmi_init: RSMI_STATUS_INIT_ERROR (8)");
  ExpectOnlyTheReportAdded(inv, HostDir("amd-2x-mi210"));
}

// The prober asks the sysfs the library reads, never the probe's --host_root: without a KFD
// topology there the library is not even loaded.
TEST(RocmSmiFake, WithoutAKfdTopologyTheLibraryIsNotLoaded) {
  TempDir tmp;
  setenv("FAKE_ROCM_SMI_LOG", tmp.File("calls").c_str(), 1);
  const v1::Inventory inv = ProbeWithFake({HostDir("amd-2x-mi210"), FakeScript("mi210"), DEVPLACE_FAKE_ROCM_SMI,
                                           std::chrono::seconds(5), tmp.File("sys")});
  unsetenv("FAKE_ROCM_SMI_LOG");
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(RocmSmi(inv).message(), absl::StrCat("amdgpu driver not loaded (no ", tmp.File("sys"),
                                                 "/class/kfd/kfd/topology/nodes in this process's /sys)"));
  EXPECT_EQ(ReadFile(tmp.File("calls")), "");
}

TEST(RocmSmiFake, HostWithoutAnAmdGpuDoesNotLoadTheLibrary) {
  TempDir tmp;
  setenv("FAKE_ROCM_SMI_LOG", tmp.File("calls").c_str(), 1);
  const v1::Inventory inv = ProbeWithFake({HostDir("cpu-only"), FakeScript("mi210"), DEVPLACE_FAKE_ROCM_SMI,
                                           std::chrono::seconds(5), HostDir("amd-2x-mi210") + "/sys"});
  unsetenv("FAKE_ROCM_SMI_LOG");
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(RocmSmi(inv).message(), "no AMD GPU on the PCI bus");
  EXPECT_EQ(ReadFile(tmp.File("calls")), "");
}

// A kernel without KFD process accounting (no /sys/class/kfd/kfd/proc): ROCm SMI's process list
// would fail, so it is not asked; the processes are unknown, not none.
TEST(RocmSmiFake, WithoutKfdProcessAccountingTheProcessesAreUnknown) {
  ScratchHost host("amd-2x-mi210");
  host.Remove("sys/class/kfd/kfd/proc");
  const v1::Inventory inv = ProbeWithFake({host.dir()});
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  EXPECT_THAT(RocmSmi(inv).message(), HasSubstr(absl::StrCat("processes not read: no ", host.Path("sys"),
                                                             "/class/kfd/kfd/proc")));
  for (const char* bus_id : {kFirst, kSecond}) {
    EXPECT_FALSE(FindDevice(inv, bus_id)->usage().processes_known()) << bus_id;
    EXPECT_EQ(FindDevice(inv, bus_id)->attributes().at("memory_source"), "rocm_smi");
  }
}

// A process that ends between the list and the question about its GPUs is left out.
TEST(RocmSmiFake, ProcessesThatEndedMeanwhileAreLeftOut) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_compute_process_gpus_get - NOT_FOUND"));
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  for (const char* bus_id : {kFirst, kSecond}) {
    EXPECT_TRUE(FindDevice(inv, bus_id)->usage().processes_known()) << bus_id;
    EXPECT_EQ(FindDevice(inv, bus_id)->usage().process_count(), 0u) << bus_id;
  }
}

// A process whose own entry is gone by the time its VRAM is asked stays listed, without a figure.
TEST(RocmSmiFake, ProcessWithoutItsEntryIsListedWithoutMemory) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_compute_process_info_by_pid_get - NOT_FOUND"));
  ASSERT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_OK) << RocmSmi(inv).message();
  const v1::DeviceUsageProcess* p = Process(*FindDevice(inv, kSecond), 4242);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->has_used_memory_bytes());
}

TEST(RocmSmiFake, FailingProcessListIsAnErrorAndTheProcessesAreUnknown) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "fail rsmi_compute_process_info_get - UNKNOWN_ERROR"));
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(RocmSmi(inv).message(),
              HasSubstr("ROCm SMI rsmi_compute_process_info_get: RSMI_STATUS_UNKNOWN_ERROR (-1)"));
  for (const char* bus_id : {kFirst, kSecond}) {
    EXPECT_FALSE(FindDevice(inv, bus_id)->usage().processes_known()) << bus_id;
    EXPECT_EQ(FindDevice(inv, bus_id)->attributes().at("memory_source"), "rocm_smi");
  }
}

TEST(RocmSmiFake, MissingLibraryIsSkippedAndTheRestIntact) {
  const v1::Inventory inv = ProbeWithFake({HostDir("amd-2x-mi210"), FakeScript("mi210"), "/nonexistent/librocm_smi64.so.1"});
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(RocmSmi(inv).message(), HasSubstr("/nonexistent/librocm_smi64.so.1 not found ("));
  ExpectOnlyTheReportAdded(inv, HostDir("amd-2x-mi210"));
}

TEST(RocmSmiFake, NotTheLibraryIsAnErrorNamingTheMissingFunctions) {
  const v1::Inventory inv = ProbeWithFake({HostDir("amd-2x-mi210"), FakeScript("mi210"), "libc.so.6"});
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(RocmSmi(inv).message(),
              ::testing::StartsWith("libc.so.6 lacks rsmi_init, rsmi_shut_down, rsmi_num_monitor_devices, "
                                    "rsmi_dev_pci_id_get (not a ROCm SMI library, or one too old)"));
  ExpectOnlyTheReportAdded(inv, HostDir("amd-2x-mi210"));
}

// A call that never returns costs this prober's data only: the report names the call, nothing of
// the library is merged, every row keeps what the sysfs probers found.
TEST(RocmSmiFake, NeverReturningCallTimesOutAndMergesNothing) {
  TempDir tmp;
  const v1::Inventory inv = ProbeWithFake({HostDir("amd-2x-mi210"), ScriptWith(tmp, "hang rsmi_dev_memory_total_get 1"),
                                           DEVPLACE_FAKE_ROCM_SMI, std::chrono::milliseconds(300)});
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_THAT(RocmSmi(inv).message(), AllOf(HasSubstr("gave up after 300 ms"),
                                            HasSubstr("rsmi_dev_memory_total_get (device 1)"),
                                            HasSubstr("nothing of rocm_smi merged")));
  ExpectOnlyTheReportAdded(inv, HostDir("amd-2x-mi210"));
}

TEST(RocmSmiFake, CrashInsideTheLibraryCostsOnlyItsReport) {
  TempDir tmp;
  const v1::Inventory inv = ProbeMi210(ScriptWith(tmp, "crash rsmi_compute_process_gpus_get -"));
  EXPECT_EQ(RocmSmi(inv).status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_THAT(RocmSmi(inv).message(), AllOf(HasSubstr("SIGSEGV"), HasSubstr("rsmi_compute_process_gpus_get"),
                                            HasSubstr("nothing of rocm_smi merged")));
  ExpectOnlyTheReportAdded(inv, HostDir("amd-2x-mi210"));
}

// The whole inventory of amd-2x-mi210 with the fake (tests/golden/rocm_smi/fake-amd-2x-mi210.json;
// DEVPLACE_UPDATE_GOLDENS=1 rewrites it): what a change to the prober or the merge does shows.
TEST(RocmSmiFake, GoldenInventory) {
  ExpectMatchesGolden(ProbeMi210(), std::string(DEVPLACE_ROCM_SMI_GOLDEN_DIR) + "/fake-amd-2x-mi210.json",
                      "inventory of amd-2x-mi210 with the fake ROCm SMI");
}

// The fake exports only functions that Debian's real librocm_smi64.so.1 defines, as it defines them
// (type and symbol version, nm -D: the real library versions none), so the fake cannot drift from
// the ABI it stands in for. (That it exports every function the prober looks up, required or
// optional, RocmSmiFake.EnumeratesTheGpusByBusIdWithNamesUniqueIdsAndMemory shows: no "library
// lacks" in its report.)
TEST(RocmSmiFakeAbi, ExportsWhatTheRealLibraryDefines) {
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) GTEST_SKIP() << kLibrary << " is not installed (Debian package librocm-smi64-1)";
  Dl_info info = {};
  std::string real;
  if (void* sym = dlsym(handle, "rsmi_init"); sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    real = info.dli_fname;
  }
  dlclose(handle);
  ASSERT_FALSE(real.empty());
  if (RunCommand("command -v nm").exit_code != 0) GTEST_SKIP() << "nm is not installed (binutils)";
  const std::map<std::string, std::string> real_symbols = DefinedSymbols(real);
  const std::map<std::string, std::string> fake_symbols = DefinedSymbols(DEVPLACE_FAKE_ROCM_SMI);
  ASSERT_FALSE(real_symbols.empty()) << real;
  ASSERT_FALSE(fake_symbols.empty());
  for (const auto& [name, type] : fake_symbols) {
    const auto r = real_symbols.find(name);
    ASSERT_NE(r, real_symbols.end()) << "the fake exports " << name << ", which " << real << " does not define";
    EXPECT_EQ(type, r->second) << name << " (symbol type and version, nm -D)";
  }
}

}  // namespace
}  // namespace devplace::testing
