// ResolveOptions: FromEnvironment over setenv and a fake /dev tree, ToRequest, and the request it
// builds fed to the real resolver.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/backends.h"
#include "server/placement/env_typos.h"
#include "server/placement/job_environment.h"
#include "server/placement/resolver.h"
#include "tests/client/test_server.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Clears every placement variable for the test, restoring them afterwards.
class EnvironmentTest : public ::testing::Test {
 protected:
  EnvironmentTest() {
    for (const std::string& name : PlacementEnvironmentVariables()) {
      cleared_.push_back(std::make_unique<ScopedEnv>(name, nullptr));
    }
  }
  void Set(const std::string& name, const char* value) {
    cleared_.push_back(std::make_unique<ScopedEnv>(name, value));
  }

  TempDir dev_;

 private:
  std::vector<std::unique_ptr<ScopedEnv>> cleared_;
};

TEST_F(EnvironmentTest, ListsThePlacementVariablesTheServerReads) {
  // SDAA_VISIBLE_DEVICES joined with the sdaa row, USE_TF and USE_TORCH with Transformers 4.x's V-TF-USE-TF.
  EXPECT_EQ(PlacementEnvironmentVariables().size(), 24u);
  // The two the daemon reads beyond the mask variables: Level Zero's device order (E-ORDER) and
  // the Gaudi container runtime's variable (H-HPU, explained to the job).
  EXPECT_THAT(PlacementEnvironmentVariables(), ::testing::Contains("ZE_ENABLE_PCI_ID_DEVICE_ORDER"));
  EXPECT_THAT(PlacementEnvironmentVariables(), ::testing::Contains("HABANA_VISIBLE_DEVICES"));
  // Every mask variable of the hardware table is among them.
  const v1::ListBackendsResponse table = placement::ListBackendsResponse();
  for (const v1::BackendInfo& row : table.backends()) {
    for (const std::string& mask : row.mask_variables()) {
      EXPECT_THAT(PlacementEnvironmentVariables(), ::testing::Contains(mask)) << row.name();
    }
  }
}

TEST_F(EnvironmentTest, CopiesSetVariablesIncludingEmptyOnes) {
  Set("CUDA_VISIBLE_DEVICES", "1,0");
  Set("ZE_AFFINITY_MASK", "");  // set but empty: hides every Intel GPU
  Set("ACCELERATE_USE_CPU", "false");
  Set("DEVPLACE_UNRELATED", "x");
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  EXPECT_THAT(options.env, UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", "1,0"), Pair("ZE_AFFINITY_MASK", ""),
                                                Pair("ACCELERATE_USE_CPU", "false")));
  EXPECT_EQ(options.workload, v1::WORKLOAD_UNSPECIFIED);
  EXPECT_FALSE(options.local_rank.has_value());
  EXPECT_FALSE(options.world_size.has_value());
}

TEST_F(EnvironmentTest, CopiesTheLevelZeroOrderAndGaudiContainerVariables) {
  Set("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1");
  Set("HABANA_VISIBLE_DEVICES", "3");
  Set("HABANA_VISIBLE_MODULES", "3");
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  EXPECT_THAT(options.env, UnorderedElementsAre(Pair("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"),
                                                Pair("HABANA_VISIBLE_DEVICES", "3"), Pair("HABANA_VISIBLE_MODULES", "3")));
  const ResolveOptions job = ResolveOptions::ForJob(
      v1::WORKLOAD_TRAINING, {{"ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"}, {"HABANA_VISIBLE_DEVICES", "all"}});
  EXPECT_EQ(job.env, (std::map<std::string, std::string>{{"HABANA_VISIBLE_DEVICES", "all"},
                                                         {"ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1"}}));
}

TEST_F(EnvironmentTest, ListIsTheOneTheDaemonsTypoRuleKnows) {
  EXPECT_EQ(PlacementEnvironmentVariables(), placement::ReadEnvironmentVariables());
}

