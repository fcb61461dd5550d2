// `eval "$(devplace ... pick)"` fails closed in every spelling the CLI accepts: real bash evaluates
// the real CLI's output against the real daemon, with global flags written `--flag=value`,
// `--flag value` or `-flag value`, before or after the command word (or the command after `--`),
// and each way a pick fails (every device leased by another holder, no daemon, a bad flag). The
// eval must fail (so `&& job` never runs the job) and CUDA_VISIBLE_DEVICES must be empty (so a
// shell that ignores the failure starts nothing on every GPU). On another vendor's host the row's
// own mask variables are the ones set to show no device, and when the row is not known (no
// daemon) every row's are (rule P-FAIL-CLOSED).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// Runs `devplace <args>` under `eval` in a bash whose CUDA_VISIBLE_DEVICES is ALL, as a user's job
// script would; stdout is "ran mask=[...]" or "failed mask=[...]", the CLI's stderr passes through.
CommandResult Evaluated(const std::vector<std::string>& args) {
  std::string words = ShellQuote(DEVPLACE_CLI_BINARY);
  for (const std::string& arg : args) absl::StrAppend(&words, " ", ShellQuote(arg));
  return RunCommand(absl::StrCat(
      "CUDA_VISIBLE_DEVICES=ALL bash -c 'if eval \"$(\"$0\" \"$@\")\"; then r=ran; else r=failed; fi; "
      "echo \"$r mask=[$CUDA_VISIBLE_DEVICES]\"' ",
      words));
}

// `pick` with --address (and --timeout) in each spelling the parser accepts, before or after it,
// and `extra` words last (before `--` in `devplace ... -- pick`, where pick takes no flag after it).
std::vector<std::vector<std::string>> Spellings(const std::string& address, const std::vector<std::string>& extra) {
  const std::vector<std::vector<std::string>> addresses = {
      {"--address=" + address}, {"--address", address}, {"-address", address}};
  const std::vector<std::vector<std::string>> timeouts = {{}, {"--timeout=5s"}, {"--timeout", "5s"}};
  std::vector<std::vector<std::string>> out;
  for (const auto& a : addresses) {
    for (const auto& t : timeouts) {
      for (int where = 0; where < 4; ++where) {  // bit 0: the address after pick; bit 1: the timeout
        if (t.empty() && (where & 2) != 0) continue;
        std::vector<std::string> before, after;
        ((where & 1) ? after : before).insert(((where & 1) ? after : before).end(), a.begin(), a.end());
        ((where & 2) ? after : before).insert(((where & 2) ? after : before).end(), t.begin(), t.end());
        std::vector<std::string> line = before;
        line.push_back("pick");
        line.insert(line.end(), after.begin(), after.end());
        line.insert(line.end(), extra.begin(), extra.end());
        out.push_back(line);
      }
    }
    std::vector<std::string> dashes = a;  // devplace --address A --timeout 5s -- pick
    dashes.insert(dashes.end(), {"--timeout", "5s"});
    dashes.insert(dashes.end(), extra.begin(), extra.end());
    dashes.insert(dashes.end(), {"--", "pick"});
    out.push_back(dashes);
  }
  return out;
}

// devplaced on the two-GPU fixture, both GPUs leased to another holder (a TTL lease over TCP).
class EvalPick : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<DaemonProcess>(
        dir_.path(), std::vector<std::string>{std::string("--host_root=") + DEVPLACE_FIXTURES_DIR +
                                              "/hosts/nvidia-2x-h100"});
    ASSERT_TRUE(daemon_->WaitForLog("event=inventory revision=1", absl::Seconds(30))) << daemon_->Log();
    v1::PickDevicesRequest request;
    request.set_count(2);
    request.set_holder(v1::LEASE_HOLDER_TTL);
    request.set_ttl_ms(600'000);
    ASSERT_TRUE(Stub(daemon_->tcp_target())->PickDevices(Ctx(absl::Seconds(20)).get(), request, &other_).ok());
  }
  // Every spelling of `pick --no_environment` (the fixture host's /dev has no GPU nodes) at
  // `address`, with `extra` words: a failed eval, an empty mask and `error` on stderr.
  void ExpectEverySpellingFailsClosed(const std::string& address, std::vector<std::string> extra,
                                      const std::string& error) {
    extra.insert(extra.begin(), "--no_environment");
    int cases = 0;
    for (const std::vector<std::string>& args : Spellings(address, extra)) {
      const CommandResult r = Evaluated(args);
      const std::string spelled = absl::StrCat("devplace ", absl::StrJoin(args, " "));
      EXPECT_EQ(r.out, "failed mask=[]\n") << spelled << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr(error)) << spelled;
      ++cases;
    }
    EXPECT_EQ(cases, 3 * 11);
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  v1::PickDevicesResponse other_;
};

