// The NVML prober against the fake NVML (tests/fakes/fake_nvml.cc, loaded with a real dlopen)
// on the NVIDIA fixture hosts: merge by bus id, MIG, lost / refused / unsupported answers, a
// missing library, slow calls, the vendor-prober deadline, and one golden inventory per case
// (tests/golden/nvml/<case>.json; regenerate with DEVPLACE_UPDATE_GOLDENS=1 and review the diff).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/probe/vendor_libs/nvml_prober.h"
#include "server/probe/probers.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint64_t kH100Total = 85520809984;
constexpr char kUuid1[] = "GPU-00000000-0000-4000-8000-000000000001";
constexpr char kUuid2[] = "GPU-00000000-0000-4000-8000-000000000002";

const v1::ProbeReport& Nvml(const v1::Inventory& inv) {
  const v1::ProbeReport* report = FindReport(inv, "nvml");
  EXPECT_NE(report, nullptr);
  static const v1::ProbeReport* none = new v1::ProbeReport;
  return report != nullptr ? *report : *none;
}

TEST(NvmlTest, NamesUuidsAndMemoryMergedByBusIdNotIndex) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_EQ(Nvml(inv).message(), "driver 550.54.15, CUDA 12.4, 2 NVML devices, 2 matched by bus id");
  const v1::Device* gpu0 = FindDevice(inv, "0000:18:00.0");  // NVML index 1
  const v1::Device* gpu1 = FindDevice(inv, "0000:9a:00.0");  // NVML index 0, "00000000:9A:00.0"
  ASSERT_NE(gpu0, nullptr);
  ASSERT_NE(gpu1, nullptr);
  EXPECT_EQ(gpu0->name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu0->uuid(), kUuid1);
  EXPECT_EQ(gpu0->memory_total_bytes(), kH100Total);
  EXPECT_EQ(gpu0->memory_free_bytes(), 84987740160u);
  EXPECT_EQ(gpu1->uuid(), kUuid2);
  EXPECT_EQ(gpu1->memory_total_bytes(), kH100Total);
  EXPECT_EQ(gpu1->memory_free_bytes(), 42949672960u);
  EXPECT_TRUE(gpu0->usable());
  EXPECT_TRUE(gpu1->usable());
  EXPECT_EQ(gpu0->attributes().at("mig_mode"), "disabled");
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  EXPECT_EQ(cuda->driver_version(), "550.54.15");
  EXPECT_EQ(cuda->attributes().at("cuda_driver_version"), "12.4");
  // Without NVML the same host has no memory: it came from the library.
  EXPECT_FALSE(FindDevice(ProbeHost("nvidia-2x-h100"), "0000:18:00.0")->has_memory_total_bytes());
}

TEST(NvmlTest, NvmlNameReplacesTheProcName) {
  ScratchHost host("nvidia-2x-h100");
  const std::string info = "proc/driver/nvidia/gpus/0000:18:00.0/information";
  host.Write(info, "Model: \t\t Graphics Device\nGPU UUID: \t " + std::string(kUuid1) + "\nDevice Minor: \t 0\n");
  EXPECT_EQ(FindDevice(ProbeTree(host.dir()), "0000:18:00.0")->name(), "Graphics Device");
  EXPECT_EQ(FindDevice(ProbeTreeWithNvml(host.dir(), "h100"), "0000:18:00.0")->name(), "NVIDIA H100 80GB HBM3");
}

TEST(NvmlTest, DriverVersionFromNvmlWhenTheKernelGivesNone) {
  ScratchHost host("nvidia-2x-h100");
  host.Remove("proc/driver/nvidia/version");
  host.Remove("sys/module/nvidia/version");
  EXPECT_EQ(FindRow(ProbeTree(host.dir()), v1::ROW_CUDA_NVIDIA)->driver_version(), "");
  EXPECT_EQ(FindRow(ProbeTreeWithNvml(host.dir(), "h100"), v1::ROW_CUDA_NVIDIA)->driver_version(), "550.54.15");
}

TEST(NvmlTest, MissingLibraryIsSkippedAndTheRestIntact) {
  const v1::Inventory inv = ProbeTreeWithNvml(HostDir("nvidia-2x-h100"), "h100", "/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(Nvml(inv).message(), AllOf(HasSubstr("/nonexistent/libnvidia-ml.so.1 not found ("),
                                         HasSubstr("No such file or directory")));
  // Everything else is what the file probers alone give.
  v1::Inventory without = inv;
  without.mutable_probe_reports()->RemoveLast();
  EXPECT_EQ(without.SerializeAsString(), ProbeHost("nvidia-2x-h100").SerializeAsString());
}