// Every single edit of every placement variable (over a few letters) that the daemon calls a near
// miss, and a set of two-edit ones, pass the client's cheap filter: the filter is a superset.
TEST_F(EnvironmentTest, TypoFilterIsASupersetOfTheDaemonsRule) {
  auto check = [](const std::string& name) {
    if (placement::NearMissOf(name)) {
      EXPECT_TRUE(PossiblePlacementTypo(name)) << name;
    }
  };
  int near_misses = 0;
  for (const std::string& v : PlacementEnvironmentVariables()) {
    std::vector<std::string> edits;
    for (size_t i = 0; i <= v.size(); ++i) {
      for (char c : std::string("A_sz")) {
        edits.push_back(v.substr(0, i) + c + v.substr(i));                          // insertion
        if (i < v.size()) edits.push_back(v.substr(0, i) + c + v.substr(i + 1));  // substitution
      }
      if (i < v.size()) edits.push_back(v.substr(0, i) + v.substr(i + 1));  // deletion
      if (i + 1 < v.size()) edits.push_back(v.substr(0, i) + v[i + 1] + v[i] + v.substr(i + 2));  // transposition
    }
    for (const std::string& e : edits) {
      check(e);
      near_misses += placement::NearMissOf(e) ? 1 : 0;
      check(e.substr(1));        // a second edit: first character dropped
      check(e + "S");            // or one appended
    }
  }
  EXPECT_GT(near_misses, 1000);
  EXPECT_FALSE(PossiblePlacementTypo("CUDA_VISIBLE_DEVICES"));  // exact names are not typos
  EXPECT_FALSE(PossiblePlacementTypo("PATH"));
  EXPECT_FALSE(PossiblePlacementTypo("CUDA_VISIBLE_DEVIC\xc3\x89"));  // non-ASCII names are never sent
}

TEST_F(EnvironmentTest, CapturesAtMostEightNearMissesWithoutTheirValues) {
  Set("CUDA_VISIBLE_DEVICES", "1");
  const char* typos[] = {"CUDA_VISIBLE_DEVICE", "cuda_visible_devices", "LOCAL_RANKS", "WORLDSIZE",
                         "ROCR_VISIBLE_DEVICE", "HIP_VISIBLE_DEVICE", "TPU_VISIBLE_CHIP", "USE_TORCH_XLAA",
                         "ZE_AFFINITY_MASKS", "ACCELERATE_USE_GPU"};
  for (const char* name : typos) Set(name, "a value that is not sent");
  Set("DEVPLACE_UNRELATED", "x");
  std::vector<std::string> expected(std::begin(typos), std::end(typos));
  std::sort(expected.begin(), expected.end());
  expected.resize(kMaxCapturedNearMisses);
  std::map<std::string, std::string> want{{"CUDA_VISIBLE_DEVICES", "1"}};
  for (const std::string& name : expected) want[name] = "";

  EXPECT_EQ(ResolveOptions::FromEnvironment(dev_.path()).env, want);
  std::map<std::string, std::string> job_env{{"CUDA_VISIBLE_DEVICES", "1"}, {"DEVPLACE_UNRELATED", "x"}};
  for (const char* name : typos) job_env[name] = "v";
  EXPECT_EQ(ResolveOptions::ForJob(v1::WORKLOAD_INFERENCE, job_env).env, want);
}

TEST_F(EnvironmentTest, LocalRankAndWorldSizeBecomeFields) {
  Set("LOCAL_RANK", "3");
  Set("WORLD_SIZE", " 4 ");
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  EXPECT_EQ(options.local_rank, 3);
  EXPECT_EQ(options.world_size, 4);
  EXPECT_THAT(options.env, IsEmpty());
}

TEST_F(EnvironmentTest, MalformedRankStaysInEnvForTheServerToReject) {
  Set("LOCAL_RANK", "abc");
  Set("WORLD_SIZE", "0");
  ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  EXPECT_FALSE(options.local_rank.has_value());
  EXPECT_FALSE(options.world_size.has_value());
  EXPECT_THAT(options.env, UnorderedElementsAre(Pair("LOCAL_RANK", "abc"), Pair("WORLD_SIZE", "0")));

  options.workload = v1::WORKLOAD_TRAINING;
  absl::StatusOr<v1::ResolveDeviceResponse> r =
      placement::Resolve(FixtureInventory("nvidia-2x-h100"), options.ToRequest());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("env.LOCAL_RANK"));
}

