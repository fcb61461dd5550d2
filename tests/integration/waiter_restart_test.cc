// Waiting picks survive a daemon restart, with real parts: devplaced on a fake one-GPU host is
// stopped with SIGTERM (as a package upgrade's `systemctl restart` does) and started again in the
// same directory while picks wait for the GPU. The waiters come back (the CLI's `devplace run
// --wait` by itself; raw gRPC callers with the waiter id they were sent) and are served in the
// order they first arrived in; a waiter that does not come back holds its place only for the
// grace; a daemon that stays down past a waiter's deadline gives the old error.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/eventually.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/integration/shared_host.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Creates the empty file a test's job waits for.
void Touch(const std::string& path) { std::ofstream created(path); }

// How many times `needle` occurs in `log`.
int Count(const std::string& log, const std::string& needle) {
  int n = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
  return n;
}

// A TTL pick of one GPU over `target`, waiting up to `wait_ms`, presenting `waiter_id`; the waiter
// id the daemon sent (initial metadata) goes to `sent_id`.
grpc::Status Ask(const std::string& target, uint32_t wait_ms, const std::string& waiter_id,
                 v1::PickDevicesResponse* out, std::string* sent_id = nullptr) {
  v1::PickDevicesRequest request;
  request.set_holder(v1::LEASE_HOLDER_TTL);
  request.set_ttl_ms(600'000);
  request.set_wait_ms(wait_ms);
  request.set_waiter_id(waiter_id);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms + 30'000));
  const grpc::Status status = Stub(target)->PickDevices(&ctx, request, out);
  if (sent_id != nullptr) {
    const auto& metadata = ctx.GetServerInitialMetadata();
    if (auto it = metadata.find("devplace-waiter-id"); it != metadata.end()) sent_id->assign(it->second.data(), it->second.size());
  }
  return status;
}

void Release(const std::string& target, const std::string& lease_id) {
  v1::LeaseReleaseRequest request;
  request.set_lease_id(lease_id);
  grpc::ClientContext ctx;
  v1::LeaseReleaseResponse out;
  const grpc::Status s = Stub(target)->LeaseRelease(&ctx, request, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// The holder's `devplace run` keeps the GPU until release.h appears; then two `devplace run
// --wait=3m` queue, A before B, and the daemon restarts. Both come back by themselves, and the GPU
// goes to A when the holder lets it go, then to B when A does.
TEST(WaiterRestart, TwoQueuedRunsGetTheGpuInArrivalOrderAfterARestart) {
  SharedHost host(1, {}, {"--metrics_listen=127.0.0.1:0", "--waiter_restart_grace=5m"});
  const std::string d = host.dir();
  CommandResult holder, a, b;
  std::thread holding([&] {
    holder = host.Script("devplace run --no_environment -- sh -c "
                         "'echo $CUDA_VISIBLE_DEVICES > got.h; while [ ! -e release.h ]; do sleep 0.05; done'");
  });
  ASSERT_TRUE(Eventually([&] { return !ReadFile(d + "/got.h").empty(); }, absl::Seconds(60))) << host.daemon().Log();
  std::thread first([&] {
    a = host.Script("devplace run --no_environment --wait=3m -- sh -c "
                    "'echo A >> order; while [ ! -e release.a ]; do sleep 0.05; done'");
  });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 1)) << host.daemon().Log();
  std::thread second([&] { b = host.Script("devplace run --no_environment --wait=3m -- sh -c 'echo B >> order'"); });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 2)) << host.daemon().Log();

  host.Restart();
  EXPECT_THAT(host.daemon().Log(), HasSubstr("kept=1 dropped=0 waiters=2"));
  ASSERT_TRUE(Eventually([&] { return Count(host.daemon().Log(), "action=waiter_returned") == 2; }, absl::Seconds(60)))
      << host.daemon().Log();
  Touch(d + "/release.h");
  ASSERT_TRUE(Eventually([&] { return !ReadFile(d + "/order").empty(); }, absl::Seconds(60))) << host.daemon().Log();
  EXPECT_EQ(ReadFile(d + "/order"), "A\n");  // A first; B waits while A holds the GPU
  Touch(d + "/release.a");
  first.join();
  second.join();
  holding.join();
  EXPECT_EQ(a.exit_code, 0) << a.out;
  EXPECT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(holder.exit_code, 0) << holder.out;
  EXPECT_EQ(ReadFile(d + "/order"), "A\nB\n");
  EXPECT_EQ(host.LeasesLeft(), 0);
}

