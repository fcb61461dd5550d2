// Shared hosts with real parts: devplaced on a fake 8-GPU host whose fake NVML reports processes
// and memory in use, picked from by real `devplace pick` / `devplace run` processes at once.
// Concurrent picks never share a GPU, a 9th is refused with every GPU's usage or waits for the
// first released one, a lease ends with its process, the exported mask makes `devplace resolve`
// answer the picked card, a job's mask or device nodes are never left, and `devplace run` returns
// the command's exit status.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/integration/shared_host.h"

namespace devplace::testing {
namespace {

// The digits after "shell=" in a script's output ("" when absent). Not a std::regex over the whole
// output: libstdc++'s matcher recurses once per character of "(?:.|\n)*", which overflowed the
// stack under ASan on a long output.
std::string ShellPid(const std::string& out) {
  const size_t at = out.find("shell=");
  if (at == std::string::npos) return "";
  size_t end = at + 6;
  while (end < out.size() && absl::ascii_isdigit(static_cast<unsigned char>(out[end]))) ++end;
  return out.substr(at + 6, end - at - 6);
}

using ::testing::HasSubstr;

TEST(SharedHost, UsageFromNvmlIsInTheInventoryWithItsProcesses) {
  SharedHost host(4, {{0, {61 * kGiB, {{4242, 40 * kGiB}, {4343, 20 * kGiB}}, 0}}, {1, {11 * kGiB, {{5151, 10 * kGiB}}, 3}}});
  const v1::Inventory inv = host.Inventory();
  ASSERT_EQ(inv.backends(1).devices_size(), 4);
  const v1::DeviceUsage& u0 = inv.backends(1).devices(0).usage();
  EXPECT_EQ(u0.source(), "nvml");
  EXPECT_TRUE(u0.processes_known());
  EXPECT_EQ(u0.process_count(), 2u);
  EXPECT_EQ(u0.memory_used_bytes(), 61 * kGiB);
  ASSERT_EQ(u0.processes_size(), 2);
  EXPECT_EQ(u0.processes(0).pid(), 4242u);  // root over the unix socket: pids shown
  EXPECT_EQ(u0.processes(0).used_memory_bytes(), 40 * kGiB);
  const v1::DeviceUsage& u1 = inv.backends(1).devices(1).usage();
  EXPECT_EQ(u1.compute_mode(), v1::DEVICE_USAGE_COMPUTE_MODE_EXCLUSIVE_PROCESS);
  EXPECT_TRUE(u1.busy());
  EXPECT_FALSE(inv.backends(1).devices(2).usage().busy());
  EXPECT_TRUE(inv.has_usage_read_at());
  // A caller RefreshInventory's rule does not allow (plain TCP) sees the processes without pids.
  auto tcp = Stub(host.daemon().tcp_target());
  grpc::ClientContext ctx;
  v1::Inventory seen;
  ASSERT_TRUE(tcp->GetInventory(&ctx, {}, &seen).ok());
  ASSERT_EQ(seen.backends(1).devices(0).usage().processes_size(), 2);
  EXPECT_EQ(seen.backends(1).devices(0).usage().processes(0).pid(), 0u);
  EXPECT_EQ(seen.backends(1).devices(0).usage().processes(0).used_memory_bytes(), 40 * kGiB);
  // The CLI's table shows it.
  const CommandResult table = RunCommand(host.Cli() + " inventory");
  EXPECT_THAT(table.out, HasSubstr("EXCLUSIVE_PROCESS (busy)"));
  EXPECT_THAT(table.out, ::testing::ContainsRegex("cuda/nvidia +0 +device +61.0 GiB +19.0 GiB +2 \\[4242"));
}

TEST(SharedHost, EvalPickExportsTheTwoLeastUsedAndResolveAnswersThem) {
  SharedHost host(8, {{0, {61 * kGiB, {{4242, 60 * kGiB}}, 0}},
                      {1, {11 * kGiB, {{5151, 10 * kGiB}}, 3}},
                      {2, {3 * kGiB, {{6161, 2 * kGiB}}, 0}},
                      {3, {5 * kGiB, {}, 0}},
                      {5, {2 * kGiB, {}, 0}},
                      {7, {3 * kGiB, {}, 0}}});
  // 4 and 6 hold 1 GiB each, the least; 0-2 have processes.
  const CommandResult r = Bash(absl::StrCat(
      "eval \"$(", host.Cli(), " pick --count=2 --no_environment)\"\n"
      "echo \"shell=$$ cvd=$CUDA_VISIBLE_DEVICES\"\n",
      host.Cli(), " resolve --workload=training --no_environment --env=CUDA_VISIBLE_DEVICES=\"$CUDA_VISIBLE_DEVICES\" "
      "--json > ", host.dir(), "/resolve.json\n",
      host.Cli(), " inventory --json > ", host.dir(), "/inventory.json\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("cvd=", Uuid(4), ",", Uuid(6))));
  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(host.dir() + "/resolve.json"), &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  EXPECT_EQ(answer.placed(0).pci_bus_id(), Bus(4));
  // The lease was held by that shell while it ran (and has ended with it).
  v1::Inventory during;
  google::protobuf::util::JsonParseOptions lenient;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(host.dir() + "/inventory.json"), &during, lenient).ok());
  ASSERT_EQ(during.leases_size(), 1);
  EXPECT_EQ(during.leases(0).holder(), v1::LEASE_HOLDER_PARENT);
  const std::string shell = ShellPid(r.out);
  EXPECT_EQ(absl::StrCat(during.leases(0).pid()), shell);
  EXPECT_EQ(host.LeasesLeft(), 0);
}

TEST(SharedHost, EightConcurrentRunsGetEightGpusTheNinthIsRefusedOrWaitsForTheFirstReleased) {
  SharedHost host(8, {}, {"--metrics_listen=127.0.0.1:0"});
  const std::string d = host.dir();
  // Eight `devplace run` at once, each holding its GPU until its release file appears.
  const CommandResult r = Bash(absl::StrCat(
      "cd ", d, "\n"
      "for i in 0 1 2 3 4 5 6 7; do\n"
      "  ", host.Cli(), " run --no_environment -- sh -c \"echo \\$CUDA_VISIBLE_DEVICES > got.$i; "
      "while [ ! -e release.$i ]; do sleep 0.05; done\" 2>/dev/null &\n"
      "done\n"
      "for i in 0 1 2 3 4 5 6 7; do while [ ! -s got.$i ]; do sleep 0.05; done; done\n"
      "if ", host.Cli(), " pick --no_environment > ninth.out 2> ninth.err; then echo ninth-picked; fi\n"
      "( ", host.Cli(), " run --no_environment --wait=20s -- sh -c 'echo $CUDA_VISIBLE_DEVICES > got.9' ) &\n"
      "waiter=$!\n"
      "sleep 0.5; touch release.3\n"
      "wait $waiter\n"
      "for i in 0 1 2 4 5 6 7; do touch release.$i; done\n"
      "wait\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ninth-picked")));
  std::set<std::string> gpus;
  for (int i = 0; i < 8; ++i) gpus.insert(std::string(absl::StripAsciiWhitespace(ReadFile(absl::StrCat(d, "/got.", i)))));
  EXPECT_EQ(gpus.size(), 8u) << "two runs got the same GPU";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(gpus.count(Uuid(i)), 1u) << Uuid(i);
  const std::string ninth = ReadFile(d + "/ninth.err");
  EXPECT_THAT(ninth, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(ninth, HasSubstr("1 free cuda/nvidia device(s) wanted, 0 free for this job now (8 it may use)"));
  EXPECT_THAT(ninth, HasSubstr("not picked: leased (a process group's lease (devplace run, or a job's pick))"));
  EXPECT_THAT(ninth, ::testing::Not(HasSubstr("pid ")));
  // The waiting one got the first GPU released.
  EXPECT_EQ(absl::StripAsciiWhitespace(ReadFile(d + "/got.9")), absl::StripAsciiWhitespace(ReadFile(d + "/got.3")));
  EXPECT_EQ(host.LeasesLeft(), 0);
  // Operators see it: picks by outcome, leases held, usage refreshes.
  std::smatch m;
  const std::string log = host.daemon().Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("event=metrics_listening url=http://([0-9.:]+)/metrics"))) << log;
  const CommandResult scrape = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", m[1].str(), "/metrics"));
  ASSERT_EQ(scrape.exit_code, 0) << scrape.out;
  EXPECT_THAT(scrape.out, ::testing::ContainsRegex("devplace_picks_total\\{outcome=\"answered\"\\} 9(\\.0*)?\n"));
  EXPECT_THAT(scrape.out, ::testing::ContainsRegex("devplace_picks_total\\{outcome=\"no_free_device\"\\} 1(\\.0*)?\n"));
  EXPECT_THAT(scrape.out, ::testing::ContainsRegex("devplace_leases_held 0(\\.0*)?\n"));
  EXPECT_THAT(scrape.out, HasSubstr("devplace_device_processes{host_index=\"3\""));
  EXPECT_THAT(scrape.out, HasSubstr("devplace_usage_refreshes_total{result=\"ok\"}"));
}

