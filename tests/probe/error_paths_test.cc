// Probers on modified copies of fixture hosts: failures are reported per prober while the rest
// of the inventory still comes out, and state/health rules not covered by a fixture as-is.
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/host/prober.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ErrorPathsTest, MalformedPciIdIsAnErrorButOtherDevicesRemain) {
  ScratchHost host("nvidia-2x-h100");
  host.Write("sys/bus/pci/devices/0000:18:00.0/vendor", "garbage\n");
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::ProbeReport* pci = FindReport(inv, "pci");
  ASSERT_NE(pci, nullptr);
  EXPECT_EQ(pci->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(pci->message(), HasSubstr("0000:18:00.0/vendor"));
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 1);
  EXPECT_EQ(cuda->devices(0).pci_bus_id(), "0000:9a:00.0");
  EXPECT_EQ(cuda->devices(0).host_index(), 0u);
  EXPECT_TRUE(cuda->devices(0).usable());
  // The nvidia_proc prober meets a /proc entry for a GPU the scan could not read.
  EXPECT_EQ(FindReport(inv, "nvidia_proc")->status(), v1::PROBE_STATUS_ERROR);
}

TEST(ErrorPathsTest, InvalidUtf8InHostFilesStillSerializes) {
  ScratchHost host("nvidia-2x-h100");
  host.Write("proc/sys/kernel/hostname", "h\xffst\n");
  host.Write("proc/driver/nvidia/gpus/0000:18:00.0/information",
             "Model: \t\t NVIDIA \xe2\x82 H100\nGPU UUID: \t GPU-00000000-0000-4000-8000-000000000001\n"
             "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n");
  host.Write("sys/bus/pci/devices/0000:9a:00.0/numa_node", "-5\n");
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(inv.host().hostname(), "h?st");
  EXPECT_EQ(FindDevice(inv, "0000:18:00.0")->name(), "NVIDIA ?? H100");
  EXPECT_EQ(FindDevice(inv, "0000:9a:00.0")->numa_node(), -1);
  std::string bytes;
  ASSERT_TRUE(inv.SerializeToString(&bytes));
  v1::Inventory back;
  EXPECT_TRUE(back.ParseFromString(bytes));
  EXPECT_EQ(back.host().hostname(), "h?st");
}

TEST(ErrorPathsTest, MissingCpuinfoIsAnErrorButAcceleratorsRemain) {
  ScratchHost host("nvidia-2x-h100");
  host.Remove("proc/cpuinfo");
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(FindReport(inv, "cpu")->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(FindReport(inv, "cpu")->message(), HasSubstr("cpuinfo"));
  EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU);
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_NVIDIA)->devices_size(), 2);
  EXPECT_EQ(FindReport(inv, "memory")->status(), v1::PROBE_STATUS_OK);
}

