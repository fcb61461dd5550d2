// Explicit checks of DETECTION.md's tricky cases and decoys on the fixture hosts (the goldens
// pin everything; these say what matters and why).
#include <string>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

int UsableCount(const v1::Backend& b) {
  int n = 0;
  for (const v1::Device& d : b.devices()) n += d.usable();
  return n;
}

std::vector<std::string> BusIds(const v1::Backend& b) {
  std::vector<std::string> ids;
  for (const v1::Device& d : b.devices()) ids.push_back(d.pci_bus_id());
  return ids;
}

TEST(TrickyCasesTest, CpuRowAlwaysFirstAndBackendsSortedByRow) {
  for (const char* host : {"cpu-only", "mixed-nvidia-amd-igpu", "nvidia-driver-not-loaded", "xpu-2x-arc"}) {
    const v1::Inventory inv = ProbeHost(host);
    ASSERT_GE(inv.backends_size(), 1) << host;
    EXPECT_EQ(inv.backends(0).row(), v1::ROW_CPU) << host;
    EXPECT_EQ(inv.backends(0).state(), v1::BACKEND_STATE_READY) << host;
    EXPECT_THAT(inv.backends(0).devices(), IsEmpty()) << host;
    for (int i = 1; i < inv.backends_size(); ++i) {
      EXPECT_LT(inv.backends(i - 1).row(), inv.backends(i).row()) << host;
    }
  }
}

// 12.6: /sys shows all four GPUs, /dev and /proc only the two the toolkit passed in.
TEST(TrickyCasesTest, ContainerSeesTwoUsableOfFour) {
  const v1::Inventory inv = ProbeHost("nvidia-container");
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 4);
  EXPECT_EQ(UsableCount(*cuda), 2);
  EXPECT_EQ(cuda->state(), v1::BACKEND_STATE_READY);
  EXPECT_EQ(cuda->state_reason(), "2 of 4 devices usable");
  EXPECT_TRUE(cuda->devices(1).usable());
  EXPECT_THAT(cuda->devices(1).device_nodes(), ElementsAre("/dev/nvidia1"));
  EXPECT_TRUE(cuda->devices(3).usable());
  EXPECT_THAT(cuda->devices(3).device_nodes(), ElementsAre("/dev/nvidia3"));
  for (int i : {0, 2}) {
    const v1::Device& d = cuda->devices(i);
    EXPECT_FALSE(d.usable());
    EXPECT_TRUE(d.driver_loaded());
    EXPECT_FALSE(d.device_nodes_present());
    EXPECT_THAT(d.unusable_reason(), HasSubstr("not visible in this container"));
  }
}

// 12.5: config space reads 0xffff for 9a:00.0; its /proc information is gone.
TEST(TrickyCasesTest, FellOffTheBusIsHealthLost) {
  const v1::Inventory inv = ProbeHost("nvidia-fell-off-bus");
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  int lost = 0;
  for (const v1::Device& d : cuda->devices()) lost += d.health() == v1::HEALTH_LOST;
  EXPECT_EQ(lost, 1);
  const v1::Device* gone = FindDevice(inv, "0000:9a:00.0");
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->health(), v1::HEALTH_LOST);
  EXPECT_FALSE(gone->usable());
  EXPECT_THAT(gone->unusable_reason(), HasSubstr("GPU fell off the bus: PCI config space reads 0xffff"));
  EXPECT_EQ(FindDevice(inv, "0000:18:00.0")->health(), v1::HEALTH_OK);
  EXPECT_EQ(UsableCount(*cuda), 1);
}

