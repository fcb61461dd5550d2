// docs/SEMANTICS.md section 10, rule V-SKEW, cases VS01-VS09: a Transformers or Accelerate
// release newer than the rules devplace knows is answered with the newest rules it has, a warning
// naming both releases and the response fields saying so; `strict` refuses it; a release older
// than the oldest supported stays INVALID_ARGUMENT (V21, V22); suffixes keep their reading; torch's
// table has only first releases, so a newer torch is neither refused nor warned about.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "server/placement/versions.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/placement/resolve_case.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using placement::Library;
using placement::NewerLibrary;
using placement::Version;

constexpr auto TA = v1::CONVENTION_TRAINING_ARGUMENTS;
constexpr auto ACC = v1::CONVENTION_ACCELERATE;
const auto CUDA = v1::ROW_CUDA_NVIDIA;
constexpr char kSource[] = "/opt/job/site-packages";


std::vector<ResolveCase> Cases() {
  std::vector<ResolveCase> c;
  const auto cuda2 = HostOf({{CUDA, 2}});
  const auto neuron2 = HostOf({{v1::ROW_NEURON, 2}});
  const auto tpu2 = HostOf({{v1::ROW_TPU, 2}});
  // VS01, VS02: the releases, named in the request.
  c.push_back({.id = "VS01_accelerate_1_16_given", .host = cuda2, .request = Req::Train(ACC).Accelerate("1.16.0"),
               .device = "cuda", .accelerate_job = "1.16.0", .accelerate_newer = true,
               .warnings = {"Accelerate 1.16.0 (accelerate_version) is newer than the newest release devplace knows, "
                            "so Accelerate 1.14.0's rules were applied",
                            "upgrade devplaced for 1.16's rules, or set accelerate_version to 1.14.0 to apply these "
                            "without this warning (V-SKEW)"},
               .explanation = {"V emulating Transformers 5.15.0", "Accelerate 1.14.0 (the newest rules devplace has: the "
                                                                "job's 1.16.0, given, is newer, V-SKEW)"}});
  c.push_back({.id = "VS02_transformers_6_given", .host = cuda2, .request = Req::Train(TA).Transformers("6.0.0"),
               .device = "cuda:0", .transformers_job = "6.0.0", .transformers_newer = true,
               .warnings = {"Transformers 6.0.0 (transformers_version) is newer than the newest release devplace "
                            "knows, so Transformers 5.15.0's rules were applied"},
               .explanation = {"V emulating Transformers 5.15.0 (the newest rules devplace has: the job's 6.0.0, given, "
                             "is newer, V-SKEW)"}});
  // VS03: strict refuses it, and says what the answer would have been.
  c.push_back({.id = "VS03_strict", .host = cuda2, .request = Req::Train(ACC).Accelerate("1.16.0").Strict(),
               .code = absl::StatusCode::kFailedPrecondition,
               .error_words = {"strict: Accelerate 1.16.0 (accelerate_version) is newer than the newest release",
                            "(answer without strict: cuda)"}});
  c.push_back({.id = "VS03_strict_transformers", .host = cuda2,
               .request = Req::Train(TA).Transformers("6.0.0").Strict(), .code = absl::StatusCode::kFailedPrecondition,
               .error_words = {"strict: Transformers 6.0.0", "(answer without strict: cuda:0)"}});
  // VS04: detected in the job's packages (V-JOB-VERSION): both newer, both said, where from.
  c.push_back({.id = "VS04_both_detected", .host = cuda2,
               .request = Req::Train(TA).JobPackages(kSource, {{"torch", "2.9.0+cu128"}, {"transformers", "6.0.0"},
                                                                    {"accelerate", "1.16.0"}}),
               .device = "cuda:0", .transformers_job = "6.0.0", .accelerate_job = "1.16.0",
               .transformers_newer = true, .accelerate_newer = true,
               .warnings = {absl::StrCat("Transformers 6.0.0 (detected in ", kSource, ") is newer than the newest "
                                         "release devplace knows, so Transformers 5.15.0's rules were applied"),
                            absl::StrCat("Accelerate 1.16.0 (detected in ", kSource, ") is newer than the newest "
                                         "release devplace knows, so Accelerate 1.14.0's rules were applied")},
               .explanation = {absl::StrCat("the job's 6.0.0, detected in ", kSource, ", is newer, V-SKEW")}});
  // VS05: the boundary. Accelerate's main line 1.15 was read (no warning); a later line is newer,
  // suffixes read as before (1.16.0rc1 is 1.16.0, +local dropped). Transformers: 5.15.x is known.
  c.push_back({.id = "VS05_acc_1_15_dev_known", .host = cuda2, .request = Req::Train(ACC).Accelerate("1.15.0.dev0"),
               .device = "cuda", .accelerate = "1.15.0", .accelerate_job = "1.15.0"});
  c.push_back({.id = "VS05_acc_1_15_9_known", .host = cuda2, .request = Req::Train(ACC).Accelerate("1.15.9"),
               .device = "cuda", .accelerate = "1.15.9", .accelerate_job = "1.15.9"});
  c.push_back({.id = "VS05_acc_1_16_rc", .host = cuda2, .request = Req::Train(ACC).Accelerate("1.16.0rc1"),
               .device = "cuda", .accelerate_job = "1.16.0", .accelerate_newer = true,
               .warnings = {"Accelerate 1.16.0 (accelerate_version) is newer"}});
  c.push_back({.id = "VS05_acc_2_0_local", .host = cuda2, .request = Req::Train(ACC).Accelerate("2.0.1+cu130"),
               .device = "cuda", .accelerate_job = "2.0.1", .accelerate_newer = true,
               .warnings = {"upgrade devplaced for 2.0's rules"}});
  c.push_back({.id = "VS05_tf_5_15_3_known", .host = cuda2, .request = Req::Train(TA).Transformers("5.15.3"),
               .device = "cuda:0", .transformers = "5.15.3", .transformers_job = "5.15.3"});
  c.push_back({.id = "VS05_tf_5_16_dev", .host = cuda2, .request = Req::Train(TA).Transformers("5.16.0.dev0"),
               .device = "cuda:0", .transformers_job = "5.16.0", .transformers_newer = true,
               .warnings = {"Transformers 5.16.0 (transformers_version) is newer"}});
  // VS06: older than the oldest supported keeps INVALID_ARGUMENT (there are no rules for it).
  c.push_back({.id = "VS06_acc_too_old", .host = cuda2, .request = Req::Train(ACC).Accelerate("0.24.0"),
               .code = absl::StatusCode::kInvalidArgument,
               .error_words = {"accelerate_version: '0.24.0' is older than devplace supports", "0.25.0 or newer"}});
  c.push_back({.id = "VS06_tf_too_old_detected", .host = cuda2,
               .request = Req::Train(TA).JobPackages(kSource, {{"torch", "2.1.0"}, {"transformers", "4.29.0"}}),
               .code = absl::StatusCode::kInvalidArgument,
               .error_words = {"job_environment has transformers 4.29.0", "is older than devplace supports"}});
  // VS07: the newest rules are Transformers 5's, which need Accelerate >= 1.1.0 (V-TF-V5): the
  // error names the job's own release.
  c.push_back({.id = "VS07_tf6_old_accelerate", .host = cuda2,
               .request = Req::Train(TA).Transformers("6.0.0").Accelerate("1.0.1"),
               .code = absl::StatusCode::kInvalidArgument,
               .error_words = {"accelerate_version: 1.0.1 with transformers_version 6.0.0",
                            "Transformers 5 requires Accelerate >= 1.1.0 (V-TF-V5)"}});
  // VS08: the rules applied are the newest ones: neuron joined Accelerate's order in 1.13
  // (V-ACC-DD-1.13), torch-tpu TrainingArguments' in 5.8 (V-TF-TA-TPU).
  c.push_back({.id = "VS08_acc_newest_order", .host = neuron2, .request = Req::Train(ACC).Accelerate("1.16.0"),
               .device = "neuron", .accelerate_job = "1.16.0", .accelerate_newer = true,
               .explanation = {"V-ACC-DD-1.13"}});
  c.push_back({.id = "VS08_tf_newest_chain", .host = tpu2, .request = Req::Train(TA).Transformers("6.0.0"),
               .device = "tpu:0", .transformers_job = "6.0.0", .transformers_newer = true,
               .explanation = {"V-TF-TA-TPU"}});
  // VS09: torch has no newest release in the rules (only the first release of each device type,
  // G-PLUGIN): a newer torch is neither refused nor warned about, and its build tag still counts.
  c.push_back({.id = "VS09_torch_newer", .host = cuda2,
               .request = Req::Train(TA).JobPackages(kSource, {{"torch", "9.0.0+cu130"}, {"transformers", "5.15.0"},
                                                                    {"accelerate", "1.14.0"}}),
               .device = "cuda:0", .transformers_job = "5.15.0", .accelerate_job = "1.14.0",
               .explanation = {"torch 9.0.0+cu130 (+cu130: a cuda build) -> cuda"}});
  return c;
}

