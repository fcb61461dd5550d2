// docs/SEMANTICS.md sections 6, 7 and 10: what the job's libraries make of a device it names
// itself. I-CUDA-RANK (from_pretrained rewrites device_map "cuda" per rank from Transformers 5.0,
// V-TF-CUDA-RANK) and G-PLUGIN (a device type only a PyTorch plug-in registers, when the job's
// build is known not to have it), each at both sides of its boundary. Each case asserts the
// status, the device, the placed host device, and the words of the rule that decided.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/placement/job_environment.h"
#include "server/placement/resolver.h"
#include "server/placement/torch_device_types.h"
#include "tests/placement/answer_check.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/placement/resolve_case.h"

namespace devplace::testing {
namespace {

using placement::Resolve;
using Code = absl::StatusCode;

const auto CUDA = v1::ROW_CUDA_NVIDIA;
const auto ACC = v1::CONVENTION_ACCELERATE;

v1::ResolveDeviceRequest Tf(const std::string& version, Req r) {
  r.Transformers(version);
  return r;
}

// The request with a job_environment listing these packages (name, version).
v1::ResolveDeviceRequest Job(Req r, std::vector<std::pair<std::string, std::string>> packages) {
  v1::ResolveDeviceRequest out = r;
  out.mutable_job_environment()->set_source("/opt/job/site-packages");
  for (const auto& [name, version] : packages) {
    v1::PythonPackage* p = out.mutable_job_environment()->add_packages();
    p->set_name(name);
    p->set_version(version);
  }
  return out;
}

std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  const auto cuda2 = HostOf({{CUDA, 2}});
  const auto amd2 = HostOf({{v1::ROW_CUDA_AMD, 2}});
  const auto npu2 = HostOf({{v1::ROW_NPU, 2}});
  const auto cpu = HostOf({});
  // ---- I-CUDA-RANK: device_map "cuda" per rank (V-TF-CUDA-RANK, Transformers 5.0.0) ----------
  // Before 5.0: torch.device("cuda") itself, the current device.
  c.push_back({.id = "V24_cuda_4_57_rank1", .host = cuda2, .request = Tf("4.57.0", Req::Infer("cuda").Rank(1, 2)),
               .device = "cuda", .words = {"I-CUDA-RANK device_map \"cuda\" stays cuda", "V-TF-CUDA-RANK (Transformers 4.57.0 < 5.0.0"},
               .first_host_index = 0});
  c.push_back({.id = "V24_cuda_5_0_rank1", .host = cuda2, .request = Tf("5.0.0", Req::Infer("cuda").Rank(1, 2)),
               .device = "cuda:1", .words = {"I-CUDA-RANK device_map \"cuda\" -> cuda:1 (LOCAL_RANK = 1)",
                                             "V-TF-CUDA-RANK (Transformers 5.0.0 >= 5.0.0"},
               .first_host_index = 1});
  // The newest release, rank from env, unset, -1.
  c.push_back({.id = "N22_cuda_env_rank1", .host = cuda2, .request = Req::Infer("cuda").Env("LOCAL_RANK", "1"),
               .device = "cuda:1", .first_host_index = 1});
  c.push_back({.id = "N22_cuda_no_rank", .host = cuda2, .request = Req::Infer("cuda"), .device = "cuda:0",
               .words = {"(LOCAL_RANK unset: 0)", "I-STR device string 'cuda' -> cuda:0"}, .first_host_index = 0});
  c.push_back({.id = "N22_cuda_rank_minus1", .host = cuda2, .request = Req::Infer("cuda").Env("LOCAL_RANK", "-1"),
               .code = Code::kInvalidArgument, .words = {"device_map: cuda with env.LOCAL_RANK=-1", "\"cuda:-1\"", "V-TF-CUDA-RANK"}});
  c.push_back({.id = "V24_cuda_4_57_rank_minus1", .host = cuda2,
               .request = Tf("4.57.0", Req::Infer("cuda").Env("LOCAL_RANK", "-1")), .device = "cuda", .first_host_index = 0});
  // One GPU visible per process: rank 1 names a GPU the process does not see.
  c.push_back({.id = "N22_cuda_rank1_one_visible", .host = cuda2,
               .request = Req::Infer("cuda").Rank(1, 2).Env("CUDA_VISIBLE_DEVICES", "1"), .code = Code::kFailedPrecondition,
               .words = {"device_map: cuda:1 is not visible to this job", "device_map \"cuda\" became cuda:1",
                         "pass device_map=\"cuda:0\""}});
  // A job whose torch cannot use the GPUs: the error says where cuda:0 came from.
  c.push_back({.id = "N22_cuda_runtime_cpu", .host = cuda2, .request = Req::Infer("cuda").Runtime({"cpu"}),
               .code = Code::kFailedPrecondition,
               .words = {"device_map: cuda:0 cannot be used by this job",
                         "(device_map \"cuda\" became cuda:0 from the job's LOCAL_RANK (unset: 0), V-TF-CUDA-RANK)"}});
  // AMD GPUs are cuda too; other types and other spellings are not rewritten.
  c.push_back({.id = "N22_cuda_amd_rank1", .host = amd2, .request = Req::Infer("cuda").Rank(1, 2), .device = "cuda:1",
               .first_host_index = 1});
  c.push_back({.id = "N22_npu_not_rewritten", .host = npu2, .request = Req::Infer("npu").Rank(1, 2), .device = "npu",
               .first_host_index = 0});
  c.push_back({.id = "N22_cuda0_not_rewritten", .host = cuda2, .request = Req::Infer("cuda:0").Rank(1, 2),
               .device = "cuda:0", .first_host_index = 0});
  c.push_back({.id = "N22_pipeline_not_rewritten", .host = cuda2, .request = Req::Pipe("cuda"), .device = "cuda",
               .first_host_index = 0});
  // ---- G-PLUGIN: a device type only a plug-in registers ----------------------------------------
  // ACCELERATE_TORCH_DEVICE: build told by runtime_backends, both conventions stop at start-up.
  for (const auto& [name, conv] : std::vector<std::pair<std::string, v1::Convention>>{{"acc", ACC}, {"ta", v1::CONVENTION_TRAINING_ARGUMENTS}}) {
    c.push_back({.id = "N23_env_npu_runtime_cuda_" + name, .host = cuda2,
                 .request = Req::Train(conv).Runtime({"cuda"}).Env("ACCELERATE_TORCH_DEVICE", "npu:0"),
                 .code = Code::kFailedPrecondition,
                 .words = {"env.ACCELERATE_TORCH_DEVICE=npu:0: the job's PyTorch cannot parse device type 'npu'",
                           "only the torch-npu plug-in registers it (import torch_npu)",
                           "runtime_backends given in the request (cuda) has no npu",
                           "device type at start of device string: npu", "install torch-npu", "G-PLUGIN"}});
  }
  // The plug-in present: today's answer.
  c.push_back({.id = "N23_env_npu_runtime_npu", .host = npu2,
               .request = Req::Train(ACC).Runtime({"npu"}).Env("ACCELERATE_TORCH_DEVICE", "npu:1"), .device = "npu:1",
               .first_host_index = 1});
  // Build not told: today's answer with the warning, which now says who registers the type.
  c.push_back({.id = "N23_env_npu_not_told", .host = cuda2,
               .request = Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "npu"), .device = "npu",
               .words = {"ACCELERATE_TORCH_DEVICE=npu is used verbatim, but no npu device is available to this job",
                         "npu exists in torch only once the torch-npu plug-in is imported", "runtime_backends not told"}});
  // c10's own names parse without any plug-in (hpu, xla): today's answer.
  c.push_back({.id = "N23_env_hpu_runtime_cuda", .host = cuda2,
               .request = Req::Train(ACC).Runtime({"cuda"}).Env("ACCELERATE_TORCH_DEVICE", "hpu"), .device = "hpu"});
  c.push_back({.id = "N23_env_xla_runtime_cuda", .host = cuda2,
               .request = Req::Train(ACC).Runtime({"cuda"}).Env("ACCELERATE_TORCH_DEVICE", "xla:0"), .device = "xla:0"});
  // An explicit xla device (pipeline, from_pretrained) is torch_xla's: a torch-tpu job without torch_xla cannot move
  // its model there (the library raises), with torch_xla, or not told, it is the TPU.
  const auto tpu2 = HostOf({{v1::ROW_TPU, 2}});
  for (const char* device : {"xla", "xla:0"}) {
    c.push_back({.id = std::string("XLA_") + (device[3] ? "index_" : "") + "pipeline_torch_tpu", .host = tpu2,
                 .request = Req::Pipe(device).Runtime({"tpu"}), .code = Code::kFailedPrecondition,
                 .words = {"is torch_xla's device, and runtime_backends lacks xla", "(torch-tpu: tpu:0)"}});
  }
  c.push_back({.id = "XLA_from_pretrained_torch_xla", .host = tpu2, .request = Req::Infer("xla:0").Runtime({"xla"}),
               .device = "xla:0"});
  c.push_back({.id = "XLA_pipeline_not_told", .host = tpu2, .request = Req::Pipe("xla"), .device = "xla"});
  // Every plug-in type, named by its package.
  for (const auto& [type, package] : std::vector<std::pair<std::string, std::string>>{
           {"mlu", "torch-mlu"}, {"musa", "torch-musa"}, {"sdaa", "torch-sdaa"}, {"neuron", "torch-neuronx"},
           {"tpu", "torch-tpu"}}) {
    c.push_back({.id = "N23_env_" + type + "_runtime_cuda", .host = cuda2,
                 .request = Req::Train(ACC).Runtime({"cuda"}).Env("ACCELERATE_TORCH_DEVICE", type), .code = Code::kFailedPrecondition,
                 .words = {"cannot parse device type '" + type + "'", "install " + package}});
  }
  // Build told by the job's packages (V-JOB-BUILD): a CUDA torch without torch_npu; an untagged
  // torch with no plug-in (the base build is not told, but no plug-in is there); with torch_npu.
  c.push_back({.id = "N24_env_npu_job_cuda_torch", .host = npu2,
               .request = Job(Req::Train().Env("ACCELERATE_TORCH_DEVICE", "npu"), {{"torch", "2.5.1+cu124"}}),
               .code = Code::kFailedPrecondition,
               .words = {"the job's packages (/opt/job/site-packages) have torch 2.5.1+cu124 but no torch-npu"}});
  c.push_back({.id = "N24_env_npu_job_untagged_torch", .host = npu2,
               .request = Job(Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "npu"), {{"torch", "2.5.1"}}),
               .code = Code::kFailedPrecondition, .words = {"have torch 2.5.1 but no torch-npu"}});
  c.push_back({.id = "N24_env_npu_job_torch_npu", .host = npu2,
               .request = Job(Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "npu"),
                              {{"torch", "2.1.0"}, {"torch_npu", "2.1.0.post8"}}),
               .device = "npu", .first_host_index = 0});
  // runtime_backends given wins over the packages.
  c.push_back({.id = "N24_env_npu_given_wins", .host = npu2,
               .request = Job(Req::Train(ACC).Runtime({"npu"}).Env("ACCELERATE_TORCH_DEVICE", "npu"), {{"torch", "2.5.1"}}),
               .device = "npu"});
  // torch itself absent: not told (the V-JOB warning says torch is missing).
  c.push_back({.id = "N24_env_npu_job_no_torch", .host = cpu,
               .request = Job(Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "npu"), {{"accelerate", "1.14.0"}}),
               .device = "npu", .words = {"runtime_backends not told"}});
  // What the client could not read of the environment is a warning each; a package sent without a
  // version is installed, release unknown: the newest rules (V-JOB).
  {
    v1::ResolveDeviceRequest r = Job(Req::Infer("cuda:0"), {{"torch", "2.5.1+cu124"}, {"transformers", ""}});
    r.mutable_job_environment()->add_problems(
        "/opt/job/site-packages/transformers-4.x.dist-info/METADATA: its Version '4.x' is not a release devplace reads");
    c.push_back({.id = "N24_job_problem_is_a_warning", .host = cuda2, .request = r, .device = "cuda:0",
                 .words = {"the job's packages (/opt/job/site-packages) could not all be read: /opt/job/site-packages/"
                           "transformers-4.x.dist-info/METADATA: its Version '4.x' is not a release devplace reads; the "
                           "answer may not be the job's own (V-JOB)"},
                 .first_host_index = 0});
  }
  // Explicit device strings: from_pretrained and pipeline.
  c.push_back({.id = "N25_device_map_npu_runtime_cuda", .host = npu2, .request = Req::Infer("npu:1").Runtime({"cuda"}),
               .code = Code::kFailedPrecondition,
               .words = {"device_map: npu:1: the job's PyTorch cannot parse device type 'npu'",
                         "from_pretrained's torch.device(\"npu:1\") raises RuntimeError",
                         "reported as ValueError \"When passing device_map as a string", "install torch-npu"}});
  c.push_back({.id = "N25_pipeline_mlu_runtime_cuda", .host = cuda2, .request = Req::Pipe("mlu:0").Runtime({"cuda"}),
               .code = Code::kFailedPrecondition,
               .words = {"device_map (pipeline device): mlu:0: the job's PyTorch cannot parse device type 'mlu'",
                         "pipeline's torch.device(\"mlu:0\")", "install torch-mlu"}});
  c.push_back({.id = "N25_device_map_npu_runtime_npu", .host = npu2, .request = Req::Infer("npu:1").Runtime({"npu"}),
               .device = "npu:1", .words = {"G-PLUGIN npu exists in torch only once the torch-npu plug-in", "the job has it"},
               .first_host_index = 1});
  c.push_back({.id = "N25_device_map_npu_not_told", .host = npu2, .request = Req::Infer("npu:1"), .device = "npu:1",
               .words = {"runtime_backends not told, assumed installed"}, .first_host_index = 1});
  // c10's mps, by torch release (job_environment tells it): 1.11 has no mps, 1.12 has.
  c.push_back({.id = "V25_env_mps_torch_1_11", .host = HostOf({{v1::ROW_MPS, 1}}),
               .request = Job(Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "mps"), {{"torch", "1.11.0"}}),
               .code = Code::kFailedPrecondition, .words = {"c10 parses mps from torch 1.12 on, and the job has torch 1.11.0",
                                                "install torch >= 1.12"}});
  c.push_back({.id = "V25_env_mps_torch_1_12", .host = HostOf({{v1::ROW_MPS, 1}}),
               .request = Job(Req::Train(ACC).Env("ACCELERATE_TORCH_DEVICE", "mps"), {{"torch", "1.12.0"}}),
               .device = "mps"});
  return c;
}