// 12.1: GPUs on the bus, no nvidia driver bound (one unbound, one bound to vfio-pci).
TEST(TrickyCasesTest, DriverNotLoaded) {
  const v1::Inventory inv = ProbeHost("nvidia-driver-not-loaded");
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->state(), v1::BACKEND_STATE_DRIVER_NOT_LOADED);
  EXPECT_THAT(cuda->state_reason(), HasSubstr("install/load the nvidia kernel module"));
  EXPECT_EQ(cuda->driver_version(), "");
  EXPECT_EQ(cuda->devices(0).unusable_reason(),
            "driver not loaded: no driver bound to 0000:18:00.0 (install/load the nvidia kernel module)");
  EXPECT_EQ(cuda->devices(1).driver(), "vfio-pci");
  EXPECT_FALSE(cuda->devices(1).driver_loaded());
  EXPECT_THAT(cuda->devices(1).unusable_reason(), HasSubstr("is bound to vfio-pci, not nvidia"));
  EXPECT_EQ(FindReport(inv, "nvidia_proc")->status(), v1::PROBE_STATUS_SKIPPED);
}

// 12.4: MIG instances from the capability dirs and mig-minors (no NVML: no UUIDs).
TEST(TrickyCasesTest, MigPartitionsListed) {
  const v1::Inventory inv = ProbeHost("nvidia-mig");
  const v1::Device* gpu0 = FindDevice(inv, "0000:07:00.0");
  ASSERT_NE(gpu0, nullptr);
  ASSERT_EQ(gpu0->partitions_size(), 2);
  EXPECT_EQ(gpu0->partitions(0).gpu_instance_id(), 1u);
  EXPECT_EQ(gpu0->partitions(0).compute_instance_id(), 0u);
  EXPECT_THAT(gpu0->partitions(0).device_nodes(),
              ElementsAre("/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"));
  EXPECT_EQ(gpu0->partitions(1).gpu_instance_id(), 2u);
  EXPECT_THAT(gpu0->partitions(1).device_nodes(),
              ElementsAre("/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"));
  EXPECT_EQ(gpu0->partitions(0).uuid(), "");
  EXPECT_THAT(FindDevice(inv, "0000:87:00.0")->partitions(), IsEmpty());
}

// Decoys that share a vendor id with an accelerator are not classified.
TEST(TrickyCasesTest, DecoysNotClassified) {
  EXPECT_EQ(FindDevice(ProbeHost("nvidia-2x-h100"), "0000:05:00.0"), nullptr);  // NVSwitch 0680
  const v1::Inventory neuron = ProbeHost("neuron-2x-trn1");
  EXPECT_EQ(FindDevice(neuron, "0000:00:05.0"), nullptr);  // ENA
  EXPECT_EQ(FindDevice(neuron, "0000:00:1f.0"), nullptr);  // NVMe
  EXPECT_THAT(BusIds(*FindRow(neuron, v1::ROW_NEURON)), ElementsAre("0000:00:1c.0", "0000:00:1d.0"));
  EXPECT_EQ(FindDevice(ProbeHost("tpu-2x-v5e"), "0000:00:06.0"), nullptr);   // gVNIC
  EXPECT_EQ(FindDevice(ProbeHost("npu-2x-910b"), "0000:75:00.0"), nullptr);  // HiSilicon ZIP
  const v1::Inventory hpu = ProbeHost("hpu-2x-gaudi2");
  EXPECT_EQ(FindDevice(hpu, "0000:00:0b.0"), nullptr);  // Intel NPU behind /sys/class/accel/accel2
  EXPECT_THAT(FindReport(hpu, "hpu")->message(), HasSubstr("1 other accel devices"));
  EXPECT_EQ(hpu.backends_size(), 2);
}

// GPU audio functions (.1, Moore Threads *ff, Intel DG2 audio) are excluded.
TEST(TrickyCasesTest, AudioFunctionsExcluded) {
  const v1::Inventory mixed = ProbeHost("mixed-nvidia-amd-igpu");
  EXPECT_EQ(FindDevice(mixed, "0000:01:00.1"), nullptr);
  EXPECT_EQ(FindDevice(mixed, "0000:0e:00.1"), nullptr);
  EXPECT_THAT(BusIds(*FindRow(ProbeHost("musa-2x-s4000"), v1::ROW_MUSA)), ElementsAre("0000:2a:00.0", "0000:3a:00.0"));
  EXPECT_EQ(FindDevice(ProbeHost("xpu-2x-arc"), "0000:04:00.0"), nullptr);
}

