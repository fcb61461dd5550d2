// Version-aware answers (docs/SEMANTICS.md section 10) over the wire: the real devplaced probing
// a fixture host, asked through libdevplace over the unix socket and TCP, and through the
// devplace CLI. The same host answers differently for Accelerate 0.25.0 and the newest release.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// A Trainium host: Accelerate knows the native neuron device only from 1.13.0 (V-ACC-DD-1.13).
TEST(VersionsOverTheWire, AccelerateReleaseChangesTheAnswerThroughTheLibrary) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("neuron-2x-trn1")});
  for (const std::string& target : {d.unix_target(), d.tcp_target()}) {
    SCOPED_TRACE(target);
    ConnectOptions connect;
    connect.address = target;
    absl::StatusOr<Client> client = Client::Connect(connect);
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; i < 200 && !client->Health().value_or(false); ++i) absl::SleepFor(absl::Milliseconds(20));
    ResolveOptions job;
    job.workload = v1::WORKLOAD_TRAINING;
    job.convention = v1::CONVENTION_ACCELERATE;
    absl::StatusOr<v1::ResolveDeviceResponse> newest = client->Resolve(job);
    ASSERT_TRUE(newest.ok()) << newest.status();
    EXPECT_EQ(newest->device(), "neuron");
    EXPECT_EQ(newest->accelerate_version(), "1.14.0");
    job.accelerate_version = "0.25.0";
    absl::StatusOr<v1::ResolveDeviceResponse> old = client->Resolve(job);
    ASSERT_TRUE(old.ok()) << old.status();
    EXPECT_EQ(old->device(), "cpu");
    EXPECT_EQ(old->accelerate_version(), "0.25.0");
    EXPECT_THAT(absl::StrJoin(old->warnings(), "\n"), HasSubstr("Accelerator().device (Accelerate 0.25.0) never picks it"));
    job.accelerate_version = "0.24.0";
    absl::StatusOr<v1::ResolveDeviceResponse> bad = client->Resolve(job);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("accelerate_version: '0.24.0'"));
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("0.25.0 or newer (rules up to 1.15.x"));
  }
}

TEST(VersionsOverTheWire, CliFlagsExplainAndUsageErrors) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("neuron-2x-trn1")});
  const std::string at = "--address=" + d.unix_target();
  CommandResult health = RunCli(at + " health");
  for (int i = 0; i < 100 && health.out != "SERVING\n"; ++i) health = RunCli(at + " health");
  ASSERT_EQ(health.out, "SERVING\n") << health.err;
  const std::string base = at + " resolve --workload=training --convention=accelerate --no_environment";
  CommandResult newest = RunCli(base);
  EXPECT_EQ(newest.exit_code, 0) << newest.err;
  EXPECT_EQ(newest.out, "neuron\n");
  CommandResult old = RunCli(base + " --accelerate_version=0.25.0 --explain");
  EXPECT_EQ(old.exit_code, 0) << old.err;
  EXPECT_EQ(old.out, "cpu\n");
  EXPECT_THAT(old.err, HasSubstr("versions:   Transformers 4.57.0, Accelerate 0.25.0"));
  EXPECT_THAT(old.err, HasSubstr("V-ACC-DD-0.25"));
  // TrainingArguments: neuron:0 joined the chain in 5.4 (V-TF-TA-5.4); before, it falls through to cpu.
  CommandResult ta = RunCli(at + " resolve --workload=training --no_environment --transformers_version=4.46.3");
  EXPECT_EQ(ta.exit_code, 0) << ta.err;
  EXPECT_EQ(ta.out, "cpu\n");
  CommandResult ta5 = RunCli(at + " resolve --workload=training --no_environment --transformers_version=5.4.0");
  EXPECT_EQ(ta5.out, "neuron:0\n") << ta5.err;
  CommandResult ta53 = RunCli(at + " resolve --workload=training --no_environment --transformers_version=5.3.0");
  EXPECT_EQ(ta53.out, "cpu\n") << ta53.err;
  CommandResult usage = RunCli(base + " --accelerate_version=1.x");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.out, "");
  EXPECT_THAT(usage.err, HasSubstr("--accelerate_version: '1.x' is not a version"));
  EXPECT_EQ(std::count(usage.err.begin(), usage.err.end(), '\n'), 1) << usage.err;
}

}  // namespace
}  // namespace devplace::testing