TEST_F(EvalPick, EverySpellingFailsClosedWhenAnotherHolderLeasesEveryGpu) {
  ExpectEverySpellingFailsClosed(daemon_->unix_target(), {}, "0 free for this job now");
  // Once the other holder lets go, the same spellings run the job on the picked GPU.
  v1::LeaseReleaseRequest release;
  release.set_lease_id(other_.lease().lease_id());
  v1::LeaseReleaseResponse released;
  ASSERT_TRUE(Stub(daemon_->tcp_target())->LeaseRelease(Ctx().get(), release, &released).ok());
  const CommandResult ok = Evaluated({"--address", daemon_->unix_target(), "--timeout", "5s", "pick", "--ttl=10m",
                                          "--no_environment"});
  EXPECT_THAT(ok.out, ::testing::MatchesRegex("ran mask=\\[GPU-[-0-9a-f]+\\]\n")) << ok.err;
}

TEST_F(EvalPick, EverySpellingFailsClosedWithoutADaemon) {
  ExpectEverySpellingFailsClosed("unix:" + dir_.File("none.sock"), {}, "devplace: pick: UNAVAILABLE");
}

TEST_F(EvalPick, EverySpellingFailsClosedWithABadFlag) {
  ExpectEverySpellingFailsClosed(daemon_->unix_target(), {"--bogus_flag"}, "unknown flag --bogus_flag");
  ExpectEverySpellingFailsClosed(daemon_->unix_target(), {"--count=x"}, "--count=x");
}

// A flag that needs a value took the command word, a misspelt flag's value was read as the
// command, or the command is misspelt: usage errors before any command is known fail closed too.
TEST_F(EvalPick, ACommandLineWithoutAKnownCommandThatNamesPickFailsClosed) {
  const std::string address = daemon_->unix_target();
  const std::vector<std::pair<std::vector<std::string>, std::string>> unparsed = {
      {{"--address", "pick"}, "missing command"},
      {{"--adress", address, "pick"}, "unknown command \"" + address},
      {{"--address=" + address, "pick", "--timeout"}, "flag --timeout needs a value"},
      {{"--address=" + address, "--timeout", "5", "pick"}, "--timeout=5"},
      {{"--address=" + address, "pikc"}, "did you mean \"pick\""},
  };
  for (const auto& [args, error] : unparsed) {
    const CommandResult r = Evaluated(args);
    EXPECT_EQ(r.out, "failed mask=[]\n") << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(error)) << absl::StrJoin(args, " ");
  }
}

// Every row's mask variable that a failed pick may set, as `NAME=[value]` after the eval, in a
// bash where each of them starts as ALL.
constexpr const char* kMaskVariables[] = {
    "CUDA_VISIBLE_DEVICES",   "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES",
    "TPU_VISIBLE_CHIPS",      "ZE_AFFINITY_MASK",     "HABANA_VISIBLE_MODULES", "ASCEND_RT_VISIBLE_DEVICES",
    "MLU_VISIBLE_DEVICES",    "CN_VISIBLE_DEVICES",   "MUSA_VISIBLE_DEVICES", "SDAA_VISIBLE_DEVICES"};

CommandResult EvaluatedWithEveryMask(const std::vector<std::string>& args) {
  std::string words = ShellQuote(DEVPLACE_CLI_BINARY);
  for (const std::string& arg : args) absl::StrAppend(&words, " ", ShellQuote(arg));
  std::string set, show;
  for (const char* v : kMaskVariables) {
    absl::StrAppend(&set, v, "=ALL ");
    absl::StrAppend(&show, " ", v, "=[$", v, "]");
  }
  return RunCommand(absl::StrCat("env ", set, "bash -c 'if eval \"$(\"$0\" \"$@\")\"; then r=ran; else r=failed; fi; echo \"$r",
                                 show, "\"' ", words));
}