TEST(ErrorPathsTest, EmptyRootSkipsOrFailsEveryProber) {
  ScratchHost host("cpu-only");
  host.Remove("proc");
  host.Remove("sys");
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(inv.backends_size(), 1);
  EXPECT_EQ(FindReport(inv, "pci")->status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(FindReport(inv, "numa")->status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(FindReport(inv, "memory")->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(FindReport(inv, "host")->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(inv.probe_reports_size(), 16);
}

// On a real host /sys/bus/pci/devices/<bdf> are links into /sys/devices/pci*/.
TEST(ErrorPathsTest, FollowsPciDeviceLinks) {
  ScratchHost host("nvidia-2x-h100");
  namespace fs = std::filesystem;
  const std::string devices = host.Path("sys/bus/pci/devices");
  fs::create_directories(host.Path("sys/devices/pci0000:00"));
  for (const char* bdf : {"0000:05:00.0", "0000:18:00.0", "0000:9a:00.0"}) {
    fs::rename(devices + "/" + bdf, host.Path("sys/devices/pci0000:00/") + bdf);
    fs::create_symlink(std::string("../../../devices/pci0000:00/") + bdf, devices + "/" + bdf);
  }
  const v1::Inventory linked = ProbeTree(host.dir());
  EXPECT_EQ(FindReport(linked, "pci")->status(), v1::PROBE_STATUS_OK);
  const v1::Backend* cuda = FindRow(linked, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 2);
  EXPECT_EQ(cuda->devices(1).driver(), "nvidia");
  EXPECT_EQ(cuda->devices(1).numa_node(), 1);
  EXPECT_TRUE(cuda->devices(1).usable());
}

TEST(ErrorPathsTest, MissingNodeNamedInReason) {
  ScratchHost host("nvidia-2x-h100");
  host.Remove("dev/nvidia0");
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::Device* d = FindDevice(inv, "0000:18:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->device_nodes_present());
  EXPECT_EQ(d->unusable_reason(), "device node /dev/nvidia0 missing (not visible in this container)");
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_NVIDIA)->state(), v1::BACKEND_STATE_READY);
}

// The NVIDIA row's state and state reason on a modified host.
void ExpectNvidiaState(const ScratchHost& host, v1::BackendState state, const std::string& reason_part) {
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->state(), state);
  EXPECT_THAT(cuda->state_reason(), HasSubstr(reason_part));
}

TEST(ErrorPathsTest, NoNodesAtAllIsNoDeviceNodes) {
  ScratchHost host("nvidia-2x-h100");
  host.Remove("dev");
  ExpectNvidiaState(host, v1::BACKEND_STATE_NO_DEVICE_NODES, "not visible in this container");
}

TEST(ErrorPathsTest, EveryGpuLostIsUnusable) {
  ScratchHost host("nvidia-fell-off-bus");
  host.Write("sys/bus/pci/devices/0000:18:00.0/config", std::string(64, '\xff'));
  ExpectNvidiaState(host, v1::BACKEND_STATE_UNUSABLE, "fell off the bus");
}

TEST(ErrorPathsTest, GaudiNeedingResetIsFault) {
  ScratchHost host("hpu-2x-gaudi2");
  host.Write("sys/bus/pci/devices/0000:9a:00.0/status", "needs reset\n");
  const v1::Inventory inv = ProbeTree(host.dir());
  const v1::Device* d = FindDevice(inv, "0000:9a:00.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(d->usable());
  EXPECT_THAT(d->unusable_reason(), HasSubstr("reports status \"needs reset\""));
  EXPECT_EQ(FindDevice(inv, "0000:33:00.0")->health(), v1::HEALTH_OK);
  EXPECT_EQ(FindRow(inv, v1::ROW_HPU)->state_reason(), "1 of 2 devices usable");
}

TEST(ErrorPathsTest, UnreadableNeuronCoreCountFallsBackToArchDefault) {
  ScratchHost host("neuron-2x-trn1");
  host.Remove("sys/class/neuron_device/neuron1/core_count");
  const v1::Inventory d_inv = ProbeTree(host.dir());
  const v1::Device* d = FindDevice(d_inv, "0000:00:1d.0");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->sub_device_count(), 2u);  // Trn1 (7164) is arch v2: 2 NeuronCores
}

TEST(ErrorPathsTest, MoreNeuronDevicesThanPciFunctionsIsReported) {
  ScratchHost host("neuron-2x-trn1");
  host.Write("sys/class/neuron_device/neuron2/core_count", "2");
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(FindReport(inv, "neuron")->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(FindReport(inv, "neuron")->message(), HasSubstr("neuron2 has no matching neuron PCI function"));
  EXPECT_EQ(FindRow(inv, v1::ROW_NEURON)->devices_size(), 2);
}

TEST(ErrorPathsTest, IntelTilesCountedWhenMoreThanOne) {
  ScratchHost host("xpu-2x-arc");
  host.Write("sys/bus/pci/devices/0000:07:00.0/tile0/id", "0\n");  // xe layout: device/tile<k>
  host.Write("sys/bus/pci/devices/0000:07:00.0/tile1/id", "1\n");
  host.Write("sys/class/drm/card1/gt/gt1/id", "1\n");  // i915 layout: card/gt/gt<k>
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(FindDevice(inv, "0000:03:00.0")->sub_device_count(), 2u);
  EXPECT_EQ(FindDevice(inv, "0000:07:00.0")->sub_device_count(), 2u);
  EXPECT_EQ(FindDevice(inv, "0000:00:02.0")->sub_device_count(), 0u);
}

TEST(ErrorPathsTest, MalformedMigMinorsIsAnError) {
  ScratchHost host("nvidia-mig");
  host.Write("proc/driver/nvidia-caps/mig-minors", "config 1\ngpu0/gi1/access\n");
  const v1::Inventory inv = ProbeTree(host.dir());
  EXPECT_EQ(FindReport(inv, "nvidia_proc")->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(FindReport(inv, "nvidia_proc")->message(), HasSubstr("bad mig-minors line"));
  EXPECT_EQ(FindDevice(inv, "0000:07:00.0")->name(), "NVIDIA A100-SXM4-80GB");  // the rest is kept
}

TEST(ErrorPathsTest, NvidiaVersionFallsBackToModuleVersion) {
  ScratchHost host("nvidia-2x-h100");
  host.Remove("proc/driver/nvidia/version");
  host.Write("sys/module/nvidia/version", "550.99.1\n");
  EXPECT_EQ(FindRow(ProbeTree(host.dir()), v1::ROW_CUDA_NVIDIA)->driver_version(), "550.99.1");
}

TEST(ErrorPathsTest, TpuV4UsesAccelNodes) {
  ScratchHost host("tpu-2x-v5e");
  for (const char* bdf : {"0000:00:04.0", "0000:00:05.0"}) {
    const std::string dir = std::string("sys/bus/pci/devices/") + bdf;
    host.Write(dir + "/device", "0x005e\n");
    host.Remove(dir + "/driver");
    std::filesystem::create_symlink("../../../bus/pci/drivers/tpu_v4", host.Path(dir + "/driver"));
  }
  host.Write("dev/accel0", "");
  host.Write("dev/accel1", "");
  const v1::Inventory tpu_inv = ProbeTree(host.dir());
  const v1::Backend* tpu = FindRow(tpu_inv, v1::ROW_TPU);
  ASSERT_NE(tpu, nullptr);
  EXPECT_EQ(tpu->devices(1).attributes().at("tpu_version"), "v4");
  EXPECT_EQ(tpu->devices(1).memory_total_bytes(), 32ull << 30);
  EXPECT_THAT(tpu->devices(1).device_nodes(), ElementsAre("/dev/accel1"));
  EXPECT_TRUE(tpu->devices(1).usable());
}

// A prober that runs out of memory (std::bad_alloc, as under the probe's address-space cap) is
// reported RESOURCE_EXHAUSTED, and the probers after it still run.
TEST(ErrorPathsTest, AProberOutOfMemoryIsReportedAndTheRestRun) {
  const std::vector<probe::Prober> probers = {
      {"greedy", [](const probe::HostRoot&, probe::HostFacts&) -> absl::StatusOr<probe::ProbeOutcome> {
         throw std::bad_alloc();
       }},
      {"after", [](const probe::HostRoot&, probe::HostFacts&) -> absl::StatusOr<probe::ProbeOutcome> {
         return probe::Found("ran");
       }}};
  const probe::ProbeRun run = probe::RunProbers(probe::HostRoot(HostDir("cpu-only")), probers);
  ASSERT_EQ(run.reports.size(), 2u);
  EXPECT_EQ(run.reports[0].status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(run.reports[0].message(), "ran out of memory (the probe's address-space cap); not read");
  EXPECT_EQ(run.reports[1].status(), v1::PROBE_STATUS_OK);
  EXPECT_EQ(probe::RunningHostProber(), "");
}

}  // namespace
}  // namespace devplace::testing
