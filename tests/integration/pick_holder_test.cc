// Who holds the lease of `eval "$(devplace pick)"`: the process that evaluates the output and runs
// the job. Real bash runs the real CLI against the real daemon on a fake 4-GPU host: a wrapper
// around the pick (timeout, flock, nice, stdbuf, env) is passed over to the shell that evaluates;
// the subshell of `r=$(eval "$(devplace pick)" && job)` holds its own lease, which ends with it; a
// wrapper that cannot be passed over is refused and eval fails with the mask emptied; and the
// daemon leases to no process of another user, whatever the CLI names.
#include <signal.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/integration/shared_host.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// The pids holding leases in `json` (`devplace inventory --json`, as root: pids shown).
std::set<std::string> Holders(const std::string& json) {
  std::set<std::string> pids;
  const v1::Inventory inventory = ParseInventoryJson(json);
  for (const v1::LeaseInfo& l : inventory.leases()) pids.insert(absl::StrCat(l.pid()));
  return pids;
}

class WrappedPick : public ::testing::TestWithParam<const char*> {};

// Three shells at once each run `eval "$(WRAPPER devplace pick)"` and then their job: each gets a
// GPU of its own, the lease is held by the shell (not by the wrapper, which ends with the CLI)
// while the job runs, and every lease ends when its shell does.
TEST_P(WrappedPick, ThreeShellsGetThreeGpusHeldByTheShellsUntilTheyEnd) {
  SharedHost host(4, {});
  const std::string wrapper = GetParam();
  std::string script;
  for (const char* name : {"a", "b", "c"}) {
    absl::StrAppend(&script, "bash -c 'eval \"$(", wrapper, " devplace pick --no_environment)\" || exit 1; echo $$ "
                             "$CUDA_VISIBLE_DEVICES > ", name, ".tmp; mv ", name, ".tmp ", name,
                    "; while [ ! -e done ]; do sleep 0.05; done' &\n");
  }
  absl::StrAppend(&script,
                  "for f in a b c; do while [ ! -e $f ]; do sleep 0.05; done; done\n"
                  "devplace inventory --json > during.json\n"
                  "touch done; wait\n"
                  // Every GPU free again once the shells have ended (waited for, not slept for).
                  "devplace pick --no_environment --count=4 --wait=60s --ttl=1s >/dev/null && echo all-free\n");
  const CommandResult r = host.Script(script);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::set<std::string> gpus, shells;
  for (const char* f : {"/a", "/b", "/c"}) {
    const std::vector<std::string> words = absl::StrSplit(absl::StripAsciiWhitespace(ReadFile(host.dir() + f)), ' ');
    ASSERT_EQ(words.size(), 2u) << f;
    shells.insert(words[0]);
    gpus.insert(words[1]);
  }
  EXPECT_EQ(gpus.size(), 3u) << "two shells got the same GPU under " << wrapper;
  EXPECT_EQ(Holders(ReadFile(host.dir() + "/during.json")), shells)
      << "while the jobs ran, the leases were not held by the shells that ran them";
  EXPECT_THAT(r.out, HasSubstr("all-free"));
}

std::string WrapperName(const ::testing::TestParamInfo<const char*>& info) {
  constexpr const char* kNames[] = {"Timeout", "Flock", "Nice", "Stdbuf", "Env", "Nested"};
  return kNames[info.index];
}

INSTANTIATE_TEST_SUITE_P(Wrappers, WrappedPick,
                         ::testing::Values("timeout 120", "flock lock", "nice", "stdbuf -oL", "env X=1",
                                           "timeout 120 nice flock lock env X=1"),
                         WrapperName);