// 12.3: the UHD 770 iGPU is present, integrated and not a torch xpu target.
TEST(TrickyCasesTest, XpuIgpuNotSupported) {
  const v1::Inventory inv = ProbeHost("xpu-2x-arc");
  const v1::Backend* xpu = FindRow(inv, v1::ROW_XPU);
  ASSERT_NE(xpu, nullptr);
  ASSERT_EQ(xpu->devices_size(), 3);
  const v1::Device& igpu = xpu->devices(0);
  EXPECT_EQ(igpu.pci_bus_id(), "0000:00:02.0");
  EXPECT_FALSE(igpu.supported());
  EXPECT_TRUE(igpu.integrated());
  EXPECT_FALSE(igpu.usable());
  EXPECT_THAT(igpu.unusable_reason(), HasSubstr("not supported by PyTorch's xpu backend"));
  for (int i : {1, 2}) {
    EXPECT_TRUE(xpu->devices(i).supported());
    EXPECT_FALSE(xpu->devices(i).integrated());
    EXPECT_TRUE(xpu->devices(i).usable());
    EXPECT_EQ(xpu->devices(i).memory_total_bytes(), 17095983104u);
  }
  EXPECT_THAT(xpu->devices(1).device_nodes(), ElementsAre("/dev/dri/card1", "/dev/dri/renderD129"));
  EXPECT_EQ(xpu->driver_version(), "6.1.0-18-amd64");  // in-tree i915: kernel release
}

// 12.2: the AMD iGPU is reported as integrated next to the NVIDIA dGPU; NVIDIA lists no DRM nodes.
TEST(TrickyCasesTest, AmdIgpuNextToNvidiaDgpu) {
  const v1::Inventory inv = ProbeHost("mixed-nvidia-amd-igpu");
  const v1::Device* nvidia = FindDevice(inv, "0000:01:00.0");
  const v1::Device* igpu = FindDevice(inv, "0000:0e:00.0");
  ASSERT_NE(nvidia, nullptr);
  ASSERT_NE(igpu, nullptr);
  EXPECT_FALSE(nvidia->integrated());
  EXPECT_THAT(nvidia->device_nodes(), ElementsAre("/dev/nvidia0"));
  EXPECT_TRUE(igpu->integrated());
  EXPECT_THAT(igpu->device_nodes(), ElementsAre("/dev/dri/renderD129"));
  EXPECT_EQ(igpu->attributes().at("gfx_target_version"), "gfx1036");
  EXPECT_EQ(igpu->memory_total_bytes(), 536870912u);
}

TEST(TrickyCasesTest, AmdMi210FromKfdAndSysfs) {
  const v1::Inventory inv = ProbeHost("amd-2x-mi210");
  const v1::Backend* amd = FindRow(inv, v1::ROW_CUDA_AMD);
  ASSERT_NE(amd, nullptr);
  ASSERT_EQ(amd->devices_size(), 2);
  const v1::Device& d = amd->devices(0);
  EXPECT_EQ(d.name(), "AMD Instinct MI210");
  EXPECT_EQ(d.attributes().at("gfx_target_version"), "gfx90a");
  EXPECT_EQ(d.memory_total_bytes(), 68702699520u);
  EXPECT_EQ(d.memory_free_bytes(), 68702699520u - 11071488u);
  EXPECT_THAT(d.device_nodes(), ElementsAre("/dev/dri/renderD128"));
  EXPECT_THAT(amd->devices(1).device_nodes(), ElementsAre("/dev/dri/renderD129"));
  EXPECT_EQ(amd->devices(1).numa_node(), 1);
  EXPECT_EQ(d.uuid(), "GPU-0de0b6b3a7640001");
}

