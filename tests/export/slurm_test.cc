// server/export/slurm.h over the fixture inventories: the gres.conf records of every row (the
// real slurmd parses them in tests/client/slurm_gres_slurmd_test.sh) and the TaskProlog's exports
// for allocations on each row, checked against what Slurm 22.05 puts in SLURM_STEP_GPUS.
#include "server/export/slurm.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/export/fixture_inventories.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

v1::Inventory Probe(const std::string& host) {
  return LoadInventory(std::string(DEVPLACE_PROBE_GOLDEN_DIR) + "/" + host + ".json");
}

// The record lines (not comments) of the gres.conf text.
std::vector<std::string> Records(const v1::Inventory& inv, slurm::GresNaming naming = slurm::GresNaming::kGpu) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(slurm::GresConfText(inv, naming), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) out.emplace_back(line);
  }
  return out;
}

slurm::Exports Prolog(const v1::Inventory& inv, const std::map<std::string, std::string>& env,
                      const v1::JobDevices* job_devices = nullptr,
                      slurm::StepNumbering numbering = slurm::StepNumbering::kDevNum) {
  absl::StatusOr<slurm::Exports> out = slurm::TaskPrologExports(inv, env, job_devices, numbering);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : slurm::Exports{};
}

TEST(SlurmGresTest, NvidiaRecordsCarryModelNodeNumaCoresAndSlurmsEnvFlag) {
  const v1::Inventory inv = Probe("nvidia-2x-h100");
  EXPECT_THAT(Records(inv),
              ElementsAre("Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-1 Flags=nvidia_gpu_env",
                          "Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1 Cores=2-3 Flags=nvidia_gpu_env"));
  const std::string text = slurm::GresConfText(inv, slurm::GresNaming::kGpu);
  EXPECT_THAT(text, HasSubstr("# slurm.conf: GresTypes=gpu\n"));
  EXPECT_THAT(text, HasSubstr("# slurm.conf: NodeName=" + inv.host().hostname() + " Gres=gpu:nvidia_h100_80gb_hbm3:2\n"));
  EXPECT_THAT(text, HasSubstr("/dev/nvidiactl, /dev/nvidia-uvm"));  // control nodes, from the hardware table
}

TEST(SlurmGresTest, RowsSlurmHasNoVariableForGetNoGpuEnv) {
  EXPECT_THAT(Records(Probe("npu-2x-910b")),
              ElementsAre("Name=gpu Type=npu_d802 File=/dev/davinci0 Cores=0-1 Flags=no_gpu_env",
                          "Name=gpu Type=npu_d802 File=/dev/davinci1 Cores=2-3 Flags=no_gpu_env"));
  EXPECT_THAT(Records(Probe("hpu-2x-gaudi2")),
              ElementsAre("Name=gpu Type=gaudi2 File=/dev/accel/accel0 Cores=0-1 Flags=no_gpu_env",
                          "Name=gpu Type=gaudi2 File=/dev/accel/accel1 Cores=2-3 Flags=no_gpu_env"));
  const std::string npu = slurm::GresConfText(Probe("npu-2x-910b"), slurm::GresNaming::kGpu);
  EXPECT_THAT(npu, HasSubstr("mask variable is ASCEND_RT_VISIBLE_DEVICES"));
  EXPECT_THAT(npu, HasSubstr("install `devplace slurm task-prolog` as TaskProlog"));
}

TEST(SlurmGresTest, DeviceWithTwoNodesUsesMultipleFiles) {
  EXPECT_THAT(Records(Probe("musa-2x-s4000")),
              ElementsAre("Name=gpu Type=musa_" + Probe("musa-2x-s4000").backends(1).devices(0).device_id() +
                              " MultipleFiles=/dev/mtgpu.0,/dev/dri/renderD128 Cores=0-1 Flags=no_gpu_env",
                          "Name=gpu Type=musa_" + Probe("musa-2x-s4000").backends(1).devices(1).device_id() +
                              " MultipleFiles=/dev/mtgpu.1,/dev/dri/renderD129 Cores=2-3 Flags=no_gpu_env"));
}