class ExplicitDeviceCases : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(ExplicitDeviceCases, Resolves) {
  const ResolveCase& k = GetParam();
  const absl::StatusOr<v1::ResolveDeviceResponse> got = Resolve(k.host(), k.request);
  ASSERT_EQ(got.status().code(), k.code) << got.status();
  EXPECT_TRUE(SaysAll(got, k.words));
  if (!got.ok()) return;
  EXPECT_EQ(got->device(), k.device) << got->DebugString();
  if (k.first_host_index >= 0) {
    ASSERT_GT(got->placed_size(), 0) << got->DebugString();
    EXPECT_EQ(got->placed(0).host_index(), k.first_host_index) << got->DebugString();
  }
}

INSTANTIATE_TEST_SUITE_P(Semantics, ExplicitDeviceCases, ::testing::ValuesIn(Cases()), CaseId);

// The data: every placement type is either c10's own or has a plug-in that job_environment reads.
TEST(TorchDeviceTypes, EveryPlacementTypeIsC10sOrAPluginsThatTheJobReaderKnows) {
  const std::vector<std::string> c10 = {"cpu", "cuda", "xpu", "xla", "hpu", "mps"};
  const std::vector<std::string> plugins = {"neuron", "tpu", "npu", "mlu", "musa", "sdaa"};
  EXPECT_EQ(placement::TorchDeviceTypes().size(), c10.size() + plugins.size());
  for (const std::string& t : c10) {
    const placement::TorchDeviceType* e = placement::FindTorchDeviceType(t);
    ASSERT_NE(e, nullptr) << t;
    EXPECT_EQ(e->plugin, "") << t;
  }
  for (const std::string& t : plugins) {
    const placement::TorchDeviceType* e = placement::FindTorchDeviceType(t);
    ASSERT_NE(e, nullptr) << t;
    bool known = false;
    for (const placement::PluginPackage& p : placement::PluginPackages()) known |= p.name == e->plugin && p.backend == t;
    EXPECT_TRUE(known) << t << " " << e->plugin;
  }
  EXPECT_EQ(placement::FindTorchDeviceType("hip"), nullptr);
}

}  // namespace
}  // namespace devplace::testing