TEST(TrickyCasesTest, NeuronCoresAndNodes) {
  const v1::Inventory neuron_inv = ProbeHost("neuron-2x-trn1");
  const v1::Backend* neuron = FindRow(neuron_inv, v1::ROW_NEURON);
  ASSERT_NE(neuron, nullptr);
  for (int i : {0, 1}) {
    const v1::Device& d = neuron->devices(i);
    EXPECT_EQ(d.sub_device_count(), 2u);  // core_count "2" without a trailing newline
    EXPECT_EQ(d.name(), "Trainium1");
    EXPECT_EQ(d.numa_node(), -1);
    EXPECT_EQ(d.attributes().at("arch_type"), "NDv2");
    EXPECT_THAT(d.device_nodes(), ElementsAre("/dev/neuron" + std::to_string(i)));
  }
  EXPECT_EQ(neuron->driver_version(), "2.24.7.0");
}

TEST(TrickyCasesTest, TpuV5eThroughVfio) {
  const v1::Inventory tpu_inv = ProbeHost("tpu-2x-v5e");
  const v1::Backend* tpu = FindRow(tpu_inv, v1::ROW_TPU);
  ASSERT_NE(tpu, nullptr);
  ASSERT_EQ(tpu->devices_size(), 2);
  EXPECT_EQ(tpu->devices(0).attributes().at("tpu_version"), "v5e");
  EXPECT_EQ(tpu->devices(0).memory_total_bytes(), 16ull << 30);
  EXPECT_THAT(tpu->devices(0).device_nodes(), ElementsAre("/dev/vfio/0"));
  EXPECT_THAT(tpu->devices(1).device_nodes(), ElementsAre("/dev/vfio/1"));
  EXPECT_EQ(tpu->state(), v1::BACKEND_STATE_READY);
}

TEST(TrickyCasesTest, GaudiFromAccelClass) {
  const v1::Inventory hpu_inv = ProbeHost("hpu-2x-gaudi2");
  const v1::Backend* hpu = FindRow(hpu_inv, v1::ROW_HPU);
  ASSERT_NE(hpu, nullptr);
  ASSERT_EQ(hpu->devices_size(), 2);
  EXPECT_EQ(hpu->devices(1).name(), "GAUDI2");
  EXPECT_EQ(hpu->devices(1).attributes().at("module_id"), "1");
  EXPECT_THAT(hpu->devices(1).device_nodes(), ElementsAre("/dev/accel/accel1"));
  EXPECT_EQ(hpu->driver_version(), "1.17.0-ee32e42");
}

TEST(TrickyCasesTest, NodesAssignedInBusOrder) {
  const v1::Inventory npu_inv = ProbeHost("npu-2x-910b");
  const v1::Backend* npu = FindRow(npu_inv, v1::ROW_NPU);
  ASSERT_NE(npu, nullptr);
  EXPECT_THAT(npu->devices(1).device_nodes(), ElementsAre("/dev/davinci1"));
  const v1::Inventory musa_inv = ProbeHost("musa-2x-s4000");
  const v1::Backend* musa = FindRow(musa_inv, v1::ROW_MUSA);
  ASSERT_NE(musa, nullptr);
  EXPECT_THAT(musa->devices(1).device_nodes(), ElementsAre("/dev/mtgpu.1", "/dev/dri/renderD129"));
  const v1::Inventory mlu_inv = ProbeHost("mlu-2x-mlu370");
  const v1::Backend* mlu = FindRow(mlu_inv, v1::ROW_MLU);
  ASSERT_NE(mlu, nullptr);
  EXPECT_THAT(mlu->devices(1).device_nodes(), ElementsAre("/dev/cambricon_dev1"));
  EXPECT_EQ(mlu->driver_version(), "v5.10.22");
}