// Two waiters A and B (raw gRPC, A first) get their waiter ids; after the restart B comes back
// first. The GPU freed then is kept for A's place: B is not served, and a pick without a wait is
// refused saying why. A comes back and is served; B gets the GPU when A releases it.
TEST(WaiterRestart, AWaiterBackFirstIsNotServedBeforeAnOlderOneThatComesBack) {
  SharedHost host(1, {}, {"--metrics_listen=127.0.0.1:0", "--waiter_restart_grace=5m"});
  const std::string target = host.daemon().unix_target();
  v1::PickDevicesResponse held;
  ASSERT_TRUE(Ask(target, 0, "", &held).ok());
  grpc::Status a_status, b_status;
  std::string a_id, b_id;
  v1::PickDevicesResponse a_out, b_out;
  std::thread a([&] { a_status = Ask(target, 120'000, "", &a_out, &a_id); });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 1)) << host.daemon().Log();
  std::thread b([&] { b_status = Ask(target, 120'000, "", &b_out, &b_id); });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 2)) << host.daemon().Log();
  host.Restart();
  a.join();
  b.join();
  EXPECT_EQ(a_status.error_code(), grpc::StatusCode::UNAVAILABLE) << a_status.error_message();
  EXPECT_EQ(b_status.error_code(), grpc::StatusCode::UNAVAILABLE) << b_status.error_message();
  ASSERT_THAT(a_id, MatchesRegex("[0-9a-f]{32}"));
  ASSERT_THAT(b_id, MatchesRegex("[0-9a-f]{32}"));
  ASSERT_NE(a_id, b_id);

  std::atomic<bool> b_done{false};
  std::thread b_back([&] {
    b_status = Ask(target, 120'000, b_id, &b_out);
    b_done = true;
  });
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(host.daemon().Log(), "action=waiter_returned"); },
                         absl::Seconds(60)))
      << host.daemon().Log();
  Release(target, held.lease().lease_id());
  v1::PickDevicesResponse none;
  const grpc::Status refused = Ask(target, 0, "", &none);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("kept for the picks that were waiting when devplaced restarted"));
  EXPECT_FALSE(b_done) << "B was served before A came back";

  const grpc::Status a_back = Ask(target, 120'000, a_id, &a_out);
  ASSERT_TRUE(a_back.ok()) << a_back.error_message();
  EXPECT_FALSE(b_done) << "B was served while A holds the GPU";
  Release(target, a_out.lease().lease_id());
  b_back.join();
  ASSERT_TRUE(b_status.ok()) << b_status.error_message();
  EXPECT_EQ(b_out.lease().devices(0).pci_bus_id(), a_out.lease().devices(0).pci_bus_id());
  Release(target, b_out.lease().lease_id());
}

// A `devplace run --wait=10s` whose daemon stops and stays down past those 10 s: the old error (the
// daemon does not answer at that socket), once the wait is over, and no command run.
TEST(WaiterRestart, ADaemonThatStaysDownPastTheWaitGivesTheOldError) {
  SharedHost host(1, {}, {"--metrics_listen=127.0.0.1:0", "--waiter_restart_grace=5m"});
  const std::string d = host.dir();
  CommandResult holder, waiter;
  std::thread holding([&] {
    holder = host.Script("devplace run --no_environment -- sh -c "
                         "'echo $CUDA_VISIBLE_DEVICES > got.h; while [ ! -e release.h ]; do sleep 0.05; done'");
  });
  ASSERT_TRUE(Eventually([&] { return !ReadFile(d + "/got.h").empty(); }, absl::Seconds(60))) << host.daemon().Log();
  std::thread waiting([&] { waiter = host.Script("devplace run --no_environment --wait=10s -- touch ran"); });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 1)) << host.daemon().Log();
  host.Restart([&] { waiting.join(); });  // the waiter gives up while no daemon runs
  EXPECT_NE(waiter.exit_code, 0) << waiter.out;
  EXPECT_THAT(waiter.out, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(waiter.out, ::testing::AnyOf(HasSubstr("devplaced is not answering there"),
                                           HasSubstr("devplaced is probably not running")));
  EXPECT_NE(access((d + "/ran").c_str(), F_OK), 0) << "the command ran";
  Touch(d + "/release.h");
  holding.join();
  EXPECT_EQ(holder.exit_code, 0) << holder.out;
}

// A waiter that does not come back after the restart (its call ended with the old daemon) holds its
// place only for --waiter_restart_grace: then it is dropped with a log line, and a later waiter
// gets the GPU.
TEST(WaiterRestart, APlaceholderWhoseWaiterDoesNotComeBackIsDroppedAfterTheGrace) {
  SharedHost host(1, {}, {"--metrics_listen=127.0.0.1:0", "--waiter_restart_grace=1s"});
  const std::string target = host.daemon().unix_target();
  v1::PickDevicesResponse held, gone, later;
  ASSERT_TRUE(Ask(target, 0, "", &held).ok());
  grpc::Status gone_status;
  std::thread waiter([&] { gone_status = Ask(target, 120'000, "", &gone); });
  ASSERT_TRUE(AwaitPicksWaiting(host.daemon(), 1)) << host.daemon().Log();
  host.Restart();
  waiter.join();
  EXPECT_EQ(gone_status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(host.daemon().Log(), HasSubstr("waiters=1"));
  Release(target, held.lease().lease_id());
  const grpc::Status served = Ask(target, 120'000, "", &later);
  ASSERT_TRUE(served.ok()) << served.error_message() << host.daemon().Log();
  EXPECT_THAT(host.daemon().Log(), HasSubstr("action=waiter_dropped user=uid:"));
  EXPECT_THAT(host.daemon().Log(), HasSubstr("its caller did not come back within --waiter_restart_grace"));
  Release(target, later.lease().lease_id());
}

}  // namespace
}  // namespace devplace::testing