TEST(NvmlTest, EmptyLibraryPathRunsNoNvmlProber) {
  const v1::Inventory inv = ProbeTreeWithNvml(HostDir("nvidia-2x-h100"), "h100", "");
  EXPECT_EQ(FindReport(inv, "nvml"), nullptr);
  EXPECT_EQ(inv.SerializeAsString(), ProbeHost("nvidia-2x-h100").SerializeAsString());
}

TEST(NvmlTest, NotAnNvmlLibraryIsAnError) {
  // The nomig fake lacks only optional functions; a library lacking required ones is libc.
  const v1::Inventory inv = ProbeTreeWithNvml(HostDir("nvidia-2x-h100"), "h100", "libc.so.6");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("libc.so.6 lacks nvmlInit_v2, nvmlShutdown"));
}

TEST(NvmlTest, HostWithoutNvidiaGpuDoesNotLoadTheLibrary) {
  TempDir tmp;
  setenv("FAKE_NVML_LOG", tmp.File("calls").c_str(), 1);
  const v1::Inventory inv = ProbeHostWithNvml("cpu-only", "h100");
  unsetenv("FAKE_NVML_LOG");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(Nvml(inv).message(), "no NVIDIA GPU on the PCI bus");
  EXPECT_EQ(ReadFile(tmp.File("calls")), "");
}

TEST(NvmlTest, DriverNotLoadedIsSkippedWithTheReason) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "driver-not-loaded");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(Nvml(inv).message(), "NVIDIA driver not loaded: nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)");
  EXPECT_TRUE(FindDevice(inv, "0000:18:00.0")->usable());
}

// 12.5: the lost GPU is attributed to its bus id through nvmlDeviceGetHandleByPciBusId_v2.
TEST(NvmlTest, LostGpuIsHealthLostAndTheOtherStaysUsable) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "gpu-lost");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_THAT(Nvml(inv).message(),
              AllOf(HasSubstr("2 NVML devices, 2 matched by bus id, 1 lost"),
                    HasSubstr("NVML device 1: nvmlDeviceGetHandleByIndex_v2: NVML_ERROR_GPU_IS_LOST (15)")));
  const v1::Device* lost = FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "NVML nvmlDeviceGetHandleByPciBusId_v2: NVML_ERROR_GPU_IS_LOST (15)");
  EXPECT_FALSE(lost->usable());
  EXPECT_THAT(lost->unusable_reason(), HasSubstr("GPU_IS_LOST"));
  const v1::Device* ok = FindDevice(inv, "0000:18:00.0");
  EXPECT_EQ(ok->health(), v1::HEALTH_OK);
  EXPECT_TRUE(ok->usable());
  EXPECT_EQ(ok->memory_free_bytes(), 84987740160u);
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_NVIDIA)->state_reason(), "1 of 2 devices usable");
}

TEST(NvmlTest, LostMidwayStopsCallingThatGpuAndKeepsWhatItRead) {
  TempDir tmp;
  setenv("FAKE_NVML_LOG", tmp.File("calls").c_str(), 1);
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "lost-midway");
  unsetenv("FAKE_NVML_LOG");
  const v1::Device* lost = FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "NVML nvmlDeviceGetMemoryInfo: NVML_ERROR_GPU_IS_LOST (15)");
  EXPECT_EQ(lost->uuid(), kUuid2);
  EXPECT_FALSE(lost->has_memory_total_bytes());
  const std::string calls = ReadFile(tmp.File("calls"));
  EXPECT_THAT(calls, HasSubstr("nvmlDeviceGetMemoryInfo 1\n"));
  EXPECT_THAT(calls, Not(HasSubstr("nvmlDeviceGetMigMode 1\n")));
  EXPECT_THAT(calls, HasSubstr("nvmlDeviceGetMigMode 0\n"));
  // nvmlShutdown after a successful init, last.
  EXPECT_THAT(calls, ::testing::EndsWith("nvmlShutdown -\n"));
}