TEST(TrickyCasesTest, CpuOnlyXeon) {
  const v1::Inventory inv = ProbeHost("cpu-only");
  ASSERT_EQ(inv.backends_size(), 1);
  const v1::Cpu& cpu = inv.host().cpu();
  EXPECT_EQ(cpu.sockets(), 2u);
  EXPECT_EQ(cpu.cores(), 4u);
  EXPECT_EQ(cpu.threads(), 8u);
  EXPECT_EQ(cpu.torch_cpu_capability(), "AVX512");
  EXPECT_THAT(cpu.isa_flags(), ::testing::IsSupersetOf({"amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512f"}));
  ASSERT_EQ(inv.host().numa_nodes_size(), 2);
  EXPECT_EQ(inv.host().numa_nodes(1).cpulist(), "2-3,6-7");
  EXPECT_EQ(inv.host().numa_nodes(1).memory_total_bytes(), 65536000ull * 1024);
  EXPECT_EQ(inv.host().memory_total_bytes(), 131072000ull * 1024);
  EXPECT_EQ(inv.host().hostname(), "cpu-only");
}

TEST(TrickyCasesTest, Arm64CpuWithMemoryOnlyNode) {
  const v1::Inventory inv = ProbeHost("arm64-cpu");
  const v1::Cpu& cpu = inv.host().cpu();
  EXPECT_EQ(cpu.architecture(), "aarch64");
  EXPECT_EQ(cpu.model_name(), "");
  EXPECT_THAT(cpu.isa_flags(), ElementsAre("asimd", "bf16", "i8mm", "sve", "sve2"));
  EXPECT_EQ(cpu.torch_cpu_capability(), "SVE256");
  ASSERT_EQ(inv.host().numa_nodes_size(), 2);
  EXPECT_EQ(inv.host().numa_nodes(1).cpulist(), "");
  EXPECT_GT(inv.host().numa_nodes(1).memory_total_bytes(), 0u);
}

// I-BOUND's last guard: devices a vendor prober added past the pci prober's bound (here 300 per
// row for five rows, straight in the facts) are dropped by BuildInventory, 256 per row and 1024 in
// all (the fifth row keeps none and is left out), with a report that says so; a report's message
// is cut at 4 KiB.
TEST(TrickyCasesTest, BuildInventoryBoundsDevicesPerRowAndInAll) {
  probe::ProbeRun run;
  const v1::Row rows[] = {v1::ROW_CUDA_NVIDIA, v1::ROW_CUDA_AMD, v1::ROW_NEURON, v1::ROW_XPU, v1::ROW_HPU};
  for (int i = 0; i < 1500; ++i) {
    probe::PciFunction fn;
    fn.row = rows[i / 300];
    fn.device.set_pci_bus_id(absl::StrFormat("%04x:%02x:%02x.%x", i >> 16, (i >> 8) & 0xff, (i >> 3) & 0x1f, i & 7));
    run.facts.pci[fn.device.pci_bus_id()] = fn;
  }
  run.reports.emplace_back().set_message(std::string(10000, 'x'));  // e.g. 10,000 bad /proc entries listed
  const v1::Inventory inv = probe::BuildInventory(run);
  ASSERT_EQ(inv.probe_reports_size(), 2);
  EXPECT_EQ(inv.probe_reports(0).message(), std::string(4096, 'x') + "... (10000 bytes in all)");
  int total = 0;
  for (const v1::Backend& b : inv.backends()) {
    EXPECT_NE(b.row(), v1::ROW_HPU);
    EXPECT_LE(b.devices_size(), probe::kMaxDevicesPerRow) << b.name();
    total += b.devices_size();
  }
  EXPECT_EQ(total, probe::kMaxDevices);
  EXPECT_EQ(inv.probe_reports(1).name(), "device_bound");
  EXPECT_EQ(inv.probe_reports(1).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(inv.probe_reports(1).message(),
            "devices left out of the inventory (at most 256 per row and 1024 in all, the first in PCI bus order): "
            "cuda/nvidia: kept 256 of 300, cuda/amd: kept 256 of 300, neuron: kept 256 of 300, xpu: kept 256 of 300, "
            "hpu: kept 0 of 300");
}

}  // namespace
}  // namespace devplace::testing