TEST(SlurmGresTest, MixedHostGetsNoEnvFlagsAndPerRowNames) {
  const v1::Inventory inv = Probe("mixed-nvidia-amd-igpu");
  // Slurm ORs a node's env flags over its gpu records: a mixed node must set none.
  EXPECT_THAT(Records(inv), ElementsAre(HasSubstr("File=/dev/nvidia0 Flags=no_gpu_env"),
                                        HasSubstr("File=/dev/dri/renderD129 Flags=no_gpu_env")));
  const std::vector<std::string> per_row = Records(inv, slurm::GresNaming::kPerRow);
  ASSERT_EQ(per_row.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(per_row[0], "Name=cuda Type=nvidia_geforce_rtx_4090 File=/dev/nvidia0")) << per_row[0];
  EXPECT_TRUE(absl::StartsWith(per_row[1], "Name=rocm Type=rocm_")) << per_row[1];
  EXPECT_THAT(per_row[0], Not(HasSubstr("Flags=")));
  EXPECT_THAT(slurm::GresConfText(inv, slurm::GresNaming::kPerRow), HasSubstr("# slurm.conf: GresTypes=cuda,rocm\n"));
}

TEST(SlurmGresTest, DevicesWithoutNodesAreLeftOutAndSaid) {
  const v1::Inventory inv = Probe("nvidia-container");
  EXPECT_THAT(Records(inv), ElementsAre(HasSubstr("File=/dev/nvidia1"), HasSubstr("File=/dev/nvidia3")));
  EXPECT_THAT(slurm::GresConfText(inv, slurm::GresNaming::kGpu), HasSubstr("2 of 4 device(s)"));
  EXPECT_THAT(Records(Probe("cpu-only")), IsEmpty());
  EXPECT_THAT(Records(Probe("nvidia-driver-not-loaded")), IsEmpty());
}

TEST(SlurmGresTest, SmtHostsGetNoCores) {
  v1::Inventory inv = Probe("nvidia-2x-h100");
  inv.mutable_host()->mutable_cpu()->set_threads(inv.host().cpu().cores() * 2);
  EXPECT_THAT(Records(inv), ElementsAre(Not(HasSubstr("Cores=")), Not(HasSubstr("Cores="))));
  EXPECT_THAT(slurm::GresConfText(inv, slurm::GresNaming::kGpu), HasSubstr("no Cores=: the host has SMT"));
}

TEST(SlurmGresTest, TypeSanitising) {
  EXPECT_EQ(slurm::SanitizeGresType("NVIDIA A100-SXM4-80GB"), "nvidia_a100_sxm4_80gb");
  EXPECT_EQ(slurm::SanitizeGresType("  MLU370-X8 "), "mlu370_x8");
  EXPECT_EQ(slurm::SanitizeGresType(""), "");
  EXPECT_EQ(slurm::SanitizeGresType(std::string(100, 'a')).size(), 64u);
}

TEST(SlurmGresTest, FlagParsing) {
  EXPECT_EQ(*slurm::ParseGresNaming("per-row"), slurm::GresNaming::kPerRow);
  EXPECT_THAT(std::string(slurm::ParseGresNaming("rows").status().message()),
              HasSubstr("--name='rows': accepted forms: gpu, per-row"));
  EXPECT_THAT(std::string(slurm::ParseStepNumbering("pos").status().message()),
              HasSubstr("--step_numbering='pos': accepted forms: dev_num, index"));
}

// ---- the task prolog ----

TEST(SlurmTaskPrologTest, AscendStepGetsItsNpuAndRanks) {
  EXPECT_THAT(Prolog(Probe("npu-2x-910b"), {{"SLURM_STEP_GPUS", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}}),
              ElementsAre(Pair("ASCEND_RT_VISIBLE_DEVICES", "1"), Pair("LOCAL_RANK", "0"), Pair("WORLD_SIZE", "2")));
  // A launcher's LOCAL_RANK / WORLD_SIZE win.
  EXPECT_THAT(Prolog(Probe("npu-2x-910b"), {{"SLURM_STEP_GPUS", "0,1"}, {"SLURM_LOCALID", "1"}, {"LOCAL_RANK", "0"},
                                            {"SLURM_NTASKS", "2"}, {"WORLD_SIZE", "8"}}),
              ElementsAre(Pair("ASCEND_RT_VISIBLE_DEVICES", "0,1")));
}