// A TTL lease of `count` GPUs over the unix socket, waiting up to `wait_ms`; `ctx` lets another
// thread cancel it.
grpc::Status PickTtl(v1::DevicePlacement::Stub& stub, int count, uint32_t wait_ms, v1::PickDevicesResponse& out,
                     grpc::ClientContext& ctx) {
  v1::PickDevicesRequest request;
  request.set_count(count);
  request.set_holder(v1::LEASE_HOLDER_TTL);
  request.set_ttl_ms(600'000);
  request.set_wait_ms(wait_ms);
  request.set_row(v1::ROW_CUDA_NVIDIA);
  return stub.PickDevices(&ctx, request, &out);
}

std::string HoldTtl(v1::DevicePlacement::Stub& stub, int count) {
  v1::PickDevicesResponse out;
  const grpc::Status s = PickTtl(stub, count, 0, out, *Ctx());
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out.lease().lease_id();
}

void ReleaseLease(v1::DevicePlacement::Stub& stub, const std::string& id) {
  v1::LeaseReleaseRequest r;
  r.set_lease_id(id);
  v1::LeaseReleaseResponse out;
  const grpc::Status s = stub.LeaseRelease(Ctx().get(), r, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// No starvation of a waiter for several devices. A holder keeps 6 of 8 GPUs and two leases the
// other 2; the first waiter wants 2; four younger waiters for 1 each cycle (each picks again as
// soon as it is served and has released). The first GPU freed is kept for the first waiter (a
// pick for 1 is told so), and the second serves it: no younger waiter is served before it. A pick
// for more GPUs than the host has, first in line, is refused at once and holds nobody back.
TEST(SharedHost, AWaiterForTwoIsServedBeforeYoungerWaitersForOneThatCycle) {
  SharedHost host(8, {}, {"--metrics_listen=127.0.0.1:0"});
  auto stub = Stub(host.daemon().unix_target());
  HoldTtl(*stub, 6);
  const std::string other[2] = {HoldTtl(*stub, 1), HoldTtl(*stub, 1)};
  v1::PickDevicesResponse never;
  const grpc::Status too_many = PickTtl(*stub, 9, 600'000, never, *Ctx(absl::Seconds(30)));
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(too_many.error_message(), HasSubstr("9 cuda/nvidia device(s) wanted, but the job may use only 8"));

  absl::Mutex mu;
  bool first_done = false;
  int younger_served = 0, younger_served_before_first = 0;
  grpc::Status first_status;
  v1::PickDevicesResponse first;
  grpc::ClientContext first_ctx;
  std::thread first_waiter([&] {
    const grpc::Status s = PickTtl(*stub, 2, 600'000, first, first_ctx);
    absl::MutexLock lock(&mu);
    first_status = s;
    first_done = true;
  });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 1)) << host.daemon().Log();
  std::atomic<bool> stop{false};
  std::vector<std::thread> younger;
  for (int i = 0; i < 4; ++i) {
    younger.emplace_back([&] {
      auto own = Stub(host.daemon().unix_target());
      while (!stop) {
        grpc::ClientContext ctx;
        v1::PickDevicesResponse got;
        if (!PickTtl(*own, 1, 600'000, got, ctx).ok()) return;
        {
          absl::MutexLock lock(&mu);
          ++younger_served;
          if (!first_done) ++younger_served_before_first;
        }
        ReleaseLease(*own, got.lease().lease_id());
      }
    });
  }
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 5)) << host.daemon().Log();
  ReleaseLease(*stub, other[0]);
  // A pick that arrives now is tried after every waiter: the GPU just freed is kept for the first.
  v1::PickDevicesResponse probe;
  const grpc::Status kept = PickTtl(*stub, 1, 0, probe, *Ctx(absl::Seconds(30)));
  EXPECT_EQ(kept.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(kept.error_message(), HasSubstr("not picked: kept free for an older waiting pick (it waits for 2 "
                                              "device(s))"));
  ReleaseLease(*stub, other[1]);
  {
    absl::MutexLock lock(&mu);
    auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return first_done || younger_served >= 20; };
    mu.AwaitWithTimeout(absl::Condition(&answered), absl::Seconds(120));
    EXPECT_TRUE(first_done) << "the younger waiters were served " << younger_served << " times";
    EXPECT_TRUE(first_status.ok()) << first_status.error_message();
    EXPECT_EQ(younger_served_before_first, 0);
  }
  // Then the younger ones take turns on the first waiter's two.
  stop = true;
  first_ctx.TryCancel();
  first_waiter.join();
  if (first_status.ok()) ReleaseLease(*stub, first.lease().lease_id());
  for (std::thread& t : younger) t.join();
  EXPECT_EQ(first.lease().devices_size(), 2);
  EXPECT_GE(younger_served, 4);
}

TEST(SharedHost, ALeaseEndsWithItsProcessAndRunReturnsTheExitStatus) {
  SharedHost host(2, {});
  // SIGKILL leaves the CLI no chance to release: the daemon sees the process end, and the command
  // dies with it (it must not run on devices the daemon hands to the next job).
  const std::string marker = absl::StrCat("sleep 30.", getpid());
  const CommandResult r = Bash(absl::StrCat(
      host.Cli(), " run --no_environment -- ", marker, " & runner=$!\n"
      // The command runs once its lease is held: wait for the command, not the lease (run forks it
      // after the pick is answered).
      "for n in $(seq 400); do pgrep -f '^", marker, "$' >/dev/null && break; sleep 0.05; done\n"
      "pgrep -f '^", marker, "$' >/dev/null && echo command started\n"
      "[ \"$(", host.Cli(), " inventory --json | grep -c '\"holder\"')\" -ge 1 ] && echo lease held\n"
      "kill -9 $runner\n"
      "for n in $(seq 100); do pgrep -f '^", marker, "$' >/dev/null || break; sleep 0.02; done\n"
      "pgrep -f '^", marker, "$' >/dev/null && echo command still runs || echo command ended\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("command started\n"));
  EXPECT_THAT(r.out, HasSubstr("lease held\n"));
  EXPECT_THAT(r.out, HasSubstr("command ended\n"));
  EXPECT_EQ(host.LeasesLeft(), 0);

  EXPECT_EQ(Bash(host.Cli() + " run --no_environment -- sh -c 'exit 7'").exit_code, 7);
  const CommandResult terminated = Bash(host.Cli() + " run --no_environment -- sh -c 'kill -TERM $$'");
  EXPECT_EQ(terminated.exit_code, 128 + SIGTERM);
  EXPECT_THAT(terminated.out, HasSubstr("devplace run: the command was killed by signal 15 (Terminated); exit status 143"));
  const CommandResult killed = Bash(host.Cli() + " run --no_environment -- sh -c 'kill -KILL $$'");
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  EXPECT_THAT(killed.out, HasSubstr("devplace run: the command was killed by signal 9 (Killed): from another process, "
                                    "or the kernel's OOM killer"));
  const CommandResult missing = Bash(host.Cli() + " run --no_environment -- /no/such/command");
  EXPECT_EQ(missing.exit_code, 127) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("cannot run /no/such/command: not found"));
}

TEST(SharedHost, NeverOutsideTheJobsMaskOrDeviceNodes) {
  SharedHost host(8, {{5, {1 * kGiB, {}, 0}}});
  // The job's mask names 5 and 6 (as Slurm without device confinement sets CUDA_VISIBLE_DEVICES):
  // only those are candidates, though 0-4 and 7 are idle too; a second pick from the same mask,
  // while the shell holding the first lease runs, finds both leased.
  CommandResult r = Bash(absl::StrCat(
      "cd ", host.dir(), "\n",
      "eval \"$(", host.Cli(), " pick --no_environment --env=CUDA_VISIBLE_DEVICES=5,6 --count=2)\"\n"
      "echo \"cvd=$CUDA_VISIBLE_DEVICES\"\n"
      "if ", host.Cli(), " pick --no_environment --env=CUDA_VISIBLE_DEVICES=5,6 2> second.err; then echo second-picked; fi\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("cvd=", Uuid(5), ",", Uuid(6))));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("second-picked")));
  EXPECT_THAT(ReadFile(host.dir() + "/second.err"), HasSubstr("(2 it may use)"));
  // A container (or Slurm's device cgroup) with /dev/nvidia7 only.
  r = RunCommand(host.Cli() + " pick --job_device_nodes=/dev/nvidiactl,/dev/nvidia7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  v1::PickDevicesResponse pick;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &pick).ok()) << r.out;
  ASSERT_EQ(pick.placed_size(), 1);
  EXPECT_EQ(pick.placed(0).pci_bus_id(), Bus(7));
  // Picks over TCP hold a lease for a time to live, kept alive or released by id.
  auto stub = Stub(host.daemon().tcp_target());
  v1::PickDevicesRequest request;
  request.mutable_job()->mutable_env()->insert({"CUDA_VISIBLE_DEVICES", "0"});
  // Without a time to live the caller asked for, nothing: a lease that silently ends while the
  // job runs is refused with the fix.
  grpc::ClientContext c0;
  v1::PickDevicesResponse implicit;
  const grpc::Status no_ttl = stub->PickDevices(&c0, request, &implicit);
  EXPECT_EQ(no_ttl.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(no_ttl.error_message(), HasSubstr("`devplace pick --ttl=2h`"));
  request.set_ttl_ms(300'000);
  grpc::ClientContext c1;
  v1::PickDevicesResponse tcp;
  ASSERT_TRUE(stub->PickDevices(&c1, request, &tcp).ok());
  EXPECT_EQ(tcp.lease().holder(), v1::LEASE_HOLDER_TTL);
  EXPECT_EQ(tcp.lease().expires_at().seconds() - tcp.lease().created_at().seconds(), 300);
  // Loopback TCP: the lease records the caller's uid, as the connection caps find it.
  ASSERT_TRUE(tcp.lease().has_uid());
  EXPECT_EQ(tcp.lease().uid(), getuid());
  request.set_ttl_ms(0);
  request.set_holder(v1::LEASE_HOLDER_PROCESS);
  grpc::ClientContext c2;
  v1::PickDevicesResponse refused;
  const grpc::Status process_over_tcp = stub->PickDevices(&c2, request, &refused);
  EXPECT_EQ(process_over_tcp.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(process_over_tcp.error_message(), HasSubstr("needs the unix socket"));
  grpc::ClientContext c3;
  v1::LeaseKeepAliveRequest keep;
  keep.set_lease_id(tcp.lease().lease_id());
  keep.set_ttl_ms(60'000);
  v1::LeaseKeepAliveResponse kept;
  ASSERT_TRUE(stub->LeaseKeepAlive(&c3, keep, &kept).ok());
  EXPECT_GT(kept.lease().expires_at().seconds(), kept.lease().created_at().seconds());
  // A caller over loopback TCP is known by its uid, as for the lease's owner: it sees its own
  // lease's id (which it may release or renew); TCP's TTL lease has no pid.
  grpc::ClientContext c4;
  v1::Inventory seen;
  ASSERT_TRUE(stub->GetInventory(&c4, {}, &seen).ok());
  int own = 0;
  for (const v1::LeaseInfo& l : seen.leases()) {
    if (l.lease_id() != tcp.lease().lease_id()) continue;
    ++own;
    EXPECT_EQ(l.pid(), 0u);
  }
  EXPECT_EQ(own, 1) << "the TCP caller does not see its own lease's id";
  grpc::ClientContext c5;
  v1::LeaseReleaseRequest release;
  release.set_lease_id(tcp.lease().lease_id());
  v1::LeaseReleaseResponse released;
  ASSERT_TRUE(stub->LeaseRelease(&c5, release, &released).ok());
  grpc::ClientContext c6;
  EXPECT_EQ(stub->LeaseRelease(&c6, release, &released).error_code(), grpc::StatusCode::NOT_FOUND);

  // The CLI over TCP: pick holds a TTL lease; release ends it by the id pick printed.
  const std::string tcp_cli =
      absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", host.daemon().tcp_target());
  r = RunCommand(tcp_cli + " pick --no_environment --json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--ttl"));
  r = RunCommand(tcp_cli + " pick --no_environment --ttl=5m --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::PickDevicesResponse cli_pick;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &cli_pick).ok()) << r.out;
  EXPECT_EQ(cli_pick.lease().holder(), v1::LEASE_HOLDER_TTL);
  r = RunCommand(tcp_cli + " release --lease_id=" + cli_pick.lease().lease_id());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat("released lease ", cli_pick.lease().lease_id(), " (1 device(s))\n"));
  r = RunCommand(tcp_cli + " release --lease_id=" + cli_pick.lease().lease_id());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND: lease_id: no lease " + cli_pick.lease().lease_id()));
  r = RunCommand(tcp_cli + " release");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--lease_id='': want the lease's id as `devplace pick` printed it or `devplace inventory` shows it on your own leases (1 to 64 bytes)"));
}

// `eval "$(devplace pick ...)"` in the spellings users write: bash forks a subshell for the
// command substitution when it has a redirection or a pipe; the lease must still go to the shell
// that evaluates the output (which runs the job), so three such shells at once get three GPUs.
TEST(SharedHost, EvalPickHoldsTheLeaseForTheEvaluatingShellInEverySpelling) {
  SharedHost host(4, {});
  const std::string d = host.dir();
  const CommandResult r = Bash(absl::StrCat(
      "cd ", ShellQuote(d), "\n", host.ShellEnv(),
      "bash -c 'eval \"$(devplace pick --no_environment 2>/dev/null)\"; echo $$ $CUDA_VISIBLE_DEVICES > a; "
      "while [ ! -e done ]; do sleep 0.05; done' &\n"
      "bash -c 'eval \"$(devplace pick --no_environment 2>&1)\"; echo $$ $CUDA_VISIBLE_DEVICES > b; "
      "while [ ! -e done ]; do sleep 0.05; done' &\n"
      "bash -c 'eval \"$(devplace pick --no_environment | cat)\"; echo $$ $CUDA_VISIBLE_DEVICES > c; "
      "while [ ! -e done ]; do sleep 0.05; done' &\n"
      "for f in a b c; do while [ ! -s $f ]; do sleep 0.05; done; done\n",
      host.Cli(), " inventory --json > inventory.json\n"
      "touch done; wait\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::set<std::string> gpus, shells;
  for (const char* f : {"/a", "/b", "/c"}) {
    const std::vector<std::string> words = absl::StrSplit(absl::StripAsciiWhitespace(ReadFile(d + f)), ' ');
    ASSERT_EQ(words.size(), 2u) << f;
    shells.insert(words[0]);
    gpus.insert(words[1]);
  }
  EXPECT_EQ(gpus.size(), 3u) << "two evals got the same GPU";
  v1::Inventory during;
  google::protobuf::util::JsonParseOptions lenient;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(d + "/inventory.json"), &during, lenient).ok());
  ASSERT_EQ(during.leases_size(), 3);
  std::set<std::string> holders;
  for (const v1::LeaseInfo& l : during.leases()) holders.insert(absl::StrCat(l.pid()));
  EXPECT_EQ(holders, shells) << "the leases are not held by the shells that ran the jobs";
}

// Whatever fails, eval fails: `eval "$(devplace pick)" && cmd` never runs cmd, `set -e` stops,
// and a shell that ignores the failure sees no GPU. The note reaches stderr, which eval leaves.
TEST(SharedHost, AFailedPickMakesEvalFailAndHidesTheGpus) {
  SharedHost host(2, {});
  const std::string no_daemon =
      absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=unix:", ShellQuote(host.dir() + "/none.sock"));
  CommandResult r = Bash(absl::StrCat(
      "cd ", host.dir(), "\n",
      "export CUDA_VISIBLE_DEVICES=0,1\n"
      "eval \"$(", host.Cli(), " pick --no_environment --count=3 2>/dev/null)\" && echo ran-too-many\n"
      "eval \"$(", host.Cli(), " pick --no_environment --bogus_flag 2>/dev/null)\" && echo ran-bad-flag\n"
      "eval \"$(", no_daemon, " pick --no_environment 2>/dev/null)\" && echo ran-no-daemon\n"
      // Unquoted, the output is joined into one line: its commands still run, before its comments.
      "(export CUDA_VISIBLE_DEVICES=0,1; eval $(", no_daemon, " pick --no_environment 2>/dev/null) && echo ran-unquoted;"
      " echo \"unquoted-cvd=[$CUDA_VISIBLE_DEVICES]\")\n"
      "echo \"cvd=[$CUDA_VISIBLE_DEVICES]\"\n"
      "eval \"$(", host.Cli(), " pick --no_environment 2>note.err)\" && echo ran-ok\n"
      "eval $(", host.Cli(), " pick --no_environment 2>/dev/null) && echo \"unquoted-ok=[$CUDA_VISIBLE_DEVICES]\"\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-too-many")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-bad-flag")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-no-daemon")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("ran-unquoted")));
  EXPECT_THAT(r.out, HasSubstr("unquoted-cvd=[]"));
  EXPECT_THAT(r.out, HasSubstr("unquoted-ok=[GPU-"));
  EXPECT_THAT(r.out, HasSubstr("cvd=[]"));
  EXPECT_THAT(r.out, HasSubstr("ran-ok"));
  const std::string note = ReadFile(host.dir() + "/note.err");
  EXPECT_THAT(note, ::testing::ContainsRegex("devplace pick: cuda:0 = host device [01] .*; lease [0-9a-f]{32} held "
                                             "while the shell \\(pid [0-9]+\\) runs; end it sooner: devplace "
                                             "release --lease_id=[0-9a-f]{32}"));
  // set -e: the script stops at the failed eval.
  r = Bash(absl::StrCat("eval \"$(", host.Cli(), " pick --no_environment --count=3)\"\necho after\n"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("after")));
  EXPECT_THAT(r.out, HasSubstr("FAILED_PRECONDITION"));
}

// A `devplace run` killed with SIGKILL: the process its command started lives on, and keeps the
// lease (held for the run's process group) until it ends; only then is the GPU picked again.
TEST(SharedHost, AKilledRunKeepsItsLeaseWhileAnyProcessOfTheJobLives) {
  SharedHost host(1, {});
  const std::string marker = absl::StrCat("30.", getpid());
  const std::string tail = absl::StrCat(" pgrep -f '^sleep ", marker, "$'");
  CommandResult r = Bash(absl::StrCat(
      "cd ", ShellQuote(host.dir()), "\n", host.ShellEnv(),
      "bash -c 'exec devplace run --no_environment -- bash -c \"sleep ", marker, "; true\"' 2>/dev/null &\n"
      // Killed once its job runs (a slow machine or a sanitizer build may take seconds to pick).
      "for n in $(seq 400);", " do", tail, " >/dev/null && break; sleep 0.05; done\n"
      "kill -9 $!\n"
      "sleep 2\n",
      tail, " >/dev/null && echo job-lives\n"
      "if ", host.Cli(), " pick --no_environment 2> second.err; then echo second-picked; fi\n"
      "pkill -f '^sleep ", marker, "$'\n"
      "for n in $(seq 100); do ", host.Cli(), " pick --no_environment --wait=5s >/dev/null 2>&1 && echo third-picked && "
      "break; done\n"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("job-lives"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("second-picked")));
  EXPECT_THAT(ReadFile(host.dir() + "/second.err"), HasSubstr("a process group's lease (devplace run, or a job's pick)"));
  EXPECT_THAT(r.out, HasSubstr("third-picked"));
}

// Without a vendor library the usage and free memory are unknown: the pick says so (stderr, where
// eval cannot hide it), and --min_free is refused at once rather than waited out.
TEST(SharedHost, UnknownUsageIsAWarningAndMinFreeIsRefusedAtOnce) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
                               "--nvml_library=/nonexistent/libnvidia-ml.so.1", "--cuda_library="});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(d.unix_target()));
  const absl::Time start = absl::Now();
  CommandResult r = RunCommand(cli + " pick --no_environment --min_free=1G --wait=60s");
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION: P-PICK --min_free (min_free_bytes 1.0 GiB) needs each device's "
                               "free memory, and it is unknown for all 2 cuda/nvidia device(s)"));
  r = RunCommand(cli + " pick --no_environment");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("devplace pick: warning: P-PICK usage unknown for "));
  r = RunCommand(cli + " inventory");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("unknown for 2 device(s) (cuda/nvidia 0, cuda/nvidia 1): no vendor library reads it"));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

// A local user outside the socket's group (here `nobody`) holds a process lease over the unix
// socket, bound to their own shell. They see their own lease whole (its id, to release or renew it,
// and its holder's pid) and another user's (root's TTL lease) without id or pid; refresh stays
// privileged.
TEST(SharedHost, AnyLocalUserHoldsAProcessLeaseOverTheUnixSocketAndSeesOnlyItsOwnLeasesIds) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run a command as nobody (setpriv)";
  SharedHost host(2, {});
  const std::string as_nobody = host.AsNobody();
  if (as_nobody.empty()) GTEST_SKIP() << "setpriv missing, or nobody cannot reach " << DEVPLACE_CLI_BINARY;
  const CommandResult root_pick = host.Script("devplace pick --no_environment --ttl=1h --json");
  v1::PickDevicesResponse roots;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(root_pick.out, &roots).ok()) << root_pick.out;
  const std::string script = absl::StrCat(
      "cd /; eval \"$(", host.Cli(), " pick --no_environment 2>/dev/null)\" && echo \"shell=$$ cvd=$CUDA_VISIBLE_DEVICES\"\n",
      "echo '<<<'; ", host.Cli(), " inventory --json; echo '>>>'\n", host.Cli(), " inventory | grep -c '(hidden)'\n",
      host.Cli(), " refresh 2>&1 || echo refresh-refused\n");
  const CommandResult r = RunCommand(as_nobody + "bash -c " + ShellQuote(script));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("cvd=GPU-"));
  const std::string shell = ShellPid(r.out);
  const size_t from = r.out.find("<<<\n"), to = r.out.find(">>>\n");
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos) << r.out;
  v1::Inventory seen;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out.substr(from + 4, to - from - 4), &seen).ok()) << r.out;
  ASSERT_EQ(seen.leases_size(), 2) << r.out;
  for (const v1::LeaseInfo& lease : seen.leases()) {
    ASSERT_TRUE(lease.has_uid());
    if (lease.uid() == 65534) {
      EXPECT_EQ(lease.holder(), v1::LEASE_HOLDER_PARENT);
      EXPECT_EQ(lease.lease_id().size(), 32u) << "the owner does not see its own lease's id";
      EXPECT_EQ(absl::StrCat(lease.pid()), shell);
    } else {
      EXPECT_EQ(lease.uid(), 0u);
      EXPECT_EQ(lease.holder(), v1::LEASE_HOLDER_TTL);
      EXPECT_EQ(lease.lease_id(), "") << "another user's lease id is shown";
      EXPECT_EQ(lease.pid(), 0u);
    }
  }
  EXPECT_THAT(r.out, HasSubstr(">>>\n1\n")) << "the table hides exactly root's lease id";
  EXPECT_THAT(r.out, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(r.out, HasSubstr("refresh-refused"));
  EXPECT_EQ(host.Script("devplace release --lease_id=" + roots.lease().lease_id()).exit_code, 0);
}

}  // namespace
}  // namespace devplace::testing
