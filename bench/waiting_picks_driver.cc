// waiting_picks_driver: the figures of waiting PickDevices calls against the real devplaced, over
// loopback TCP only (each figure needs a daemon process of its own):
//   memory   the daemon's RSS before, while N picks of about B bytes each (env entries, inside every
//            limit) wait for devices a lease holds, and after they were cancelled; with its CPU
//            time while they wait, and how many were refused at once (RESOURCE_EXHAUSTED)
//   order    R rounds: W costly picks queued one after the other, then the lease ends; which
//            waiters got the two devices (arrival order: the first two)
// Usage: waiting_picks_driver [--waiters=400] [--bytes=748000] [--rounds=5] [--order_waiters=100]
//        [--daemon=PATH] (another devplaced binary, e.g. an older build, for a before/after pair)
//        [--flag=--name=value ...] (extra daemon flags; repeatable)
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "bench/proc_status.h"
#include "tests/integration/daemon_process.h"

namespace devplace {
namespace {

using testing::DaemonProcess;

struct Options {
  int waiters = 400;
  int bytes = 748000;
  int rounds = 5;
  int order_waiters = 100;
  std::string daemon;
  std::vector<std::string> flags;
};

std::unique_ptr<DaemonProcess> Start(const Options& o) {
  char tmpl[] = "/tmp/devplace-waiting-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<std::string> flags = o.flags;
  flags.push_back(std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/nvidia-2x-h100");
  std::vector<std::string> prefix;
  // DaemonProcess runs its own devplaced; a shell in front swaps in the one asked for.
  if (!o.daemon.empty()) prefix = {"/bin/sh", "-c", "shift; exec \"$DEVPLACE_OTHER_DAEMON\" \"$@\"", "sh"};
  if (!o.daemon.empty()) setenv("DEVPLACE_OTHER_DAEMON", o.daemon.c_str(), 1);
  auto d = std::make_unique<DaemonProcess>(dir, flags, prefix);
  d->WaitForLog("event=inventory revision=1", absl::Seconds(20));
  return d;
}

v1::PickDevicesRequest Costly(int bytes, uint32_t wait_ms) {
  v1::PickDevicesRequest r;
  r.set_holder(v1::LEASE_HOLDER_TTL);
  r.set_wait_ms(wait_ms);
  r.mutable_job()->set_workload(v1::WORKLOAD_TRAINING);
  const int entries = 256;
  const int each = std::max(1, bytes / entries - 16);
  for (int i = 0; i < entries; ++i) {
    (*r.mutable_job()->mutable_env())[absl::StrCat("JOB_SETTING_", i)] = std::string(static_cast<size_t>(each), 'v');
  }
  return r;
}

// Holds both GPUs with a TTL lease; its id.
std::string HoldAll(v1::DevicePlacement::Stub& stub) {
  v1::PickDevicesRequest all;
  all.set_count(2);
  all.set_holder(v1::LEASE_HOLDER_TTL);
  all.set_ttl_ms(600000);
  grpc::ClientContext ctx;
  v1::PickDevicesResponse got;
  const grpc::Status s = stub.PickDevices(&ctx, all, &got);
  if (!s.ok()) fprintf(stderr, "hold: %s\n", s.error_message().c_str());
  return got.lease().lease_id();
}

void Release(v1::DevicePlacement::Stub& stub, const std::string& id) {
  v1::LeaseReleaseRequest r;
  r.set_lease_id(id);
  grpc::ClientContext ctx;
  v1::LeaseReleaseResponse out;
  const grpc::Status s = stub.LeaseRelease(&ctx, r, &out);
  if (!s.ok()) fprintf(stderr, "release: %s\n", s.error_message().c_str());
}

// One waiting call.
struct Waiter {
  grpc::ClientContext ctx;
  v1::PickDevicesResponse response;
  std::atomic<bool> done{false};
  grpc::Status status;
};

// A channel of its own (a distinct argument: gRPC shares one connection between equal channels).
// A connection carries at most 100 calls at once (devplaced's GRPC_ARG_MAX_CONCURRENT_STREAMS), so
// waiters are spread over channels of 50, and control calls never queue behind them.
std::unique_ptr<v1::DevicePlacement::Stub> NewStub(const std::string& target) {
  static std::atomic<int> next{0};
  grpc::ChannelArguments args;
  args.SetInt("devplace.bench.channel", next++);
  return v1::DevicePlacement::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

// Starts `request` as one more waiter.
void StartWaiter(const std::string& target, const v1::PickDevicesRequest& request,
                 std::vector<std::unique_ptr<v1::DevicePlacement::Stub>>& stubs,
                 std::vector<std::unique_ptr<Waiter>>& waiters) {
  if (waiters.size() % 50 == 0) stubs.push_back(NewStub(target));
  auto w = std::make_unique<Waiter>();
  Waiter* raw = w.get();
  stubs.back()->async()->PickDevices(&raw->ctx, &request, &raw->response, [raw](grpc::Status s) {
    raw->status = std::move(s);
    raw->done = true;
  });
  waiters.push_back(std::move(w));
}

// Cancels every waiter and waits for their answers.
void CancelAll(std::vector<std::unique_ptr<Waiter>>& waiters) {
  for (const auto& w : waiters) w->ctx.TryCancel();
  for (const auto& w : waiters) {
    while (!w->done) absl::SleepFor(absl::Milliseconds(5));
  }
}

void Memory(const Options& o) {
  auto d = Start(o);
  auto stub = NewStub(d->tcp_target());
  std::vector<std::unique_ptr<v1::DevicePlacement::Stub>> stubs;
  HoldAll(*stub);
  const v1::PickDevicesRequest request = Costly(o.bytes, 3600000);
  absl::SleepFor(absl::Seconds(1));
  const int64_t before = StatusKb(d->pid(), "VmRSS");
  std::vector<std::unique_ptr<Waiter>> waiters;
  for (int i = 0; i < o.waiters; ++i) StartWaiter(d->tcp_target(), request, stubs, waiters);
  absl::SleepFor(absl::Seconds(5));  // all sent and parsed
  const double cpu0 = CpuSeconds(d->pid());
  absl::SleepFor(absl::Seconds(5));
  const double cpu_per_s = (CpuSeconds(d->pid()) - cpu0) / 5;
  const int64_t waiting = StatusKb(d->pid(), "VmRSS");
  int refused = 0, still = 0;
  for (const auto& w : waiters) {
    if (!w->done) ++still;
    if (w->done && w->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
  }
  CancelAll(waiters);
  absl::SleepFor(absl::Seconds(3));  // the daemon's pick worker sees them cancelled
  const int64_t after = StatusKb(d->pid(), "VmRSS");
  if (after < 0) {  // the daemon is gone: its last words
    const std::string log = d->Log();
    fprintf(stderr, "devplaced exited; its log ends:\n%s\n", log.substr(log.size() > 4000 ? log.size() - 4000 : 0).c_str());
  }
  printf("memory: %d waiters x %d bytes: rss_before_kb=%lld rss_waiting_kb=%lld rss_after_cancel_kb=%lld "
         "waiting=%d refused_at_once=%d daemon_cpu_while_waiting=%.2f cores\n",
         o.waiters, static_cast<int>(request.ByteSizeLong()), static_cast<long long>(before),
         static_cast<long long>(waiting), static_cast<long long>(after), still, refused, cpu_per_s);
  d->Signal(SIGTERM);
  d->WaitExit(absl::Seconds(20));
}

void Order(const Options& o) {
  auto d = Start(o);
  auto stub = NewStub(d->tcp_target());
  std::vector<std::unique_ptr<v1::DevicePlacement::Stub>> stubs;
  const v1::PickDevicesRequest request = Costly(o.bytes, 60000);
  int out_of_order = 0;
  for (int round = 0; round < o.rounds; ++round) {
    const std::string lease = HoldAll(*stub);
    std::vector<std::unique_ptr<Waiter>> waiters;
    for (int i = 0; i < o.order_waiters; ++i) {
      StartWaiter(d->tcp_target(), request, stubs, waiters);
      absl::SleepFor(absl::Milliseconds(10));  // one after the other
    }
    absl::SleepFor(absl::Milliseconds(200 + 97 * round));  // the release lands anywhere in the retry cycle
    Release(*stub, lease);
    std::vector<int> winners;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (winners.size() < 2 && absl::Now() < give_up) {
      winners.clear();
      for (int i = 0; i < o.order_waiters; ++i) {
        if (waiters[i]->done && waiters[i]->status.ok()) winners.push_back(i);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    int refused = 0;
    for (const auto& w : waiters) refused += w->done && w->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    const bool in_order = winners == std::vector<int>{0, 1};
    out_of_order += !in_order;
    printf("order: round %d winners", round + 1);
    for (int w : winners) printf(" #%d", w);
    printf(" refused_at_once=%d %s\n", refused, in_order ? "(arrival order)" : "(a later waiter won)");
    CancelAll(waiters);
    for (int i : winners) Release(*stub, waiters[i]->response.lease().lease_id());
  }
  printf("order: a later waiter won in %d of %d rounds\n", out_of_order, o.rounds);
  d->Signal(SIGTERM);
  d->WaitExit(absl::Seconds(20));
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  devplace::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&a](const std::string& name) { return a.substr(name.size() + 3); };
    const auto is = [&a](const std::string& name) { return a.rfind("--" + name + "=", 0) == 0; };
    bool ok = true;
    if (is("waiters")) ok = absl::SimpleAtoi(value("waiters"), &o.waiters);
    else if (is("bytes")) ok = absl::SimpleAtoi(value("bytes"), &o.bytes);
    else if (is("rounds")) ok = absl::SimpleAtoi(value("rounds"), &o.rounds);
    else if (is("order_waiters")) ok = absl::SimpleAtoi(value("order_waiters"), &o.order_waiters);
    else if (is("daemon")) o.daemon = value("daemon");
    else if (is("flag")) o.flags.push_back(value("flag"));
    else ok = false;
    if (!ok) {
      fprintf(stderr, "waiting_picks_driver: unknown or bad argument %s (see the top of bench/waiting_picks_driver.cc)\n",
              a.c_str());
      return 2;
    }
  }
  if (o.waiters > 0) devplace::Memory(o);
  if (o.rounds > 0 && o.order_waiters >= 2) devplace::Order(o);
  return 0;
}
