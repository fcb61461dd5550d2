// Enumeration hazards (docs/SEMANTICS.md sections 3 and 9): MIG enumeration (E-MIG), Gaudi device indices
// (H-HPU), the CUDA runtime's enumeration order (E-ORDER) and visibility variables that cannot
// apply to the answer's row (H-FOREIGN), as table-driven cases. ResolveCase names carry the rule id.
#include <functional>
#include <map>
#include <string>
#include <vector>

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
using placement::Resolve;

constexpr auto kOk = absl::StatusCode::kOk;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kPrecondition = absl::StatusCode::kFailedPrecondition;
constexpr auto TA = v1::CONVENTION_TRAINING_ARGUMENTS;
const auto CUDA = v1::ROW_CUDA_NVIDIA;

constexpr char kMigA[] = "MIG-aaaaaaaa-0000-4000-8000-000000000001";
constexpr char kMigB[] = "MIG-bbbbbbbb-0000-4000-8000-000000000002";
constexpr uint64_t k4GiB = 4 * kGiB;
constexpr uint64_t k11GiB = 11 * kGiB;

// Two A100s; `mig` says which have MIG on with one 3g.40gb instance each (kMigA on GPU 0, kMigB
// on GPU 1).
v1::Inventory A100s(bool mig0, bool mig1) {
  InventoryBuilder b;
  b.Add(CUDA, 2);
  const bool mig[2] = {mig0, mig1};
  const char* uuids[2] = {kMigA, kMigB};
  for (int i = 0; i < 2; ++i) {
    v1::Device& d = b.Device(CUDA, i);
    d.set_name("NVIDIA A100-SXM4-80GB");
    if (!mig[i]) continue;
    (*d.mutable_attributes())["mig_mode"] = "enabled";
    v1::Partition* p = d.add_partitions();
    p->set_uuid(uuids[i]);
    p->set_gpu_instance_id(1);
    p->set_profile("3g.40gb");
    p->set_memory_total_bytes(40 * kGiB);
    p->set_memory_free_bytes(39 * kGiB);
  }
  return b.Build();
}

// GPU 0 has MIG mode on but no instance; GPU 1 has MIG off.
v1::Inventory MigWithoutInstances() {
  InventoryBuilder b;
  b.Add(CUDA, 2);
  (*b.Device(CUDA, 0).mutable_attributes())["mig_mode"] = "enabled";
  return b.Build();
}

// A GTX 745-class card at bus 01 (host 0, 4 GiB) and a GTX 1080 Ti-class card
// at bus 02 (host 1, 11 GiB). With `ordinals`, libcuda's enumeration: FASTEST_FIRST puts the
// 1080 Ti first; PCI_BUS_ID is bus order.
v1::Inventory MixedModels(bool ordinals) {
  InventoryBuilder b;
  b.Add(CUDA, 2);
  v1::Device& slow = b.Device(CUDA, 0);
  slow.set_pci_bus_id("0000:01:00.0");
  slow.set_device_id("1382");
  slow.set_name("NVIDIA GeForce GTX 745");
  slow.set_memory_total_bytes(k4GiB);
  slow.set_memory_free_bytes(k4GiB);
  v1::Device& fast = b.Device(CUDA, 1);
  fast.set_pci_bus_id("0000:02:00.0");
  fast.set_device_id("1b06");
  fast.set_name("NVIDIA GeForce GTX 1080 Ti");
  fast.set_memory_total_bytes(k11GiB);
  fast.set_memory_free_bytes(k11GiB);
  if (ordinals) {
    slow.set_runtime_ordinal(1);
    fast.set_runtime_ordinal(0);
    slow.set_runtime_ordinal_pci(0);
    fast.set_runtime_ordinal_pci(1);
  }
  return b.Build();
}