// The fixture where sysfs already sees the GPU gone: both reasons are kept.
TEST(NvmlTest, FellOffTheBusKeepsTheSysfsReasonAndAddsNvmls) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-fell-off-bus", "gpu-lost");
  const v1::Device* lost = FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(),
            "NVIDIA GPU fell off the bus: PCI config space reads 0xffff; "
            "NVML nvmlDeviceGetHandleByPciBusId_v2: NVML_ERROR_GPU_IS_LOST (15)");
  EXPECT_TRUE(FindDevice(inv, "0000:18:00.0")->usable());
}

// 12.6: NVML counts 4 GPUs, the container may open 2.
TEST(NvmlTest, NoPermissionGpusAreNotUsableHere) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-container", "container");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("4 NVML devices, 4 matched by bus id, 2 not accessible"));
  for (const char* bus : {"0000:18:00.0", "0000:9a:00.0"}) {
    const v1::Device* d = FindDevice(inv, bus);
    EXPECT_FALSE(d->usable()) << bus;
    EXPECT_EQ(d->unusable_reason(),
              absl::StrCat("NVML nvmlDeviceGetHandleByPciBusId_v2: NVML_ERROR_NO_PERMISSION (4): this process may "
                           "not use ",
                           bus, " (not visible in this container)"));
    EXPECT_EQ(d->health(), v1::HEALTH_OK);
  }
  for (const char* bus : {"0000:2a:00.0", "0000:ab:00.0"}) {
    const v1::Device* d = FindDevice(inv, bus);
    EXPECT_TRUE(d->usable()) << bus << ": " << d->unusable_reason();
    EXPECT_EQ(d->memory_total_bytes(), kH100Total);
  }
}

TEST(NvmlTest, NoPermissionOnAQueryMakesThatGpuUnusable) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "no-permission");
  const v1::Device* refused = FindDevice(inv, "0000:9a:00.0");
  EXPECT_FALSE(refused->usable());
  EXPECT_EQ(refused->unusable_reason(),
            "NVML nvmlDeviceGetMemoryInfo: NVML_ERROR_NO_PERMISSION (4): this process may not use 0000:9a:00.0 "
            "(not visible in this container)");
  EXPECT_FALSE(refused->has_memory_free_bytes());
  EXPECT_TRUE(FindDevice(inv, "0000:18:00.0")->usable());
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  EXPECT_EQ(cuda->state(), v1::BACKEND_STATE_READY);
  EXPECT_EQ(cuda->state_reason(), "1 of 2 devices usable");
}

TEST(NvmlTest, NotSupportedLeavesTheFieldUnset) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "not-supported");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("CUDA driver version unknown: libcuda.so.1 not found"));
  const v1::Device* no_memory = FindDevice(inv, "0000:18:00.0");
  EXPECT_FALSE(no_memory->has_memory_total_bytes());
  EXPECT_FALSE(no_memory->has_memory_free_bytes());
  EXPECT_EQ(no_memory->uuid(), kUuid1);
  EXPECT_TRUE(no_memory->usable());
  const v1::Device* no_name = FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(no_name->name(), "NVIDIA H100 80GB HBM3");  // the /proc name stays
  EXPECT_EQ(no_name->memory_free_bytes(), 42949672960u);
  EXPECT_THAT(FindRow(inv, v1::ROW_CUDA_NVIDIA)->attributes(), IsEmpty());
}

// 12.4: MIG instances get their MIG- UUIDs, profiles and memory, matched to the capability-file
// partitions by GPU / compute instance id (their device nodes stay).
TEST(NvmlTest, MigInstancesMergedIntoThePartitions) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-mig", "mig");
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("2 MIG devices"));
  const v1::Device* gpu = FindDevice(inv, "0000:07:00.0");
  EXPECT_EQ(gpu->attributes().at("mig_mode"), "enabled");
  ASSERT_EQ(gpu->partitions_size(), 2);
  const v1::Partition& p1 = gpu->partitions(0);
  EXPECT_EQ(p1.uuid(), "MIG-00000000-0000-4000-8000-0000000000a1");
  EXPECT_EQ(p1.gpu_instance_id(), 1u);
  EXPECT_EQ(p1.compute_instance_id(), 0u);
  EXPECT_EQ(p1.profile(), "3g.40gb");
  EXPECT_EQ(p1.memory_total_bytes(), 42144366592u);
  EXPECT_THAT(p1.device_nodes(), ElementsAre("/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"));
  EXPECT_EQ(gpu->partitions(1).uuid(), "MIG-00000000-0000-4000-8000-0000000000a2");
  EXPECT_EQ(gpu->partitions(1).gpu_instance_id(), 2u);
  const v1::Device* other = FindDevice(inv, "0000:87:00.0");
  EXPECT_EQ(other->attributes().at("mig_mode"), "disabled");
  EXPECT_THAT(other->partitions(), IsEmpty());
}