// "failed" and each mask variable: `hidden`'s value where it names it, else ALL (untouched).
std::string FailedWith(const std::map<std::string, std::string>& hidden) {
  std::string out = "failed";
  for (const char* v : kMaskVariables) {
    const auto it = hidden.find(v);
    absl::StrAppend(&out, " ", v, "=[", it == hidden.end() ? "ALL" : it->second, "]");
  }
  return out + "\n";
}

// A refused pick on each vendor's fixture host (a --count larger than its two devices: the daemon
// answers FAILED_PRECONDITION at once) sets exactly that row's mask variables: empty where the
// runtime reads empty as no device, an index no host has where empty means every device (Level
// Zero) or is not documented (Gaudi, Neuron, TPU); the other rows' stay as they were.
TEST(EvalPickOnEveryRow, ARefusedPickHidesTheDevicesOfTheJobsRow) {
  struct Case {
    std::string fixture;
    std::vector<std::string> flags;
    std::map<std::string, std::string> hidden;
  };
  const std::vector<Case> cases = {
      {"nvidia-2x-h100", {}, {{"CUDA_VISIBLE_DEVICES", ""}}},
      {"amd-2x-mi210", {}, {{"ROCR_VISIBLE_DEVICES", ""}, {"HIP_VISIBLE_DEVICES", ""}, {"CUDA_VISIBLE_DEVICES", ""}}},
      {"xpu-2x-arc", {}, {{"ZE_AFFINITY_MASK", "65535"}}},
      {"npu-2x-910b", {}, {{"ASCEND_RT_VISIBLE_DEVICES", ""}}},
      {"musa-2x-s4000", {}, {{"MUSA_VISIBLE_DEVICES", ""}}},
      {"mlu-2x-mlu370", {}, {{"MLU_VISIBLE_DEVICES", ""}, {"CN_VISIBLE_DEVICES", ""}}},
      {"hpu-2x-gaudi2", {}, {{"HABANA_VISIBLE_MODULES", "65535"}}},
      // Rows a job must name (device_map="auto" does not cover them): the row comes from --row.
      {"neuron-2x-trn1", {"--row=neuron"}, {{"NEURON_RT_VISIBLE_CORES", "65535"}}},
      {"tpu-2x-v5e", {"--row=tpu"}, {{"TPU_VISIBLE_CHIPS", "65535"}}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    DaemonProcess daemon(dir.path(), {std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/" + c.fixture});
    ASSERT_TRUE(daemon.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << c.fixture << daemon.Log();
    std::vector<std::string> args = {"--address", daemon.unix_target(), "pick", "--no_environment", "--count=64"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const CommandResult r = EvaluatedWithEveryMask(args);
    EXPECT_EQ(r.out, FailedWith(c.hidden)) << c.fixture << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION")) << c.fixture;
  }
}

// No daemon answers, so the row is not known: every row's mask variable shows no device.
TEST(EvalPickOnEveryRow, WithoutADaemonEveryRowsDevicesAreHidden) {
  TempDir dir;
  const CommandResult r = EvaluatedWithEveryMask({"--address", "unix:" + dir.File("none.sock"), "pick"});
  EXPECT_EQ(r.out, FailedWith({{"CUDA_VISIBLE_DEVICES", ""},
                               {"ROCR_VISIBLE_DEVICES", ""},
                               {"HIP_VISIBLE_DEVICES", ""},
                               {"NEURON_RT_VISIBLE_CORES", "65535"},
                               {"TPU_VISIBLE_CHIPS", "65535"},
                               {"ZE_AFFINITY_MASK", "65535"},
                               {"HABANA_VISIBLE_MODULES", "65535"},
                               {"ASCEND_RT_VISIBLE_DEVICES", ""},
                               {"MLU_VISIBLE_DEVICES", ""},
                               {"CN_VISIBLE_DEVICES", ""},
                               {"MUSA_VISIBLE_DEVICES", ""},
                               {"SDAA_VISIBLE_DEVICES", ""}}))
      << r.err;
  EXPECT_THAT(r.err, HasSubstr("devplace: pick: UNAVAILABLE"));
}

}  // namespace
}  // namespace devplace::testing