TEST(SlurmTaskPrologTest, StepGpusBeforeJobGpus) {
  EXPECT_THAT(Prolog(Probe("nvidia-2x-h100"), {{"SLURM_STEP_GPUS", "1"}, {"SLURM_JOB_GPUS", "0,1"}}),
              ElementsAre(Pair("CUDA_VISIBLE_DEVICES", "1")));
  EXPECT_THAT(Prolog(Probe("nvidia-2x-h100"), {{"SLURM_JOB_GPUS", "0"}}), ElementsAre(Pair("CUDA_VISIBLE_DEVICES", "0")));
  // No gpu GRES announced: no mask (Slurm told the step nothing), ranks still.
  EXPECT_THAT(Prolog(Probe("nvidia-2x-h100"), {{"SLURM_LOCALID", "3"}}), ElementsAre(Pair("LOCAL_RANK", "3")));
}

TEST(SlurmTaskPrologTest, EveryRowsOwnVariableAndIds) {
  EXPECT_THAT(Prolog(Probe("hpu-2x-gaudi2"), {{"SLURM_STEP_GPUS", "1"}}), ElementsAre(Pair("HABANA_VISIBLE_MODULES", "1")));
  EXPECT_THAT(Prolog(Probe("mlu-2x-mlu370"), {{"SLURM_STEP_GPUS", "1"}}), ElementsAre(Pair("CN_VISIBLE_DEVICES", "1")));
  // MultipleFiles=/dev/mtgpu.0,/dev/dri/renderD128: slurmd 22.05 numbers the device by its last
  // file, 128 (client.slurm_gres_slurmd sees that Index).
  EXPECT_THAT(Prolog(Probe("musa-2x-s4000"), {{"SLURM_STEP_GPUS", "128"}}), ElementsAre(Pair("MUSA_VISIBLE_DEVICES", "0")));
  // Neuron: every NeuronCore of the allocated device (2 per Trainium1).
  EXPECT_THAT(Prolog(Probe("neuron-2x-trn1"), {{"SLURM_STEP_GPUS", "1"}}),
              ElementsAre(Pair("NEURON_RT_VISIBLE_CORES", "2,3")));
  // TPU v5e: /dev/vfio/<group>, chips by id.
  EXPECT_THAT(Prolog(Probe("tpu-2x-v5e"), {{"SLURM_STEP_GPUS", "1"}}), ElementsAre(Pair("TPU_VISIBLE_CHIPS", "1")));
  // AMD: Slurm 22.05 lists renderD129 as 129; ROCm numbers the GPU 1.
  EXPECT_THAT(Prolog(Probe("amd-2x-mi210"), {{"SLURM_STEP_GPUS", "129"}}), ElementsAre(Pair("ROCR_VISIBLE_DEVICES", "1")));
  EXPECT_THAT(Prolog(Probe("amd-2x-mi210"), {{"SLURM_STEP_GPUS", "1"}}, nullptr, slurm::StepNumbering::kIndex),
              ElementsAre(Pair("ROCR_VISIBLE_DEVICES", "1")));
}

TEST(SlurmTaskPrologTest, MixedHostHidesTheRowNotAllocated) {
  // CUDA_VISIBLE_DEVICES="" hides the NVIDIA GPU and would hide the AMD one from HIP too (its
  // fallback variable), so the AMD row is selected with HIP_VISIBLE_DEVICES, which HIP reads first;
  // and CUDA_VISIBLE_DEVICES=0 would point past an empty ROCR_VISIBLE_DEVICES, so HIP's hides it.
  EXPECT_THAT(Prolog(Probe("mixed-nvidia-amd-igpu"), {{"SLURM_STEP_GPUS", "129"}}),
              ElementsAre(Pair("CUDA_VISIBLE_DEVICES", ""), Pair("HIP_VISIBLE_DEVICES", "0")));
  EXPECT_THAT(Prolog(Probe("mixed-nvidia-amd-igpu"), {{"SLURM_STEP_GPUS", "0"}}),
              ElementsAre(Pair("CUDA_VISIBLE_DEVICES", "0"), Pair("HIP_VISIBLE_DEVICES", "")));
}

TEST(SlurmTaskPrologTest, ConstrainedDevicesRenumberAsTheJobSeesThem) {
  // ConstrainDevices=yes: the step's cgroup shows only /dev/davinci1, which the job numbers 0.
  v1::JobDevices only_second;
  only_second.add_device_nodes("/dev/davinci1");
  EXPECT_THAT(Prolog(Probe("npu-2x-910b"), {{"SLURM_STEP_GPUS", "1"}}, &only_second),
              ElementsAre(Pair("ASCEND_RT_VISIBLE_DEVICES", "0")));
}

