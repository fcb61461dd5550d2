// ReadJobPython: the torch build and plug-ins -> runtime backends (V-JOB-BUILD), the libraries
// found, and the bounds of ResolveDeviceRequest.job_environment.
#include "server/placement/job_environment.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace devplace::placement {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobEnvironment Env(std::vector<std::pair<std::string, std::string>> packages) {
  v1::JobEnvironment env;
  env.set_source("test tree");
  for (auto& [name, version] : packages) {
    v1::PythonPackage* p = env.add_packages();
    p->set_name(name);
    p->set_version(version);
  }
  return env;
}

TEST(JobPython, LocalBuildTagGivesTheBackend) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"2.5.1+cu124", {"cuda", "cpu"}}, {"2.5.1+rocm6.2", {"rocm", "cpu"}}, {"2.7.0+xpu", {"xpu", "cpu"}},
      {"2.5.1+cpu", {"cpu"}},           {"2.5.1+cpu.cxx11.abi", {"cpu"}},   {"2.5.1", {}},
      {"2.4.0a0+git74cd574", {}},
  };
  for (const auto& [version, backends] : cases) {
    absl::StatusOr<JobPython> job = ReadJobPython(Env({{"torch", version}}));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->backends, backends) << version;
    EXPECT_EQ(job->torch, version);
    EXPECT_FALSE(job->transformers.has_value());
  }
}

TEST(JobPython, PluginsAddTheirDeviceTypes) {
  absl::StatusOr<JobPython> job =
      ReadJobPython(Env({{"torch", "2.1.0"}, {"Torch_NPU", "2.1.0.post8"}, {"transformers", "4.46.3"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->backends, ElementsAre("npu", "cpu"));
  EXPECT_THAT(job->plugins, ElementsAre("Torch_NPU 2.1.0.post8"));
  EXPECT_EQ(job->transformers, "4.46.3");
  for (const auto& [name, backend] : std::vector<std::pair<std::string, std::string>>{
           {"torch_mlu", "mlu"}, {"torch-musa", "musa"}, {"torch_sdaa", "sdaa"},
           {"intel_extension_for_pytorch", "xpu"}, {"habana-torch-plugin", "hpu"}, {"torch_xla", "xla"},
           {"torch-neuronx", "neuron"}, {"torch-tpu", "tpu"}}) {
    absl::StatusOr<JobPython> one = ReadJobPython(Env({{"torch", "2.5.1"}, {name, "1.0"}}));
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_THAT(one->backends, ElementsAre(backend, "cpu")) << name;
  }
  // IPEX's CPU variant adds no xpu.
  absl::StatusOr<JobPython> ipex_cpu =
      ReadJobPython(Env({{"torch", "2.5.1+cpu"}, {"intel_extension_for_pytorch", "2.5.0+cpu"}}));
  ASSERT_TRUE(ipex_cpu.ok());
  EXPECT_THAT(ipex_cpu->backends, ElementsAre("cpu"));
}

TEST(JobPython, NoTorchTellsNothing) {
  absl::StatusOr<JobPython> job = ReadJobPython(Env({{"accelerate", "1.0.0"}}));
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(job->backends.empty());
  EXPECT_FALSE(job->torch.has_value());
  EXPECT_EQ(job->accelerate, "1.0.0");
  EXPECT_THAT(job->backends_reason, HasSubstr("torch is not installed"));
}

TEST(JobPython, BoundsAreInvalidArgument) {
  EXPECT_THAT(ReadJobPython(Env({{"torch", "2.5.1"}, {"Torch", "2.4.0"}})).status().message(),
              HasSubstr("job_environment.packages: torch is listed twice"));
  EXPECT_THAT(ReadJobPython(Env({{"", "1.0"}})).status().message(), HasSubstr("want a non-empty name"));
  v1::JobEnvironment many;
  for (int i = 0; i < 65; ++i) many.add_packages()->set_name("p" + std::to_string(i));
  EXPECT_THAT(ReadJobPython(many).status().message(), HasSubstr("65 entries; at most 64"));
}

TEST(JobPython, ProblemsAreKeptAndBounded) {
  v1::JobEnvironment env = Env({{"torch", ""}});
  env.add_problems("/site/torch-2.5.1.dist-info/METADATA: its Version is not UTF-8 text; torch sent without a version");
  absl::StatusOr<JobPython> job = ReadJobPython(env);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->problems, ElementsAre(env.problems(0)));
  EXPECT_EQ(job->torch, "");  // installed, release unknown
  v1::JobEnvironment many = Env({});
  for (int i = 0; i < 65; ++i) many.add_problems("p");
  EXPECT_EQ(ReadJobPython(many).status().message(), "job_environment.problems: 65 entries; at most 64");
  v1::JobEnvironment long_one = Env({});
  long_one.add_problems(std::string(1025, 'x'));
  EXPECT_EQ(ReadJobPython(long_one).status().message(), "job_environment.problems[0]: 1025 bytes; at most 1024");
}

TEST(JobPython, NamesAreComparedAsPep503Does) {
  EXPECT_EQ(NormalizePackageName("Intel_Extension.For--PyTorch"), "intel-extension-for-pytorch");
}

}  // namespace
}  // namespace devplace::placement