// E-ORDER-SMI: three NVIDIA GPUs at buses 01, 02, 03 (nvidia-smi GPUs 0, 1, 2); libcuda's
// FASTEST_FIRST order is 01, 03, 02: only the second and third swap.
v1::Inventory ThreeGpusLastTwoSwapped() {
  InventoryBuilder b;
  b.Add(CUDA, 3);
  const int fastest_first[3] = {0, 2, 1};
  for (int i = 0; i < 3; ++i) {
    b.Device(CUDA, i).set_runtime_ordinal(fastest_first[i]);
    b.Device(CUDA, i).set_runtime_ordinal_pci(i);
  }
  return b.Build();
}

// E-ORDER (HIP): two MI210s whose KFD topology lists the second PCI device first (HIP device 0 is
// host device 1), as on the amd-2x-mi210-kfd-order fixture host; `kfd` false: no ordinals probed.
v1::Inventory AmdKfdSwapped(bool kfd) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_AMD, 2);
  if (kfd) {
    b.Device(v1::ROW_CUDA_AMD, 0).set_runtime_ordinal(1);
    b.Device(v1::ROW_CUDA_AMD, 1).set_runtime_ordinal(0);
  }
  return b.Build();
}

v1::Inventory AmdKfdInPciOrder() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_AMD, 2);
  for (int i = 0; i < 2; ++i) b.Device(v1::ROW_CUDA_AMD, i).set_runtime_ordinal(i);
  return b.Build();
}

// E-XPU-PIN: a UHD 770 iGPU at 00:02.0 (host device 0; PyTorch does not support it, Level Zero
// enumerates it) and `arcs` discrete cards; `tiles` > 1 gives each card that many tiles.
v1::Inventory IgpuAndArcs(int arcs, int tiles = 1) {
  InventoryBuilder b;
  b.Add(v1::ROW_XPU, 1 + arcs);
  v1::Device& igpu = b.Device(v1::ROW_XPU, 0);
  igpu.set_pci_bus_id("0000:00:02.0");
  igpu.set_device_id("a780");
  igpu.set_name("Intel(R) UHD Graphics 770");
  igpu.set_integrated(true);
  igpu.set_supported(false);
  igpu.set_usable(false);
  igpu.set_unusable_reason("Intel GPU 8086:a780 is not supported by PyTorch's xpu backend");
  for (int i = 1; i <= arcs; ++i) {
    b.Device(v1::ROW_XPU, i).set_device_id("56a0");
    if (tiles > 1) b.Device(v1::ROW_XPU, i).set_sub_device_count(tiles);
  }
  return b.Build();
}