TEST(SlurmTaskPrologTest, NeverWidensAndSaysWhy) {
  const v1::Inventory inv = Probe("nvidia-2x-h100");
  absl::StatusOr<slurm::Exports> bad = slurm::TaskPrologExports(inv, {{"SLURM_STEP_GPUS", "7"}}, nullptr,
                                                                slurm::StepNumbering::kDevNum);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("SLURM_STEP_GPUS='7': 7 names no gpu record"));
  bad = slurm::TaskPrologExports(inv, {{"SLURM_STEP_GPUS", "0,x"}}, nullptr, slurm::StepNumbering::kDevNum);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("entry 'x' is not a GPU number"));
  // The cgroup hides the allocated GPU: no value can show it, and none is invented.
  v1::JobDevices other;
  other.add_device_nodes("/dev/nvidia0");
  bad = slurm::TaskPrologExports(inv, {{"SLURM_STEP_GPUS", "1"}}, &other, slurm::StepNumbering::kDevNum);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("refusing to widen"));
}

// A refusal names its cause, not the last variable tried (CUDA_DEVICE_ORDER was blamed when the
// task simply saw no /dev/nvidia* node).
TEST(SlurmTaskPrologTest, ARefusalNamesTheRealCause) {
  const auto refuse = [](const v1::Inventory& inv, const std::string& gpus, const v1::JobDevices* job_devices) {
    absl::StatusOr<slurm::Exports> out =
        slurm::TaskPrologExports(inv, {{"SLURM_STEP_GPUS", gpus}}, job_devices, slurm::StepNumbering::kDevNum);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << gpus;
    return std::string(out.status().message());
  };
  // Device nodes: a container started without GPU access sees no /dev/nvidia* node.
  v1::JobDevices none;
  std::string why = refuse(Probe("nvidia-2x-h100"), "0", &none);
  EXPECT_EQ(why,
            "Slurm allocated 1 NVIDIA GPU device(s) to this step (host #0 (/dev/nvidia0)), but the task cannot open the "
            "device node of 1 of them (/dev/nvidia0 not in its /dev: the step's cgroup or container does not give it "
            "those nodes; with ConstrainDevices=yes, gres.conf's File= must name them), and no value of "
            "CUDA_VISIBLE_DEVICES shows a device whose node the task cannot open; refusing to widen the allocation");
  EXPECT_THAT(why, Not(HasSubstr("CUDA_DEVICE_ORDER")));
  // A mask no value makes exact: with MIG on GPU 0, CUDA enumerates one MIG instance and nothing
  // else (E-MIG), so GPUs 0 and 1 together cannot be shown; every node is there (offline: unknown).
  why = refuse(Probe("nvidia-mig"), "0,1", nullptr);
  EXPECT_EQ(why,
            "Slurm allocated 2 NVIDIA GPU device(s) to this step (host #0 (/dev/nvidia0), host #1 (/dev/nvidia1)), but "
            "no value of CUDA_VISIBLE_DEVICES selects exactly them as the job numbers them (the closest, "
            "CUDA_VISIBLE_DEVICES=0,1, shows host #0 (/dev/nvidia0)); refusing to widen the allocation");
  // Both: a third GPU (a copy of GPU 1) whose node the task lacks, and GPUs 0 and 1 as above.
  v1::Inventory three = Probe("nvidia-mig");
  for (v1::Backend& b : *three.mutable_backends()) {
    if (b.row() != v1::ROW_CUDA_NVIDIA) continue;
    v1::Device& copy = *b.add_devices();
    copy = b.devices(1);
    copy.set_host_index(2);
    copy.set_minor(2);
    copy.set_pci_bus_id("0000:88:00.0");
    copy.set_uuid("GPU-00000000-0000-4000-8000-000000000003");
    copy.set_device_nodes(0, "/dev/nvidia2");
  }
  v1::JobDevices first_two;
  first_two.add_device_nodes("/dev/nvidia0");
  first_two.add_device_nodes("/dev/nvidia1");
  why = refuse(three, "0,1,2", &first_two);
  EXPECT_THAT(why, HasSubstr("the task cannot open the device node of 1 of them (/dev/nvidia2 not in its /dev"));
  EXPECT_THAT(why, HasSubstr("; and no value of CUDA_VISIBLE_DEVICES selects exactly the 2 it can open as the job "
                             "numbers them (the closest, CUDA_VISIBLE_DEVICES=0,1, shows host #0 (/dev/nvidia0)); "
                             "refusing to widen the allocation"));
  // The same third GPU alone: only the node is missing.
  why = refuse(three, "2", &first_two);
  EXPECT_THAT(why, HasSubstr("cannot open the device node of 1 of them (/dev/nvidia2"));
  EXPECT_THAT(why, Not(HasSubstr("selects exactly")));
  // A row Slurm allocated nothing of must be hidden; an empty TPU_VISIBLE_CHIPS is no value to
  // TPU's runtime, an empty ZE_AFFINITY_MASK hides nothing (nodes with an NVIDIA GPU beside them).
  for (const auto& [other, message] :
       {std::pair{"tpu-2x-v5e", "Slurm allocated no Google TPU device to this step, but no value of TPU_VISIBLE_CHIPS "
                                "hides the row's 2 device(s) (TPU_VISIBLE_CHIPS= is not accepted: "},
        std::pair{"xpu-2x-arc", "Slurm allocated no Intel GPU device to this step, but no value of ZE_AFFINITY_MASK "
                                "hides the row's 3 device(s) (ZE_AFFINITY_MASK= shows host #0 (/dev/dri/card0), "}}) {
    v1::Inventory mixed = Probe("nvidia-2x-h100");
    const v1::Inventory beside = Probe(other);
    for (const v1::Backend& b : beside.backends()) {
      if (b.row() != v1::ROW_CPU && b.devices_size() > 0) *mixed.add_backends() = b;
    }
    absl::StatusOr<slurm::Exports> out =
        slurm::TaskPrologExports(mixed, {{"SLURM_STEP_GPUS", "0"}}, nullptr, slurm::StepNumbering::kIndex);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << other;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(message));
  }
}

