// devplace_version_skew_answers_total (rule V-SKEW): one count per answer and library, labelled by
// the library and the job's MAJOR.MINOR, and a bounded label set whatever the callers send.
#include "server/metrics/version_skew_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace devplace::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using placement::Library;

std::string Scrape(prometheus::Registry& registry) { return prometheus::TextSerializer().Serialize(registry.Collect()); }

TEST(VersionSkewMetrics, CountsEachAnswerByLibraryAndTheJobsMajorMinor) {
  prometheus::Registry registry;
  VersionSkewMetrics skew(registry);
  EXPECT_THAT(Scrape(registry), Not(HasSubstr("devplace_version_skew_answers_total{")));  // no series yet
  skew.Count({Library::kAccelerate, {1, 16, 0}});
  skew.Count({Library::kAccelerate, {1, 16, 2}});  // another patch: the same line
  skew.Count({Library::kTransformers, {6, 0, 0}});
  const std::string text = Scrape(registry);
  EXPECT_THAT(text, HasSubstr("# TYPE devplace_version_skew_answers_total counter\n"));
  EXPECT_THAT(text, HasSubstr("devplace_version_skew_answers_total{job_release=\"1.16\",library=\"accelerate\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("devplace_version_skew_answers_total{job_release=\"6.0\",library=\"transformers\"} 1\n"));
}

TEST(VersionSkewMetrics, AtMostSixteenReleasesPerLibraryThenOther) {
  prometheus::Registry registry;
  VersionSkewMetrics skew(registry);
  // 1000 distinct lines (as a hostile or broken client could send): 16 series, the rest "other".
  for (int minor = 16; minor < 1016; ++minor) skew.Count({Library::kAccelerate, {1, minor, 0}});
  skew.Count({Library::kAccelerate, {1, 16, 0}});  // a line with its own series keeps it
  skew.Count({Library::kTransformers, {9999, 9999, 0}});  // the other library has its own budget
  const std::string text = Scrape(registry);
  for (int minor = 16; minor < 16 + kMaxSkewReleasesPerLibrary; ++minor) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("{job_release=\"1.", minor, "\",library=\"accelerate\"} ",
                                             minor == 16 ? 2 : 1, "\n")));
  }
  EXPECT_THAT(text, Not(HasSubstr("job_release=\"1.32\"")));
  EXPECT_THAT(text, HasSubstr("{job_release=\"other\",library=\"accelerate\"} 984\n"));
  EXPECT_THAT(text, HasSubstr("{job_release=\"9999.9999\",library=\"transformers\"} 1\n"));
  int series = 0;
  for (size_t at = text.find("devplace_version_skew_answers_total{"); at != std::string::npos;
       at = text.find("devplace_version_skew_answers_total{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, kMaxSkewReleasesPerLibrary + 2);
}

}  // namespace
}  // namespace devplace::metrics