TEST_F(EnvironmentTest, AccelerateMinusOneRankStaysInEnv) {
  Set("LOCAL_RANK", "-1");  // Accelerate's "not distributed"
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  EXPECT_FALSE(options.local_rank.has_value());
  EXPECT_THAT(options.env, UnorderedElementsAre(Pair("LOCAL_RANK", "-1")));
}

TEST_F(EnvironmentTest, ScansAcceleratorDeviceNodes) {
  for (const char* node : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1",
                           "dri/renderD128", "dri/card1", "dri/by-path/", "neuron0", "vfio/0", "vfio/vfio",
                           "accel0", "accel/accel0", "davinci0", "davinci_manager", "cambricon_dev0",
                           "cambricon_ctl", "mtgpu.0", "null", "sda", "tty0"}) {
    dev_.Touch(node);
  }
  EXPECT_THAT(JobDeviceNodes(dev_.path()),
              ElementsAre("/dev/accel/accel0", "/dev/accel0", "/dev/cambricon_dev0", "/dev/davinci0",
                          "/dev/dri/card1", "/dev/dri/renderD128", "/dev/mtgpu.0", "/dev/neuron0", "/dev/nvidia0",
                          "/dev/nvidia1", "/dev/vfio/0"));
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  ASSERT_TRUE(options.job_device_nodes.has_value());
  EXPECT_EQ(*options.job_device_nodes, JobDeviceNodes(dev_.path()));
}

TEST_F(EnvironmentTest, NoNodesIsAnEmptyListNotUnknown) {
  const ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path() + "/missing");
  ASSERT_TRUE(options.job_device_nodes.has_value());
  EXPECT_THAT(*options.job_device_nodes, IsEmpty());
  const v1::ResolveDeviceRequest request = options.ToRequest();
  EXPECT_TRUE(request.has_job_devices());
  EXPECT_EQ(request.job_devices().device_nodes_size(), 0);
}

TEST(ResolveOptionsTest, ToRequestCarriesEveryField) {
  ResolveOptions options;
  v1::ResolveDeviceRequest request = options.ToRequest();
  EXPECT_FALSE(request.has_local_rank());
  EXPECT_FALSE(request.has_world_size());
  EXPECT_FALSE(request.has_job_devices());
  EXPECT_FALSE(request.has_model_size_bytes());

  options.workload = v1::WORKLOAD_INFERENCE;
  options.convention = v1::CONVENTION_PIPELINE;
  options.device_map = "0";
  options.use_cpu = true;
  options.local_rank = 0;
  options.world_size = 1;
  options.env = {{"CUDA_VISIBLE_DEVICES", ""}};
  options.runtime_backends = {"cuda", "xla"};
  options.job_device_nodes = std::vector<std::string>{"/dev/nvidia1"};
  options.strict = true;
  options.model_size_bytes = 7ull << 30;
  request = options.ToRequest();
  EXPECT_EQ(request.workload(), v1::WORKLOAD_INFERENCE);
  EXPECT_EQ(request.convention(), v1::CONVENTION_PIPELINE);
  EXPECT_EQ(request.device_map(), "0");
  EXPECT_TRUE(request.use_cpu());
  EXPECT_TRUE(request.has_local_rank());
  EXPECT_EQ(request.local_rank(), 0);
  EXPECT_EQ(request.world_size(), 1);
  EXPECT_THAT(request.env(), UnorderedElementsAre(Pair("CUDA_VISIBLE_DEVICES", "")));
  EXPECT_THAT(request.runtime_backends(), ElementsAre("cuda", "xla"));
  EXPECT_THAT(request.job_devices().device_nodes(), ElementsAre("/dev/nvidia1"));
  EXPECT_TRUE(request.strict());
  EXPECT_EQ(request.model_size_bytes(), 7ull << 30);
}

TEST_F(EnvironmentTest, ContainerSeeingOneGpuGetsItInItsOwnNumbering) {
  dev_.Touch("nvidia1");
  dev_.Touch("nvidiactl");
  ResolveOptions options = ResolveOptions::FromEnvironment(dev_.path());
  options.workload = v1::WORKLOAD_INFERENCE;
  options.device_map = "auto";
  absl::StatusOr<v1::ResolveDeviceResponse> r =
      placement::Resolve(FixtureInventory("nvidia-2x-h100"), options.ToRequest());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");
  ASSERT_GE(r->placed_size(), 1);
  EXPECT_EQ(r->placed(0).host_index(), 1);
}

}  // namespace
}  // namespace devplace::testing