class VersionSkewCases : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(VersionSkewCases, Resolves) {
  const ResolveCase& k = GetParam();
  const v1::Inventory inv = k.host();
  absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(inv, k.request);
  ASSERT_EQ(got.status().code(), k.code) << got.status();
  if (!got.ok()) {
    for (const std::string& w : k.error_words) EXPECT_THAT(std::string(got.status().message()), HasSubstr(w));
    return;
  }
  const std::string dump = got->DebugString();
  EXPECT_EQ(got->device(), k.device) << dump;
  EXPECT_EQ(got->transformers_version(), k.transformers) << dump;
  EXPECT_EQ(got->accelerate_version(), k.accelerate) << dump;
  EXPECT_EQ(got->transformers_job_version(), k.transformers_job) << dump;
  EXPECT_EQ(got->accelerate_job_version(), k.accelerate_job) << dump;
  EXPECT_EQ(got->transformers_newer_than_rules(), k.transformers_newer) << dump;
  EXPECT_EQ(got->accelerate_newer_than_rules(), k.accelerate_newer) << dump;
  const std::string warnings = absl::StrJoin(got->warnings(), "\n");
  for (const std::string& w : k.warnings) EXPECT_THAT(warnings, HasSubstr(w)) << dump;
  // Exactly one V-SKEW warning per newer library, none otherwise.
  int skew = 0;
  for (const std::string& w : got->warnings()) skew += absl::StrContains(w, "(V-SKEW)");
  EXPECT_EQ(skew, int{k.transformers_newer} + int{k.accelerate_newer}) << dump;
  const std::string explanation = absl::StrJoin(got->explanation(), "\n");
  for (const std::string& e : k.explanation) EXPECT_THAT(explanation, HasSubstr(e)) << dump;
  if (!k.transformers_newer && !k.accelerate_newer) {
    EXPECT_THAT(explanation, Not(HasSubstr("V-SKEW")));
  }
}