TEST(NvmlTest, ProcessesComputeModeAndMemoryInUseBecomeTheDevicesUsage) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "shared");
  const v1::Device* shared = FindDevice(inv, "0000:9a:00.0");
  const v1::DeviceUsage& u = shared->usage();
  EXPECT_EQ(u.source(), "nvml");
  EXPECT_TRUE(u.processes_known());
  EXPECT_EQ(u.process_count(), 3u);
  EXPECT_EQ(u.memory_used_bytes(), 85520809984u - 42949672960u);  // total - free, as the memory figures
  EXPECT_EQ(u.compute_mode(), v1::DEVICE_USAGE_COMPUTE_MODE_DEFAULT);
  EXPECT_FALSE(u.busy());
  ASSERT_EQ(u.processes_size(), 3);  // by pid; both lists merged
  EXPECT_EQ(u.processes(0).pid(), 77u);
  EXPECT_EQ(u.processes(0).kind(), v1::DEVICE_USAGE_PROCESS_KIND_GRAPHICS);
  EXPECT_EQ(u.processes(1).pid(), 4242u);
  EXPECT_EQ(u.processes(1).used_memory_bytes(), 21474836480u);
  EXPECT_EQ(u.processes(2).kind(), v1::DEVICE_USAGE_PROCESS_KIND_COMPUTE_AND_GRAPHICS);
  EXPECT_FALSE(u.processes(1).has_uid());  // no /proc/4242 in the fixture tree
  // Exclusive-process mode with a process: busy; its memory NVML cannot tell is absent, not 0.
  const v1::DeviceUsage& exclusive = FindDevice(inv, "0000:18:00.0")->usage();
  EXPECT_EQ(exclusive.compute_mode(), v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS);
  EXPECT_TRUE(exclusive.busy());
  ASSERT_EQ(exclusive.processes_size(), 1);
  EXPECT_FALSE(exclusive.processes(0).has_used_memory_bytes());
}

TEST(NvmlTest, ProcessOwnersComeFromTheHostsProc) {
  ScratchHost host("nvidia-2x-h100");
  host.Write("proc/4242/status", "Name:\tpython\nUid:\t1001\t1001\t1001\t1001\nGid:\t100\t100\t100\t100\n");
  const v1::Inventory inv = ProbeTreeWithNvml(host.dir(), "shared");
  const v1::DeviceUsage& u = FindDevice(inv, "0000:9a:00.0")->usage();
  ASSERT_EQ(u.processes_size(), 3);
  EXPECT_EQ(u.processes(1).pid(), 4242u);
  EXPECT_EQ(u.processes(1).uid(), 1001u);
  EXPECT_FALSE(u.processes(2).has_uid());
}

TEST(NvmlTest, MigProcessesAreCountedInTheirInstance) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-mig", "mig-shared");
  const v1::Device* gpu = FindDevice(inv, "0000:07:00.0");
  EXPECT_EQ(gpu->usage().process_count(), 1u);
  ASSERT_EQ(gpu->partitions_size(), 2);
  EXPECT_EQ(gpu->partitions(0).usage().process_count(), 0u);
  EXPECT_TRUE(gpu->partitions(0).usage().processes_known());
  EXPECT_EQ(gpu->partitions(1).usage().process_count(), 1u);
  EXPECT_EQ(gpu->partitions(1).usage().processes(0).pid(), 6006u);
  EXPECT_EQ(gpu->partitions(1).usage().memory_used_bytes(), 42144366592u - 31070624768u);
  EXPECT_EQ(FindDevice(inv, "0000:87:00.0")->usage().process_count(), 0u);
}

