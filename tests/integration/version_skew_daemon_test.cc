// Rule V-SKEW over the wire: the real devplaced answers a job whose Accelerate or Transformers is
// newer than its rules (the 1.16.0 and 6.0.0) with its newest rules and a warning, through
// libdevplace and the CLI (--explain, --json); `strict` refuses it; and /metrics counts every such
// answer, cached repeats included, beside build_info's newest releases.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(VersionSkewDaemon, NewerReleasesAreAnsweredWarnedAndCountedCachedRepeatsIncluded) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100", "--nvml_library=",
                               "--metrics_listen=127.0.0.1:0"});
  const std::string metrics = d.metrics_address();
  ASSERT_FALSE(metrics.empty()) << d.Log();
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  ConnectOptions connect;
  connect.address = d.unix_target();
  absl::StatusOr<Client> client = Client::Connect(connect);
  ASSERT_TRUE(client.ok()) << client.status();

  // libdevplace: the same request three times (the second and third come from the answer cache).
  ResolveOptions job;
  job.workload = v1::WORKLOAD_TRAINING;
  job.convention = v1::CONVENTION_ACCELERATE;
  job.accelerate_version = "1.16.0";
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::ResolveDeviceResponse> answer = client->Resolve(job);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->device(), "cuda");
    EXPECT_EQ(answer->accelerate_version(), "1.14.0");
    EXPECT_EQ(answer->accelerate_job_version(), "1.16.0");
    EXPECT_TRUE(answer->accelerate_newer_than_rules());
    EXPECT_FALSE(answer->transformers_newer_than_rules());
    EXPECT_THAT(absl::StrJoin(answer->warnings(), "\n"),
                HasSubstr("Accelerate 1.16.0 (accelerate_version) is newer than the newest release devplace knows, so "
                          "Accelerate 1.14.0's rules were applied"));
  }
  job.strict = true;  // refused, and not counted as an answer
  absl::StatusOr<v1::ResolveDeviceResponse> strict = client->Resolve(job);
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(strict.status().message()), HasSubstr("strict: Accelerate 1.16.0"));

  // The CLI: the device on stdout, the warning on stderr; --explain's `newer:` line; --json's fields.
  const std::string at = "--address=" + d.unix_target();
  const CommandResult plain = RunCli(at + " resolve --workload=training --no_environment --transformers_version=6.0.0");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "cuda:0\n");
  EXPECT_THAT(plain.err, HasSubstr("devplace: warning: Transformers 6.0.0 (transformers_version) is newer than the "
                                   "newest release devplace knows, so Transformers 5.15.0's rules were applied"));
  const CommandResult explain =
      RunCli(at + " resolve --workload=training --no_environment --transformers_version=6.0.0 --explain");
  EXPECT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_THAT(explain.err, HasSubstr("versions:   Transformers 5.15.0, Accelerate 1.14.0"));
  EXPECT_THAT(explain.err, HasSubstr("newer:      the job's Transformers 6.0.0 (rules applied: 5.15.0): newer than "
                                     "devplace's rules know, see warnings (V-SKEW)"));
  EXPECT_THAT(explain.err, HasSubstr("the job's 6.0.0, given, is newer, V-SKEW"));
  const CommandResult json = RunCli(at + " --json resolve --workload=training --no_environment --transformers_version=6.0.0");
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"transformersJobVersion\": \"6.0.0\""));
  EXPECT_THAT(json.out, HasSubstr("\"transformersNewerThanRules\": true"));
  EXPECT_THAT(json.out, HasSubstr("\"transformersVersion\": \"5.15.0\""));
  const CommandResult refused =
      RunCli(at + " resolve --workload=training --no_environment --transformers_version=6.0.0 --strict");
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("FAILED_PRECONDITION: strict: Transformers 6.0.0"));
  // A release the rules know: no warning, nothing counted.
  const CommandResult known = RunCli(at + " resolve --workload=training --no_environment --accelerate_version=1.15.0.dev0");
  EXPECT_EQ(known.exit_code, 0) << known.err;
  EXPECT_THAT(known.err, Not(HasSubstr("V-SKEW")));

  const CommandResult scrape = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics"));
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  EXPECT_THAT(scrape.out, HasSubstr("# TYPE devplace_version_skew_answers_total counter\n"));
  EXPECT_THAT(scrape.out,
              HasSubstr("devplace_version_skew_answers_total{job_release=\"1.16\",library=\"accelerate\"} 3\n"));
  EXPECT_THAT(scrape.out,
              HasSubstr("devplace_version_skew_answers_total{job_release=\"6.0\",library=\"transformers\"} 3\n"));
  EXPECT_THAT(scrape.out, Not(HasSubstr("job_release=\"1.15\"")));
  EXPECT_THAT(scrape.out, HasSubstr(absl::StrCat("devplace_build_info{newest_accelerate=\"1.14.0\",newest_transformers="
                                                 "\"5.15.0\",version=\"", DEVPLACE_PROJECT_VERSION, "\"} 1\n")));
}

}  // namespace
}  // namespace devplace::testing