// `r=$(eval "$(devplace pick)" && job)` in a loop on a one-GPU host: the `$(...)` subshell
// evaluates the output and runs the job, so it holds the lease, which ends with it: each iteration
// gets the GPU (after the last one's lease ended), and once the loop is done the outer shell,
// still running, holds nothing.
TEST(PickHolder, TheSubshellThatEvaluatesHoldsItsLeaseAndEndsIt) {
  SharedHost host(1, {});
  const CommandResult r = host.Script(absl::StrCat(
      "for i in 1 2 3; do\n"
      "  r=$(eval \"$(devplace pick --no_environment --wait=20s 2>/dev/null)\" &&"
      " devplace inventory --json > during.$i.json && echo \"$BASHPID $CUDA_VISIBLE_DEVICES\") || r=failed\n"
      "  echo \"$r\" > got.$i\n"
      "done\n"
      "echo $$ > outer\n"
      "devplace pick --no_environment --wait=20s --json > last.json 2>last.err && echo free-after-the-loop\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("free-after-the-loop")) << ReadFile(host.dir() + "/last.err");
  const std::string outer(absl::StripAsciiWhitespace(ReadFile(host.dir() + "/outer")));
  for (int i = 1; i <= 3; ++i) {
    const std::vector<std::string> words =
        absl::StrSplit(absl::StripAsciiWhitespace(ReadFile(absl::StrCat(host.dir(), "/got.", i))), ' ');
    ASSERT_EQ(words.size(), 2u) << "iteration " << i << " got no GPU: " << ReadFile(absl::StrCat(host.dir(), "/got.", i));
    EXPECT_EQ(words[1], Uuid(0));
    EXPECT_NE(words[0], outer);
    EXPECT_EQ(Holders(ReadFile(absl::StrCat(host.dir(), "/during.", i, ".json"))), std::set<std::string>{words[0]})
        << "iteration " << i << ": the lease is not held by the subshell that evaluated and ran the job";
  }
}

// A wrapper that is not passed over (its output goes to a terminal through `script`, or to a file)
// would hold the lease and end with the pick: the pick is refused naming it and the spellings that
// work, eval fails, the mask is emptied and nothing is leased. `script -c` runs the command with
// `$SHELL -c`: bash replaces itself with the pick, sh (dash, also where SHELL is unset) waits for
// it, and either way the lease would end with the pick.
TEST(PickHolder, AWrapperThatCannotBePassedOverFailsClosed) {
  SharedHost host(2, {});
  const CommandResult r = host.Script(absl::StrCat(
      "for shell in /bin/bash /bin/sh unset; do\n"
      "  export CUDA_VISIBLE_DEVICES=0,1\n"
      "  if [ $shell = unset ]; then run='env -u SHELL'; else run=\"env SHELL=$shell\"; fi\n"
      "  if eval \"$($run script -qec 'devplace pick --no_environment' /dev/null </dev/null)\"; then\n"
      "    echo ran-script-$shell\n"
      "  fi\n"
      "  echo \"script-$shell-cvd=[$CUDA_VISIBLE_DEVICES]\"\n"
      "done\n"
      "export CUDA_VISIBLE_DEVICES=0,1\n"
      "timeout 20 devplace pick --no_environment > env.sh 2> file.err || echo pick-refused\n"
      "if . ./env.sh; then echo ran-file; fi\n"
      "echo \"file-cvd=[$CUDA_VISIBLE_DEVICES]\"\n"
      "devplace inventory --json > after.json\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-script")));
  for (const char* shell : {"/bin/bash", "/bin/sh", "unset"}) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("script-", shell, "-cvd=[]"))) << "script with SHELL " << shell;
  }
  EXPECT_THAT(r.out, HasSubstr("pick-refused"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-file")));
  EXPECT_THAT(r.out, HasSubstr("file-cvd=[]"));
  EXPECT_THAT(ReadFile(host.dir() + "/file.err"),
              HasSubstr("FAILED_PRECONDITION: the lease would be held by timeout, pid "));
  EXPECT_THAT(ReadFile(host.dir() + "/file.err"), HasSubstr("'eval \"$(devplace pick)\" && timeout ... job'"));
  EXPECT_TRUE(Holders(ReadFile(host.dir() + "/after.json")).empty()) << "a refused pick leased a device";
}

// The daemon checks whom the CLI names: the shell that evaluates the output of a pick run as another
// user (root's shell around `setpriv --reuid=nobody devplace pick`) does not hold nobody's lease.
TEST(PickHolder, TheDaemonLeasesToNoProcessOfAnotherUser) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run the pick as nobody (setpriv)";
  SharedHost host(2, {});
  const std::string as_nobody = host.AsNobody();
  if (as_nobody.empty()) GTEST_SKIP() << "setpriv missing, or nobody cannot reach " << DEVPLACE_CLI_BINARY;
  const CommandResult r = host.Script(absl::StrCat(
      "export CUDA_VISIBLE_DEVICES=0,1\n",
      "eval \"$(", as_nobody, "devplace pick --no_environment 2>uid.err)\" && echo ran-as-another-user\n"
      "echo \"cvd=[$CUDA_VISIBLE_DEVICES]\"\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-as-another-user")));
  EXPECT_THAT(r.out, HasSubstr("cvd=[]"));
  EXPECT_THAT(ReadFile(host.dir() + "/uid.err"), HasSubstr("runs as uid 0, not as the caller (uid 65534)"));
  EXPECT_EQ(host.Inventory().leases_size(), 0);
}

// Nor does a process that is not an ancestor of the caller (here a sibling `sleep`), named in the
// request itself.
TEST(PickHolder, TheDaemonLeasesToNoProcessThatIsNotTheCallersAncestor) {
  SharedHost host(2, {});
  const CommandResult r = host.Script("sleep 120 >/dev/null 2>&1 & echo $! > stranger\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  int stranger = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(host.dir() + "/stranger")), &stranger));
  v1::PickDevicesRequest request;
  request.set_count(1);
  request.set_holder(v1::LEASE_HOLDER_PARENT);
  request.set_holder_pid(static_cast<uint32_t>(stranger));
  v1::PickDevicesResponse response;
  const grpc::Status status = Stub(host.daemon().unix_target())->PickDevices(Ctx().get(), request, &response);
  kill(stranger, SIGTERM);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("is not an ancestor of the calling process"));
  EXPECT_EQ(host.Inventory().leases_size(), 0);
}

}  // namespace
}  // namespace devplace::testing
