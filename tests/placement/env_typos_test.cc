// E-TYPO (docs/SEMANTICS.md section 9): near misses of placement variables warn, naming the
// variable meant; exact and unrelated names never do; under strict it stays a warning.
#include "server/placement/env_typos.h"

#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using placement::EnvTypoWarnings;
using placement::FoldedEditDistance;
using placement::NearMissOf;

struct NearMiss {
  const char* name;
  const char* meant;  // nullptr: no warning
};

const NearMiss kTable[] = {
    {"CUDA_VISIBLE_DEVICE", "CUDA_VISIBLE_DEVICES"},     // deletion
    {"CUDA_VISIBLE_DEVICESS", "CUDA_VISIBLE_DEVICES"},   // insertion
    {"CUDA_VISBILE_DEVICES", "CUDA_VISIBLE_DEVICES"},    // transposition
    {"CUDA_VISIBLE_DEVISES", "CUDA_VISIBLE_DEVICES"},    // substitution
    {"cuda_visible_devices", "CUDA_VISIBLE_DEVICES"},    // case only
    {"CUDA_VISIBLE_DEVICE_", "CUDA_VISIBLE_DEVICES"},
    {"LOCAL_RANKS", "LOCAL_RANK"},
    {"LOCALRANK", "LOCAL_RANK"},
    {"local_rank", "LOCAL_RANK"},
    {"WORLDSIZE", "WORLD_SIZE"},
    {"ROCR_VISIBLE_DEVICE", "ROCR_VISIBLE_DEVICES"},
    {"ROC_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"},
    {"HIP_VISIBLE_DEVICE", "HIP_VISIBLE_DEVICES"},
    {"ZE_AFFINITY_MASKS", "ZE_AFFINITY_MASK"},
    {"ASCEND_VISIBLE_DEVICES", nullptr},                 // 3 edits ("RT_" missing): too far to guess
    {"ASCEND_RT_VISIBLE_DEVICE", "ASCEND_RT_VISIBLE_DEVICES"},
    {"HABANA_VISIBLE_MODULE", "HABANA_VISIBLE_MODULES"},
    {"TPU_VISIBLE_CHIP", "TPU_VISIBLE_CHIPS"},
    {"ACCELERATE_USE_GPU", "ACCELERATE_USE_CPU"},
    {"USE_TORCH_XLAA", "USE_TORCH_XLA"},
    {"CUDA_DEVICE_ORDRE", "CUDA_DEVICE_ORDER"},
    // Exact names never warn, whatever their neighbours.
    {"CUDA_VISIBLE_DEVICES", nullptr},
    {"HIP_VISIBLE_DEVICES", nullptr},
    {"MLU_VISIBLE_DEVICES", nullptr},
    {"CN_VISIBLE_DEVICES", nullptr},
    {"MUSA_VISIBLE_DEVICES", nullptr},
    {"SDAA_VISIBLE_DEVICES", nullptr},
    {"HABANA_VISIBLE_DEVICES", nullptr},
    {"LOCAL_RANK", nullptr},
    {"WORLD_SIZE", nullptr},
    {"NEURON_RT_NUM_CORES", nullptr},
    // Unrelated names.
    {"PATH", nullptr},
    {"HOME", nullptr},
    {"RANK", nullptr},
    {"LOCAL_WORLD_SIZE", nullptr},
    {"NVIDIA_VISIBLE_DEVICES", nullptr},  // the NVIDIA container runtime's own variable: 4 edits
    {"CUDA_LAUNCH_BLOCKING", nullptr},
    {"OMP_NUM_THREADS", nullptr},
    {"", nullptr},
};

TEST(EnvTypos, NearMissTable) {
  for (const NearMiss& c : kTable) {
    const std::optional<std::string> got = NearMissOf(c.name);
    if (c.meant == nullptr) {
      EXPECT_EQ(got, std::nullopt) << c.name;
    } else {
      EXPECT_EQ(got, std::optional<std::string>(c.meant)) << c.name;
    }
  }
}

TEST(EnvTypos, DistanceCountsTranspositionOnceAndFoldsCase) {
  EXPECT_EQ(FoldedEditDistance("CUDA_VISBILE_DEVICES", "CUDA_VISIBLE_DEVICES"), 1);
  EXPECT_EQ(FoldedEditDistance("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"), 0);
  EXPECT_EQ(FoldedEditDistance("LOCALRANKS", "LOCAL_RANK"), 2);
  EXPECT_EQ(FoldedEditDistance("", "WORLD_SIZE"), 10);
}

TEST(EnvTypos, WarningsNameTheVariableMeantInKeyOrder) {
  google::protobuf::Map<std::string, std::string> env;
  env["LOCAL_RANKS"] = "1";
  env["CUDA_VISIBLE_DEVICE"] = "0";
  env["CUDA_VISIBLE_DEVICES"] = "1";
  env["PATH"] = "/bin";
  EXPECT_THAT(EnvTypoWarnings(env),
              ElementsAre("env CUDA_VISIBLE_DEVICE is not read by anything; did you mean CUDA_VISIBLE_DEVICES? (E-TYPO)",
                          "env LOCAL_RANKS is not read by anything; did you mean LOCAL_RANK? (E-TYPO)"));
}

v1::Inventory TwoGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  return b.Build();
}

TEST(EnvTypos, ResolverWarnsAndTheTypoChangesNothing) {
  auto r = placement::Resolve(TwoGpus(), Req::Pipe().Env("CUDA_VISIBLE_DEVICE", "1").proto());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->device(), "cuda:0");  // the misspelt mask narrows nothing: that is the point
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"),
              HasSubstr("env CUDA_VISIBLE_DEVICE is not read by anything; did you mean CUDA_VISIBLE_DEVICES? (E-TYPO)"));
}

TEST(EnvTypos, StrictKeepsItAWarning) {
  auto r = placement::Resolve(TwoGpus(), Req::Pipe().Env("local_rank", "1").Strict().proto());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"), HasSubstr("did you mean LOCAL_RANK? (E-TYPO)"));
}

TEST(EnvTypos, ExactNamesNeverWarn) {
  auto r = placement::Resolve(TwoGpus(), Req::Pipe().Env("CUDA_VISIBLE_DEVICES", "1").proto());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(absl::StrJoin(r->warnings(), "\n"), Not(HasSubstr("E-TYPO")));
}

}  // namespace
}  // namespace devplace::testing