TEST(NvmlTest, MigInstancesWithoutCapabilityFilesAreAdded) {
  ScratchHost host("nvidia-mig");
  host.Remove("proc/driver/nvidia-caps");
  host.Remove("proc/driver/nvidia/capabilities");
  EXPECT_THAT(FindDevice(ProbeTree(host.dir()), "0000:07:00.0")->partitions(), IsEmpty());
  const v1::Inventory inv = ProbeTreeWithNvml(host.dir(), "mig");
  const v1::Device* gpu = FindDevice(inv, "0000:07:00.0");
  ASSERT_EQ(gpu->partitions_size(), 2);
  EXPECT_EQ(gpu->partitions(1).uuid(), "MIG-00000000-0000-4000-8000-0000000000a2");
  EXPECT_EQ(gpu->partitions(1).gpu_instance_id(), 2u);
  EXPECT_EQ(gpu->partitions(1).profile(), "3g.40gb");
  EXPECT_THAT(gpu->partitions(1).device_nodes(), IsEmpty());
}

TEST(NvmlTest, LibraryWithoutMigFunctionsLosesMigOnly) {
  const v1::Inventory inv = ProbeTreeWithNvml(HostDir("nvidia-mig"), "mig", DEVPLACE_FAKE_NVML_NOMIG);
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_THAT(Nvml(inv).message(),
              HasSubstr("library lacks nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, "
                        "nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetGpuInstanceId, "
                        "nvmlDeviceGetComputeInstanceId"));
  const v1::Device* gpu = FindDevice(inv, "0000:07:00.0");
  EXPECT_EQ(gpu->memory_total_bytes(), 85899345920u);
  EXPECT_EQ(gpu->attributes().count("mig_mode"), 0u);
  ASSERT_EQ(gpu->partitions_size(), 2);  // from the capability files, without UUIDs
  EXPECT_EQ(gpu->partitions(0).uuid(), "");
}

TEST(NvmlTest, NvmlGpuMissingFromThePciScanIsOnlyReported) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "extra-device");
  EXPECT_THAT(Nvml(inv).message(),
              AllOf(HasSubstr("3 NVML devices, 2 matched by bus id"),
                    HasSubstr("NVML GPU 0000:c1:00.0 (device 2) is not an NVIDIA GPU of the PCI scan")));
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_NVIDIA)->devices_size(), 2);
  EXPECT_EQ(FindDevice(inv, "0000:c1:00.0"), nullptr);
}

TEST(NvmlTest, PciGpuMissingFromNvmlIsReported) {
  // The container script without 9A:00.0 and 18:00.0's refusals: NVML lists two GPUs only.
  TempDir tmp;
  const std::string script = tmp.Write("two.txt", "device 0 bus_id 00000000:2A:00.0\ndevice 1 bus_id 00000000:AB:00.0\n");
  setenv("FAKE_NVML_CONFIG", script.c_str(), 1);
  probe::ProbeOptions options;
  options.nvml_library = DEVPLACE_FAKE_NVML;
  const v1::Inventory inv = probe::ProbeInventory(probe::HostRoot(HostDir("nvidia-container")), options);
  EXPECT_THAT(Nvml(inv).message(), AllOf(HasSubstr("0000:18:00.0 is not listed by NVML"),
                                         HasSubstr("0000:9a:00.0 is not listed by NVML")));
}

TEST(NvmlTest, TwoNvmlDevicesOnOneBusIdKeepTheFirstAndSaySo) {
  TempDir tmp;
  const std::string script = tmp.Write(
      "dup.txt",
      "device 0 bus_id 00000000:18:00.0\ndevice 0 uuid GPU-00000000-0000-4000-8000-000000000001\n"
      "device 1 bus_id 0000:18:00.0\ndevice 1 uuid GPU-00000000-0000-4000-8000-0000000000ff\n"
      "device 2 bus_id 00000000:9A:00.0\ndevice 2 uuid GPU-00000000-0000-4000-8000-000000000002\n");
  setenv("FAKE_NVML_CONFIG", script.c_str(), 1);
  probe::ProbeOptions options;
  options.nvml_library = DEVPLACE_FAKE_NVML;
  const v1::Inventory inv = probe::ProbeInventory(probe::HostRoot(HostDir("nvidia-2x-h100")), options);
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("NVML device 1 repeats bus id 0000:18:00.0; ignored"));
  EXPECT_EQ(FindDevice(inv, "0000:18:00.0")->uuid(), "GPU-00000000-0000-4000-8000-000000000001");
  EXPECT_EQ(FindDevice(inv, "0000:9a:00.0")->uuid(), "GPU-00000000-0000-4000-8000-000000000002");
}

