// The hardware table (SEMANTICS.md section 1) and its PCI classification rules.
#include "server/placement/backends.h"

#include "gtest/gtest.h"

namespace devplace::placement {
namespace {

TEST(Backends, TwelveRowsInTableOrderWithTheirDeviceTypes) {
  const v1::ListBackendsResponse t = ListBackendsResponse();
  ASSERT_EQ(t.backends_size(), 12);
  const char* names[] = {"cpu", "cuda/nvidia", "cuda/amd", "neuron", "tpu", "xpu", "mps", "hpu", "npu", "mlu", "musa", "sdaa"};
  const char* types[] = {"cpu", "cuda", "cuda", "neuron", "tpu", "xpu", "mps", "hpu", "npu", "mlu", "musa", "sdaa"};
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(t.backends(i).name(), names[i]);
    EXPECT_EQ(t.backends(i).device_type(), types[i]);
  }
  // device_map="auto" covers every accelerator but neuron and tpu.
  for (const v1::BackendInfo& b : t.backends()) {
    const bool expect = b.row() != v1::ROW_CPU && b.row() != v1::ROW_NEURON && b.row() != v1::ROW_TPU;
    EXPECT_EQ(b.auto_map(), expect) << b.name();
  }
  EXPECT_EQ(t.backends(1).pci_vendor_ids(0), "10de");
  EXPECT_EQ(t.backends(8).package(), "torch-npu");
  // SDAA (docs/SEMANTICS.md "SDAA"): torch_sdaa, SDAA_VISIBLE_DEVICES, no public PCI ids.
  EXPECT_EQ(t.backends(11).row(), v1::ROW_SDAA);
  EXPECT_EQ(t.backends(11).package(), "torch_sdaa");
  ASSERT_EQ(t.backends(11).mask_variables_size(), 1);
  EXPECT_EQ(t.backends(11).mask_variables(0), "SDAA_VISIBLE_DEVICES");
  EXPECT_EQ(t.backends(11).pci_vendor_ids_size(), 0);
}

TEST(Backends, ClassifiesAcceleratorsAndRejectsDecoys) {
  auto row = [](uint16_t v, uint16_t d, uint32_t c) {
    const BackendSpec* s = ClassifyPci(v, d, c);
    return s == nullptr ? v1::ROW_UNSPECIFIED : s->row;
  };
  EXPECT_EQ(row(0x10de, 0x2330, 0x030200), v1::ROW_CUDA_NVIDIA);  // H100
  EXPECT_EQ(row(0x10de, 0x2684, 0x030000), v1::ROW_CUDA_NVIDIA);  // RTX 4090
  EXPECT_EQ(row(0x10de, 0x22a3, 0x068000), v1::ROW_UNSPECIFIED);  // NVSwitch
  EXPECT_EQ(row(0x10de, 0x22ba, 0x040300), v1::ROW_UNSPECIFIED);  // HDMI audio
  EXPECT_EQ(row(0x1002, 0x740f, 0x038000), v1::ROW_CUDA_AMD);     // MI210
  EXPECT_EQ(row(0x1002, 0x74a1, 0x120000), v1::ROW_CUDA_AMD);     // MI300X
  EXPECT_EQ(row(0x1002, 0xab28, 0x040300), v1::ROW_UNSPECIFIED);  // audio
  EXPECT_EQ(row(0x1d0f, 0x7164, 0x088000), v1::ROW_NEURON);       // Trainium1, class 0880
  EXPECT_EQ(row(0x1d0f, 0xec20, 0x020000), v1::ROW_UNSPECIFIED);  // ENA
  EXPECT_EQ(row(0x1ae0, 0x0063, 0x000000), v1::ROW_TPU);          // v5e, no class filter
  EXPECT_EQ(row(0x1ae0, 0x0042, 0x020000), v1::ROW_UNSPECIFIED);  // gVNIC
  EXPECT_EQ(row(0x8086, 0x56a0, 0x030000), v1::ROW_XPU);          // Arc A770
  EXPECT_EQ(row(0x8086, 0x7d1d, 0x120000), v1::ROW_UNSPECIFIED);  // Intel NPU
  EXPECT_EQ(row(0x1da3, 0x1020, 0x120000), v1::ROW_HPU);          // Gaudi2
  EXPECT_EQ(row(0x19e5, 0xd802, 0x120000), v1::ROW_NPU);          // Ascend 910B
  EXPECT_EQ(row(0x19e5, 0xa250, 0x120000), v1::ROW_UNSPECIFIED);  // HiSilicon ZIP
  EXPECT_EQ(row(0xcabc, 0x0370, 0x120000), v1::ROW_MLU);          // MLU370
  EXPECT_EQ(row(0x1ed5, 0x0323, 0x030200), v1::ROW_MUSA);         // S4000
  EXPECT_EQ(row(0x1ed5, 0x03ff, 0x040300), v1::ROW_UNSPECIFIED);  // MTT audio
  EXPECT_EQ(row(0x1022, 0x1502, 0x118000), v1::ROW_UNSPECIFIED);  // AMD XDNA NPU
}

TEST(Backends, TorchSupportAndIntegratedHeuristics) {
  EXPECT_TRUE(IsTorchSupported(v1::ROW_XPU, 0x56a0));   // Arc A770
  EXPECT_TRUE(IsTorchSupported(v1::ROW_XPU, 0x7d55));   // Meteor Lake iGPU
  EXPECT_FALSE(IsTorchSupported(v1::ROW_XPU, 0xa780));  // UHD 770
  EXPECT_TRUE(IsTorchSupported(v1::ROW_CUDA_NVIDIA, 0x1234));
  EXPECT_TRUE(IsIntegrated(v1::ROW_CUDA_AMD, 0x164e, "0000:0e:00.0"));
  EXPECT_FALSE(IsIntegrated(v1::ROW_CUDA_AMD, 0x740f, "0000:63:00.0"));
  EXPECT_TRUE(IsIntegrated(v1::ROW_XPU, 0xa780, "0000:00:02.0"));
  EXPECT_FALSE(IsIntegrated(v1::ROW_XPU, 0x56a0, "0000:03:00.0"));
  EXPECT_TRUE(IsRowDriver(*FindBackend(v1::ROW_CUDA_NVIDIA), "nvidia"));
  EXPECT_FALSE(IsRowDriver(*FindBackend(v1::ROW_CUDA_NVIDIA), "nouveau"));
  EXPECT_FALSE(IsRowDriver(*FindBackend(v1::ROW_CUDA_NVIDIA), "vfio-pci"));
  EXPECT_TRUE(IsRowDriver(*FindBackend(v1::ROW_TPU), "vfio-pci"));
  EXPECT_FALSE(IsRowDriver(*FindBackend(v1::ROW_TPU), ""));
  EXPECT_TRUE(IsRowDriver(*FindBackend(v1::ROW_MLU), "cambricon-pci-drv_mlu370_pigeon"));
}

}  // namespace
}  // namespace devplace::placement