namespace devplace::testing {
namespace {

TEST_F(EnvironmentTest, ForJobReadsNothingOfTheCallingProcess) {
  Set("CUDA_VISIBLE_DEVICES", "3");  // the scheduler's own, not the job's
  Set("LOCAL_RANK", "5");
  const ResolveOptions job = ResolveOptions::ForJob(
      v1::WORKLOAD_TRAINING, {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "x"}, {"PATH", "/bin"}});
  EXPECT_EQ(job.workload, v1::WORKLOAD_TRAINING);
  EXPECT_EQ(job.local_rank, 1);
  EXPECT_FALSE(job.world_size.has_value());
  EXPECT_EQ(job.env, (std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "0,1"}, {"WORLD_SIZE", "x"}}));
  EXPECT_FALSE(job.job_device_nodes.has_value());  // unknown, not this process's /dev
  const ResolveOptions none = ResolveOptions::ForJob(v1::WORKLOAD_INFERENCE, {}, std::vector<std::string>{});
  EXPECT_TRUE(none.env.empty());
  ASSERT_TRUE(none.job_device_nodes.has_value());
  EXPECT_TRUE(none.job_device_nodes->empty());
}

// The packages libdevplace reads from a job's environment (and the Python client's
// JOB_PYTHON_PACKAGES, generated from them) are torch, every device plug-in the resolver knows
// (V-JOB-BUILD), transformers and accelerate: a plug-in added to one list and not the other would
// be read and ignored, or never read.
TEST(JobPythonPackagesTest, AreTorchTheResolversPluginsAndTheTwoLibraries) {
  std::vector<std::string> expected = {"torch"};
  for (const placement::PluginPackage& p : placement::PluginPackages()) expected.push_back(std::string(p.name));
  expected.push_back("transformers");
  expected.push_back("accelerate");
  EXPECT_EQ(JobPythonPackages(), expected);
  for (const std::string& name : JobPythonPackages()) EXPECT_EQ(placement::NormalizePackageName(name), name);
}

// ReadDeviceAllocation over the NVIDIA DRA fixture (tests/fixtures/dra): the v1alpha1 object of the
// stream, its device and scalar attributes, carried by ToRequest and resolved to the claimed GPU.
TEST(DeviceAllocationTest, ReadsTheFixtureAndTheResolverKeepsTheClaimedGpu) {
  absl::StatusOr<v1::DeviceAllocation> allocation =
      ReadDeviceAllocation(std::string(DEVPLACE_FIXTURES_DIR) + "/dra/nvidia");
  ASSERT_TRUE(allocation.ok()) << allocation.status();
  ASSERT_EQ(allocation->devices_size(), 1);
  EXPECT_THAT(allocation->problems(), IsEmpty());
  const v1::AllocatedDevice& d = allocation->devices(0);
  EXPECT_EQ(d.claim(), "gpu-claim");
  EXPECT_EQ(d.driver(), "gpu.nvidia.com");
  EXPECT_EQ(d.attributes().at("uuid"), "GPU-00000000-0000-4000-8000-000000000002");
  EXPECT_EQ(d.attributes().at("index"), "1");
  EXPECT_EQ(d.attributes().at("cudaComputeCapability"), "9.0.0");
  EXPECT_EQ(d.attributes().size(), 12u);

  ResolveOptions options = ResolveOptions::ForJob(v1::WORKLOAD_TRAINING, {});
  options.device_allocation = *allocation;
  const v1::Inventory inventory = FixtureInventory("nvidia-2x-h100");
  absl::StatusOr<v1::ResolveDeviceResponse> answer = placement::Resolve(inventory, options.ToRequest());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cuda:0");
  ASSERT_EQ(answer->placed_size(), 1);
  EXPECT_EQ(answer->placed(0).host_index(), 1);

  EXPECT_EQ(ReadDeviceAllocation("/nonexistent/dra").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadDeviceAllocation(std::string(DEVPLACE_FIXTURES_DIR) + "/dra/README.md").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace devplace::testing