std::function<v1::Inventory()> Rows(std::initializer_list<std::pair<v1::Row, int>> rows) {
  std::vector<std::pair<v1::Row, int>> copy(rows);
  return [copy] {
    InventoryBuilder b;
    for (const auto& [row, n] : copy) b.Add(row, n);
    return v1::Inventory(b.Build());
  };
}

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  // ---- E-MIG (item 7) ----
  c.push_back({.id = "MIG_TwoRanksShareTheOneInstance",
               .host = [] { return A100s(true, true); },
               .request = Req::Train(TA).Env("WORLD_SIZE", "2").Env("LOCAL_RANK", "1"),
               .device = "cuda:0", .host_indices = {0}, .partitions = {kMigA},
               .warnings = {"MIG: each CUDA process of this job enumerates one MIG instance",
                            "CUDA_VISIBLE_DEVICES=MIG-<uuid>", kMigB},
               .absent_warnings = {"wraps onto"},
               .explanation = {"E-MIG"}});
  c.push_back({.id = "MIG_TwoRanksShareTheOneInstance_strict",
               .host = [] { return A100s(true, true); },
               .request = Req::Train(TA).Env("WORLD_SIZE", "2").Env("LOCAL_RANK", "1").Strict(),
               .code = kPrecondition, .error_words = {"MIG", "CUDA_VISIBLE_DEVICES=MIG-<uuid>"}});
  c.push_back({.id = "MIG_SecondInstanceByUuid",
               .host = [] { return A100s(true, true); },
               .request = Req::Train(TA).Env("WORLD_SIZE", "2").Env("LOCAL_RANK", "1").Env("CUDA_VISIBLE_DEVICES", kMigB),
               .device = "cuda:0", .host_indices = {1}, .partitions = {kMigB},
               .absent_warnings = {"MIG: each CUDA process", "MIG is enabled"}});
  c.push_back({.id = "MIG_SingleProcessGetsTheFirstInstanceAndItsMemory",
               .host = [] { return A100s(true, true); },
               .request = Req::Infer("auto"),
               .device = "cuda:0", .host_indices = {0}, .partitions = {kMigA},
               .warnings = {"MIG is enabled: the job sees exactly one device"},
               .max_memory = {{"0", static_cast<uint64_t>(39 * kGiB * 0.9L)}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "MIG_NonMigGpuIsNotEnumeratedNextToAnInstance",
               .host = [] { return A100s(false, true); },
               .request = Req::Train(TA),
               .device = "cuda:0", .host_indices = {1}, .partitions = {kMigB},
               .warnings = {"not the GPUs without MIG"},
               .explanation = {"are not enumerated while a MIG instance is"}});
  c.push_back({.id = "MIG_MaskNamingTheNonMigGpuSeesTheWholeGpu",
               .host = [] { return A100s(false, true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "0"),
               .device = "cuda:0", .host_indices = {0}, .partitions = {""},
               .absent_warnings = {"MIG"}});
  c.push_back({.id = "MIG_MaskOrdinalsOfTwoMigGpusStillOneInstance",
               .host = [] { return A100s(true, true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1,0"),
               .device = "cuda:0", .host_indices = {1}, .partitions = {kMigB}});
  c.push_back({.id = "MIG_EnabledWithoutInstancesGivesNoDevice",
               .host = MigWithoutInstances,
               .request = Req::Train(TA),
               .device = "cuda:0", .host_indices = {1},
               .explanation = {"MIG enabled without instances"}});
  // ---- H-HPU (item 8) ----
  c.push_back({.id = "HPU_ExplicitIndexIsInvalid",
               .host = Rows({{v1::ROW_HPU, 8}}),
               .request = Req::Infer("hpu:3").Env("HABANA_VISIBLE_DEVICES", "3"),
               .code = kInvalid,
               .error_words = {"device_map: 'hpu:3'", "HABANA_VISIBLE_MODULES", "pass hpu", "HABANA_VISIBLE_DEVICES=3",
                               "container runtime"}});
  c.push_back({.id = "HPU_ExplicitIndexIsInvalid_pipeline",
               .host = Rows({{v1::ROW_HPU, 8}}),
               .request = Req::Pipe("hpu:1"),
               .code = kInvalid, .error_words = {"'hpu:1'", "HABANA_VISIBLE_MODULES"}});
  c.push_back({.id = "HPU_PipelineIntAboveZeroIsInvalid",
               .host = Rows({{v1::ROW_HPU, 8}}),
               .request = Req::Pipe("3"),
               .code = kInvalid, .error_words = {"pipeline device 3", "'hpu:3'", "HABANA_VISIBLE_MODULES"}});
  c.push_back({.id = "HPU_PipelineIntZero", .host = Rows({{v1::ROW_HPU, 8}}), .request = Req::Pipe("0"), .device = "hpu:0"});
  c.push_back({.id = "HPU_FromPretrainedIntIsTheProcessModule",
               .host = Rows({{v1::ROW_HPU, 8}}), .request = Req::Infer("3"), .device = "hpu"});
  c.push_back({.id = "HPU_IndexZeroAndBareAreTheProcessModule",
               .host = Rows({{v1::ROW_HPU, 8}}),
               .request = Req::Infer("hpu:0"),
               .device = "hpu:0", .host_indices = {0}});
  c.push_back({.id = "HPU_Bare", .host = Rows({{v1::ROW_HPU, 8}}), .request = Req::Infer("hpu"), .device = "hpu"});
  c.push_back({.id = "HPU_HabanaVisibleDevicesIsExplained",
               .host = Rows({{v1::ROW_HPU, 8}}),
               .request = Req::Train(TA).Env("HABANA_VISIBLE_DEVICES", "3"),
               .device = "hpu:0",
               .warnings = {"HABANA_VISIBLE_DEVICES=3: HABANA_VISIBLE_DEVICES is the Habana container runtime's variable",
                            "HABANA_VISIBLE_MODULES"}});
  // ---- E-ORDER (item 9) ----
  c.push_back({.id = "ORDER_MaskIndexesTheFastestFirstOrder",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {0},  // the GTX 745, not the 1080 Ti
               .absent_warnings = {"may differ"},
               .explanation = {"E-ORDER CUDA_DEVICE_ORDER unset (FASTEST_FIRST): the CUDA runtime's own enumeration"}});
  c.push_back({.id = "ORDER_PciBusIdOrder",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1").Env("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"may differ"}});
  c.push_back({.id = "ORDER_MaxMemoryKeyedInTheJobsNumbering",
               .host = [] { return MixedModels(true); },
               .request = Req::Infer("sequential"),
               .device = "cuda:0", .host_indices = {1, 0},
               .max_memory = {{"0", k11GiB}, {"1", k4GiB}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "ORDER_MaxMemoryKeyedInTheJobsNumbering_pci",
               .host = [] { return MixedModels(true); },
               .request = Req::Infer("sequential").Env("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
               .device = "cuda:0", .host_indices = {0, 1},
               .max_memory = {{"0", k4GiB}, {"1", k11GiB}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "ORDER_UnknownWithoutLibcudaKeepsTheWarning",
               .host = [] { return MixedModels(false); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {1},
               .warnings = {"may differ", "set CUDA_DEVICE_ORDER=PCI_BUS_ID"}});
  c.push_back({.id = "ORDER_UnknownButPciBusIdSelectedIsCertain",
               .host = [] { return MixedModels(false); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1").Env("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"may differ"}});
  c.push_back({.id = "ORDER_BadValueIsInvalid",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA).Env("CUDA_DEVICE_ORDER", "pci"),
               .code = kInvalid, .error_words = {"env.CUDA_DEVICE_ORDER='pci'", "FASTEST_FIRST", "PCI_BUS_ID"}});
  // Level Zero: the driver's own order unless ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 (not probed).
  auto two_arcs = [] {
    InventoryBuilder b;
    b.Add(v1::ROW_XPU, 2);
    b.Device(v1::ROW_XPU, 1).set_device_id("56a1");
    return v1::Inventory(b.Build());
  };
  c.push_back({.id = "ORDER_LevelZeroMixedModelsWarn",
               .host = two_arcs,
               .request = Req::Train(TA),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1", "set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1"}});
  c.push_back({.id = "ORDER_LevelZeroPciOrderSelected",
               .host = two_arcs,
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"),
               .device = "xpu:0", .host_indices = {0}, .absent_warnings = {"ZE_ENABLE_PCI_ID_DEVICE_ORDER"}});
  // ---- E-ORDER-SMI: the job's CUDA ordinals against nvidia-smi's, on the devices used ----
  c.push_back({.id = "ORDERSMI_MaskMeantAsNvidiaSmiGpuGetsTheOtherCard",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {0},
               .warnings = {"E-ORDER-SMI: the job numbers its NVIDIA GPUs in CUDA's order, CUDA_DEVICE_ORDER unset "
                            "(FASTEST_FIRST), not in PCI bus order (nvidia-smi's)",
                            "cuda:0 = CUDA device 1 = nvidia-smi GPU 0 (0000:01:00.0 NVIDIA GeForce GTX 745), where "
                            "counting in PCI bus order gives nvidia-smi GPU 1 (0000:02:00.0 NVIDIA GeForce GTX 1080 Ti)",
                            "CUDA_VISIBLE_DEVICES=1 counts in CUDA's order too",
                            "to number GPUs as nvidia-smi does, set CUDA_DEVICE_ORDER=PCI_BUS_ID"},
               .absent_warnings = {"max_memory"},
               .explanation = {"E-ORDER-SMI cuda/nvidia"}});
  c.push_back({.id = "ORDERSMI_PciBusIdIsNvidiaSmisNumbering",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1").Env("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"E-ORDER-SMI"}});
  c.push_back({.id = "ORDERSMI_NoMaskTheFastestIsCuda0",
               .host = [] { return MixedModels(true); },
               .request = Req::Train(TA),
               .device = "cuda:0", .host_indices = {1, 0},  // DataParallel over both
               .warnings = {"cuda:0 = CUDA device 0 = nvidia-smi GPU 1", "cuda:1 = CUDA device 1 = nvidia-smi GPU 0"},
               .absent_warnings = {"counts in CUDA's order too"}});
  c.push_back({.id = "ORDERSMI_MaxMemoryKeysAreTheJobsOrdinals",
               .host = [] { return MixedModels(true); },
               .request = Req::Infer("sequential"),
               .device = "cuda:0", .host_indices = {1, 0},
               .warnings = {"max_memory keys are the job's ordinals (\"0\" is cuda:0 = nvidia-smi GPU 1 (0000:02:00.0"},
               .max_memory = {{"0", k11GiB}, {"1", k4GiB}, {"cpu", kCpuBudget}}});
  c.push_back({.id = "ORDERSMI_UnknownOrderSaysMayDifferInstead",
               .host = [] { return MixedModels(false); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {1},
               .warnings = {"may differ"}, .absent_warnings = {"E-ORDER-SMI"}});
  c.push_back({.id = "ORDERSMI_DeviceUsedIsTheSameInBothOrders",
               .host = ThreeGpusLastTwoSwapped,
               .request = Req::Infer("cuda:0"),
               .device = "cuda:0", .host_indices = {0}, .absent_warnings = {"E-ORDER-SMI"}});
  c.push_back({.id = "ORDERSMI_DeviceUsedDiffers",
               .host = ThreeGpusLastTwoSwapped,
               .request = Req::Infer("cuda:1"),
               .device = "cuda:1", .host_indices = {2},
               .warnings = {"cuda:1 = CUDA device 1 = nvidia-smi GPU 2 (0000:22:00.0",
                            "counting in PCI bus order gives nvidia-smi GPU 1 (0000:21:00.0"},
               .absent_warnings = {"cuda:0 ="}});
  c.push_back({.id = "ORDERSMI_ContainerNumbersOnlyItsOwnGpus",  // nvidia-smi and CUDA inside see two GPUs
               .host = ThreeGpusLastTwoSwapped,
               .request = Req::Infer("cuda:0").JobNodes({"/dev/nvidia1", "/dev/nvidia2"}),
               .device = "cuda:0", .host_indices = {2},
               .warnings = {"cuda:0 = CUDA device 0 = nvidia-smi GPU 1 (0000:22:00.0",
                            "counting in PCI bus order gives nvidia-smi GPU 0 (0000:21:00.0"}});
  c.push_back({.id = "ORDERSMI_MaskPickingTheSameCardIsSilent",
               .host = ThreeGpusLastTwoSwapped,
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "0"),
               .device = "cuda:0", .host_indices = {0}, .absent_warnings = {"E-ORDER-SMI"}});
  // ---- E-ORDER (HIP): KFD topology order, and E-ORDER-SMI for ROCm's masks ----
  c.push_back({.id = "HIPORDER_HipVisibleDevicesCountsInKfdOrder",
               .host = [] { return AmdKfdSwapped(true); },
               .request = Req::Train(TA).Env("HIP_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {0},
               .warnings = {"E-ORDER-SMI: the job numbers its AMD GPUs in HIP's order, the KFD topology's node order",
                            "cuda:0 = HIP device 1 = GPU 0 in PCI bus order (0000:30:00.0",
                            "counting in PCI bus order gives GPU 1 in PCI bus order (0000:31:00.0",
                            "HIP_VISIBLE_DEVICES=1 counts in HIP's order too",
                            absl::StrCat("ROCR_VISIBLE_DEVICES=", TestUuid(v1::ROW_CUDA_AMD, 1))},
               .explanation = {"E-ORDER HIP numbers GPUs in the KFD topology's node order (ROCr's agent order, probed "
                               "from sysfs): ordinal 0 = host device 1", "E-ORDER-SMI cuda/amd"}});
  c.push_back({.id = "HIPORDER_RocrVisibleDevicesCountsInKfdOrder",
               .host = [] { return AmdKfdSwapped(true); },
               .request = Req::Train(TA).Env("ROCR_VISIBLE_DEVICES", "0"),
               .device = "cuda:0", .host_indices = {1},
               .warnings = {"ROCR_VISIBLE_DEVICES=0 counts in HIP's order too"}});
  c.push_back({.id = "HIPORDER_CudaVisibleDevicesIsReadWithoutHip",
               .host = [] { return AmdKfdSwapped(true); },
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "0"),
               .device = "cuda:0", .host_indices = {1},
               .warnings = {"CUDA_VISIBLE_DEVICES=0 counts in HIP's order too"}});
  c.push_back({.id = "HIPORDER_UuidMaskIsOrderFree",
               .host = [] { return AmdKfdSwapped(true); },
               .request = Req::Train(TA).Env("ROCR_VISIBLE_DEVICES", TestUuid(v1::ROW_CUDA_AMD, 0)),
               .device = "cuda:0", .host_indices = {0}, .absent_warnings = {"E-ORDER-SMI"}});
  c.push_back({.id = "HIPORDER_KfdInPciOrderIsSilent",
               .host = AmdKfdInPciOrder,
               .request = Req::Train(TA).Env("HIP_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"E-ORDER-SMI"}});
  c.push_back({.id = "HIPORDER_NotProbedKeepsPciOrder",
               .host = [] { return AmdKfdSwapped(false); },
               .request = Req::Train(TA).Env("HIP_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"E-ORDER-SMI"}});
  // ---- E-XPU-PIN: an Intel iGPU next to Arc cards ----
  c.push_back({.id = "XPUPIN_NoOrderVariableNamesThePinningMask",
               .host = [] { return IgpuAndArcs(2); },
               .request = Req::Train(TA),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"E-XPU-PIN: visible Intel GPUs include the integrated GPU host device 0 (0000:00:02.0) Intel(R) "
                            "UHD Graphics 770 next to discrete ones and ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1",
                            "so that variable alone points the job at the slow chip",
                            "pin the discrete cards with ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ZE_AFFINITY_MASK=1,2 (",
                            "the job then sees xpu:0 = host device 1 (0000:61:00.0), xpu:1 = host device 2 (0000:62:00.0)"},
               .absent_warnings = {"may differ from the PCI bus order used here"},
               .explanation = {"E-XPU-PIN the integrated GPU host device 0 (0000:00:02.0)"}});
  c.push_back({.id = "XPUPIN_PciOrderAlonePointsAtTheIgpu",
               .host = [] { return IgpuAndArcs(2); },
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"E-XPU-PIN: ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 numbers Intel GPUs by PCI bus id",
                            "it is xpu:0; pin the discrete cards with ZE_AFFINITY_MASK=1,2 ("},
               .absent_warnings = {"ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1"}});
  c.push_back({.id = "XPUPIN_PinnedIsSilent",
               .host = [] { return IgpuAndArcs(2); },
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1").Env("ZE_AFFINITY_MASK", "1,2"),
               .device = "xpu:0", .host_indices = {1}, .absent_warnings = {"E-XPU-PIN", "PyTorch does not support"}});
  c.push_back({.id = "XPUPIN_MaskWithoutOrderVariableDependsOnTheDriver",
               .host = [] { return IgpuAndArcs(2); },
               .request = Req::Train(TA).Env("ZE_AFFINITY_MASK", "1,2"),
               .device = "xpu:0", .host_indices = {1},
               .warnings = {"and so does what ZE_AFFINITY_MASK=1,2 selects",
                            "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ZE_AFFINITY_MASK=1,2"}});
  c.push_back({.id = "XPUPIN_OneCard",
               .host = [] { return IgpuAndArcs(1); },
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"pin the discrete card with ZE_AFFINITY_MASK=1 ("}});
  c.push_back({.id = "XPUPIN_FlatTilesAreRootDevices",
               .host = [] { return IgpuAndArcs(1, 2); },
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"ZE_AFFINITY_MASK=1,2 (", "xpu:0 = sub-device 0 of host device 1"}});
  c.push_back({.id = "XPUPIN_CompositeCardIsOneRootDevice",
               .host = [] { return IgpuAndArcs(1, 2); },
               .request = Req::Train(TA).Env("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1").Env("ZE_FLAT_DEVICE_HIERARCHY", "COMPOSITE"),
               .device = "xpu:0", .host_indices = {0},
               .warnings = {"pin the discrete card with ZE_AFFINITY_MASK=1 ("}});
  // ---- H-FOREIGN (item 10) ----
  c.push_back({.id = "FOREIGN_CudaMaskOnAscend",
               .host = Rows({{v1::ROW_NPU, 2}}),
               .request = Req::Pipe().Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "npu:0", .host_indices = {0},
               .warnings = {"env CUDA_VISIBLE_DEVICES=1 has no effect on the answer's npu",
                            "which this host does not have", "ASCEND_RT_VISIBLE_DEVICES"}});
  c.push_back({.id = "FOREIGN_AscendMaskOnNvidiaNamesCudaVisibleDevices",
               .host = Rows({{CUDA, 2}, {v1::ROW_NPU, 2}}),
               .request = Req::Train(TA).Env("ASCEND_RT_VISIBLE_DEVICES", "1").Runtime({"cuda"}),
               .device = "cuda:0",
               .warnings = {"env ASCEND_RT_VISIBLE_DEVICES=1 has no effect on the answer's cuda/nvidia",
                            "the variable that selects cuda devices is CUDA_VISIBLE_DEVICES"}});
  c.push_back({.id = "FOREIGN_OwnMaskIsNotForeign",
               .host = Rows({{CUDA, 2}}),
               .request = Req::Train(TA).Env("CUDA_VISIBLE_DEVICES", "1"),
               .device = "cuda:0", .host_indices = {1}, .absent_warnings = {"has no effect"}});
  c.push_back({.id = "FOREIGN_CpuAnswerNamesVariablesOfAbsentRows",
               .host = Rows({}),
               .request = Req::Train(TA).Env("ZE_AFFINITY_MASK", "0"),
               .device = "cpu",
               .warnings = {"env ZE_AFFINITY_MASK=0 has no effect: ZE_AFFINITY_MASK narrows xpu, which this host does not have"}});
  return c;
}

class Hazards : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(Hazards, Resolves) {
  const ResolveCase& k = GetParam();
  const v1::Inventory inv = k.host();
  auto r = Resolve(inv, k.request);
  ASSERT_EQ(r.status().code(), k.code) << r.status();
  if (k.code != kOk) {
    for (const std::string& w : k.error_words) EXPECT_THAT(std::string(r.status().message()), HasSubstr(w));
    return;
  }
  EXPECT_EQ(r->device(), k.device);
  const std::string warnings = absl::StrJoin(r->warnings(), "\n");
  for (const std::string& w : k.warnings) EXPECT_THAT(warnings, HasSubstr(w));
  for (const std::string& w : k.absent_warnings) EXPECT_THAT(warnings, Not(HasSubstr(w)));
  const std::string explanation = absl::StrJoin(r->explanation(), "\n");
  for (const std::string& e : k.explanation) EXPECT_THAT(explanation, HasSubstr(e));
  if (!k.host_indices.empty()) {
    std::vector<int> got;
    for (const v1::PlacedDevice& p : r->placed()) got.push_back(p.host_index());
    EXPECT_EQ(got, k.host_indices) << explanation;
  }
  if (!k.partitions.empty()) {
    std::vector<std::string> got;
    for (const v1::PlacedDevice& p : r->placed()) got.push_back(p.partition_uuid());
    EXPECT_EQ(got, k.partitions);
  }
  if (!k.max_memory.empty()) {
    std::map<std::string, uint64_t> got(r->max_memory().begin(), r->max_memory().end());
    EXPECT_EQ(got, k.max_memory);
  }
}

INSTANTIATE_TEST_SUITE_P(EnumerationHazards, Hazards, ::testing::ValuesIn(Cases()), CaseId);

}  // namespace
}  // namespace devplace::testing