TEST(NvmlTest, SlowCallsWithinTheDeadlineAreOk) {
  const auto start = std::chrono::steady_clock::now();
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "slow");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK);
  EXPECT_EQ(FindDevice(inv, "0000:9a:00.0")->memory_free_bytes(), 42949672960u);
}

// A library that crashes its process (SIGSEGV in nvmlDeviceGetMemoryInfo on the second GPU)
// costs NVML's data only: the report names the signal and the call, the sysfs rows are intact.
TEST(NvmlTest, CrashingCallCostsOnlyNvmlsData) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "crash");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_EQ(Nvml(inv).message(),
            "its process was killed by SIGSEGV (Segmentation fault) in nvmlDeviceGetMemoryInfo (device 1); nothing "
            "of nvml merged");
  const v1::Device* first = FindDevice(inv, "0000:18:00.0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name(), "NVIDIA H100 80GB HBM3");  // the /proc name, not NVML's
  EXPECT_FALSE(first->has_memory_total_bytes());
  EXPECT_FALSE(first->has_memory_free_bytes());
  EXPECT_TRUE(first->usable());
  ASSERT_NE(FindDevice(inv, "0000:9a:00.0"), nullptr);
  EXPECT_TRUE(FindDevice(inv, "0000:9a:00.0")->usable());
  EXPECT_EQ(FindReport(inv, "pci")->status(), v1::PROBE_STATUS_OK);
}

TEST(NvmlUnitTest, NamesAndFormats) {
  EXPECT_EQ(probe::NvmlReturnName(15), "NVML_ERROR_GPU_IS_LOST (15)");
  EXPECT_EQ(probe::NvmlReturnName(4), "NVML_ERROR_NO_PERMISSION (4)");
  EXPECT_EQ(probe::NvmlReturnName(42), "NVML error 42");
  EXPECT_EQ(probe::MigProfile("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), "3g.40gb");
  EXPECT_EQ(probe::MigProfile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"), "1g.10gb+me");
  EXPECT_EQ(probe::MigProfile("NVIDIA A100-SXM4-80GB"), "");
  EXPECT_EQ(probe::CudaVersionString(12040), "12.4");
  EXPECT_EQ(probe::CudaVersionString(11080), "11.8");
  EXPECT_EQ(probe::CudaVersionString(12000), "12.0");
  probe::VendorCall call;
  EXPECT_EQ(call.Describe(), "no call yet");
  call.Enter("nvmlInit_v2");
  EXPECT_EQ(call.Describe(), "nvmlInit_v2");
}

// ---- goldens ----

struct GoldenCase {
  const char* name;    // tests/golden/nvml/<name>.json
  const char* host;    // tests/fixtures/hosts/<host>
  const char* script;  // tests/fixtures/nvml/<script>.txt
};

const GoldenCase kGoldenCases[] = {
    {"2x-h100", "nvidia-2x-h100", "h100"},
    {"mig", "nvidia-mig", "mig"},
    {"gpu-lost", "nvidia-2x-h100", "gpu-lost"},
    {"fell-off-bus", "nvidia-fell-off-bus", "gpu-lost"},
    {"container", "nvidia-container", "container"},
    {"shared", "nvidia-2x-h100", "shared"},
};

class NvmlGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(NvmlGoldenTest, MatchesGoldenJson) {
  const GoldenCase& c = GetParam();
  ExpectMatchesGolden(ProbeHostWithNvml(c.host, c.script), std::string(DEVPLACE_NVML_GOLDEN_DIR) + "/" + c.name + ".json",
                      std::string("inventory of ") + c.host + " with NVML script " + c.script);
}

INSTANTIATE_TEST_SUITE_P(Cases, NvmlGoldenTest, ::testing::ValuesIn(kGoldenCases),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) ch = (ch == '-') ? '_' : ch;
                           return name;
                         });

TEST(NvmlGoldenCoverageTest, EveryGoldenHasACase) {
  if (UpdateGoldens()) return;
  std::set<std::string> cases, goldens;
  for (const GoldenCase& c : kGoldenCases) cases.insert(c.name);
  for (const auto& entry : std::filesystem::directory_iterator(DEVPLACE_NVML_GOLDEN_DIR)) {
    goldens.insert(entry.path().stem().string());
  }
  EXPECT_EQ(goldens, cases);
}

}  // namespace
}  // namespace devplace::testing