INSTANTIATE_TEST_SUITE_P(Semantics, VersionSkewCases, ::testing::ValuesIn(Cases()), CaseId);

// What devplaced counts (devplace_version_skew_answers_total) comes from ResolveSerialized, the
// same facts as the answer's fields.
TEST(VersionSkew, ResolveSerializedReportsEachNewerLibraryWithTheJobsRelease) {
  const v1::Inventory inv = HostOf({{CUDA, 2}})();
  std::string bytes;
  std::vector<NewerLibrary> newer = {{Library::kTransformers, {9, 9, 9}}};  // replaced
  ASSERT_TRUE(placement::ResolveSerialized(
                  inv, Req::Train(TA).Transformers("6.0.0").Accelerate("1.16.2"), &bytes, &newer)
                  .ok());
  ASSERT_EQ(newer.size(), 2u);
  EXPECT_EQ(newer[0].library, Library::kTransformers);
  EXPECT_EQ(newer[0].job, (Version{6, 0, 0}));
  EXPECT_EQ(newer[1].library, Library::kAccelerate);
  EXPECT_EQ(newer[1].job, (Version{1, 16, 2}));
  v1::ResolveDeviceResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_TRUE(parsed.transformers_newer_than_rules());
  EXPECT_EQ(parsed.accelerate_job_version(), "1.16.2");

  ASSERT_TRUE(placement::ResolveSerialized(inv, Req::Train(TA).Accelerate("1.14.0"), &bytes, &newer).ok());
  EXPECT_TRUE(newer.empty());
  // Under strict it is an error, not an answer (devplaced counts OK answers only).
  EXPECT_EQ(placement::ResolveSerialized(inv, Req::Train(TA).Accelerate("1.16.0").Strict(), &bytes, &newer).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The classification itself: a later MAJOR.MINOR line than the rules read is newer; a patch of a
// known line is not; Accelerate's read main line (the newest release's next minor) is known.
TEST(VersionSkew, NewerThanRulesFollowsTheNewestLineRead) {
  const Version tf = placement::NewestVersion(Library::kTransformers);
  const Version acc = placement::NewestVersion(Library::kAccelerate);
  EXPECT_FALSE(placement::NewerThanRules(Library::kTransformers, tf));
  EXPECT_FALSE(placement::NewerThanRules(Library::kTransformers, {tf.major, tf.minor, 99}));
  EXPECT_TRUE(placement::NewerThanRules(Library::kTransformers, {tf.major, tf.minor + 1, 0}));
  EXPECT_TRUE(placement::NewerThanRules(Library::kTransformers, {tf.major + 1, 0, 0}));
  EXPECT_FALSE(placement::NewerThanRules(Library::kTransformers, placement::MinVersion(Library::kTransformers)));
  EXPECT_FALSE(placement::NewerThanRules(Library::kAccelerate, {acc.major, acc.minor + 1, 3}));
  EXPECT_TRUE(placement::NewerThanRules(Library::kAccelerate, {acc.major, acc.minor + 2, 0}));
  EXPECT_TRUE(placement::NewerThanRules(Library::kAccelerate, {acc.major + 1, 0, 0}));
  EXPECT_EQ(placement::NewestRules(), absl::StrCat("Transformers ", tf.ToString(), ", Accelerate ", acc.ToString()));
}

}  // namespace
}  // namespace devplace::testing