// Only checked values are exported: a SLURM_LOCALID carrying a newline and an `export` line of its
// own (which slurmstepd would apply after the real mask, widening it) is refused, and so is every
// other value that is not a decimal integer in the daemon's range.
TEST(SlurmTaskPrologTest, ExportsOnlyCheckedRanks) {
  const v1::Inventory inv = Probe("nvidia-2x-h100");
  const auto run = [&](const std::map<std::string, std::string>& env) {
    return slurm::TaskPrologExports(inv, env, nullptr, slurm::StepNumbering::kDevNum);
  };
  absl::StatusOr<slurm::Exports> out =
      run({{"SLURM_STEP_GPUS", "1"}, {"SLURM_LOCALID", "0\nexport CUDA_VISIBLE_DEVICES=0,1"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(),
            "SLURM_LOCALID='0\\nexport CUDA_VISIBLE_DEVICES=0,1': not a task id; accepted: a decimal integer "
            "0..2147483646");
  struct Bad {
    const char* var;
    const char* value;
  };
  for (const Bad& bad : {Bad{"SLURM_LOCALID", ""}, Bad{"SLURM_LOCALID", "-1"}, Bad{"SLURM_LOCALID", "+1"},
                         Bad{"SLURM_LOCALID", " 1"}, Bad{"SLURM_LOCALID", "1 "}, Bad{"SLURM_LOCALID", "0x1"},
                         Bad{"SLURM_LOCALID", "2147483647"}, Bad{"SLURM_LOCALID", "99999999999"},
                         Bad{"SLURM_NTASKS", "0"}, Bad{"SLURM_NTASKS", "2\n"}, Bad{"SLURM_NTASKS", "2147483648"},
                         Bad{"SLURM_NTASKS", "1e3"}}) {
    std::map<std::string, std::string> env = {{"SLURM_STEP_GPUS", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "4"}};
    env[bad.var] = bad.value;
    out = run(env);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << bad.var << "=" << bad.value;
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(std::string(bad.var) + "='"));
  }
  out = run({{"SLURM_LOCALID", "4"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(out.status().message(), "SLURM_LOCALID=4 is not below SLURM_NTASKS=4; accepted: 0..3");
  // An allocation entry is a decimal number too; its value is quoted escaped, never raw.
  out = run({{"SLURM_STEP_GPUS", "1\nexport CUDA_VISIBLE_DEVICES=0,1"}});
  EXPECT_EQ(out.status().message(), "SLURM_STEP_GPUS='1\\nexport CUDA_VISIBLE_DEVICES=0,1': entry "
                                    "'1\\nexport CUDA_VISIBLE_DEVICES=0' is not a GPU number (accepted: comma list of "
                                    "numbers)");
  // The largest accepted values, and a launcher's own LOCAL_RANK left alone (not read, not checked).
  EXPECT_THAT(Prolog(inv, {{"SLURM_LOCALID", "2147483646"}, {"SLURM_NTASKS", "2147483647"}}),
              ElementsAre(Pair("LOCAL_RANK", "2147483646"), Pair("WORLD_SIZE", "2147483647")));
  EXPECT_THAT(Prolog(inv, {{"SLURM_STEP_GPUS", "0"}, {"LOCAL_RANK", "0"}, {"SLURM_LOCALID", "x"}, {"SLURM_NTASKS", "2"}}),
              ElementsAre(Pair("CUDA_VISIBLE_DEVICES", "0"), Pair("WORLD_SIZE", "2")));
}

// The node health check: one NHC-style failure per FAULT or LOST device, naming its counter, value
// and source; DEGRADED devices and healthy hosts give none.
TEST(SlurmHealthCheckTest, FaultAndLostDevicesFailNamingTheirCounters) {
  std::vector<slurm::HealthFailure> failures = slurm::HealthFailures(Probe("amd-2x-mi210-ras"));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(slurm::NhcFailureLine(failures[0]),
            "ERROR:  devplace:  Health check failed:  cuda/amd device 0 (0000:63:00.0) FAULT: ras/umc_err_count ue 2 "
            "(sysfs /sys/bus/pci/devices/0000:63:00.0/ras/umc_err_count)");
  EXPECT_EQ(slurm::DrainReason(failures),
            "devplace: cuda/amd device 0 (0000:63:00.0) FAULT: ras/umc_err_count ue 2 "
            "(sysfs /sys/bus/pci/devices/0000:63:00.0/ras/umc_err_count)");
  // 3b:00.0 is DEGRADED (a narrower link): usable, so only 9a:00.0 fails.
  failures = slurm::HealthFailures(Probe("nvidia-3x-h100-health"));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0].message, HasSubstr("cuda/nvidia device 2 (0000:9a:00.0) FAULT: aer_dev_fatal 1"));
  // A LOST device without a counter: the verdict's reason.
  failures = slurm::HealthFailures(Probe("nvidia-fell-off-bus"));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_THAT(failures[0].message, HasSubstr("(0000:9a:00.0) LOST: "));
  EXPECT_THAT(failures[0].message, HasSubstr("fell off the bus"));
  EXPECT_THAT(slurm::HealthFailures(Probe("amd-2x-mi210")), IsEmpty());
  EXPECT_THAT(slurm::HealthFailures(Probe("nvidia-2x-h100")), IsEmpty());
}

TEST(SlurmHealthCheckTest, DrainReasonIsBoundedAndHasNothingToSplitOn) {
  v1::Device d;
  const std::vector<slurm::HealthFailure> failures = {{&d, "a \"quoted\" 'one'\nnext\\line"},
                                                      {&d, std::string(400, 'x')}};
  const std::string reason = slurm::DrainReason(failures);
  EXPECT_EQ(reason.size(), slurm::kMaxDrainReasonBytes);
  EXPECT_TRUE(absl::StartsWith(reason, "devplace: a _quoted_ _one__next_line; xxx")) << reason;
  EXPECT_TRUE(absl::EndsWith(reason, "x...")) << reason;
}

TEST(SlurmHealthCheckTest, ALongDrainReasonIsCutBetweenCharactersNeverInsideOne) {
  v1::Device d;
  // The prefix (10 bytes), "a", then 130 two-byte "é": byte 252, where the cut would fall, is the
  // second byte of a character, so the reason keeps 251 bytes and "...".
  std::string message = "a";
  for (int i = 0; i < 130; ++i) message += "\xc3\xa9";
  const std::string reason = slurm::DrainReason({{&d, message}});
  EXPECT_EQ(reason.size(), 251u + 3u);
  EXPECT_TRUE(absl::EndsWith(reason, "\xc3\xa9...")) << reason;
}

}  // namespace
}  // namespace devplace::testing
