// SIGTERM under load drains unary calls, ends every watch with OK and exits
// within 1 s plus --shutdown_grace; a failed first probe is retried with backoff even with
// --refresh_interval=0, and clients get the real reason meanwhile.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

TEST(Lifecycle, SigtermUnderLoadEndsWatchesWithOkAndExitsWithinGrace) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--shutdown_grace=1s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto channel = grpc::CreateChannel(d.unix_target(), grpc::InsecureChannelCredentials());
  auto stub = v1::DevicePlacement::NewStub(channel);
  // Watches, each past its first snapshot.
  constexpr int kWatches = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Inventory>>> watches;
  for (int i = 0; i < kWatches; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    watches.push_back(stub->WatchInventory(contexts.back().get(), {}));
    v1::Inventory first;
    ASSERT_TRUE(watches.back()->Read(&first));
  }
  // Unary callers until the daemon goes away.
  std::atomic<bool> stop{false};
  std::atomic<int> ok_calls{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      v1::ResolveDeviceRequest request;
      request.set_workload(v1::WORKLOAD_INFERENCE);
      while (!stop) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::ResolveDeviceResponse response;
        if (stub->ResolveDevice(&ctx, request, &response).ok()) ++ok_calls;
      }
    });
  }
  while (ok_calls < 50) absl::SleepFor(absl::Milliseconds(10));
  const absl::Time signalled = absl::Now();
  d.Signal(SIGTERM);
  const int status = d.WaitExit(absl::Seconds(10));
  const absl::Duration took = absl::Now() - signalled;
  stop = true;
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(status, 0) << d.Log();
  fprintf(stderr, "exit %d after SIGTERM in %s\n", status, absl::FormatDuration(took).c_str());
  // 1 s + --shutdown_grace, plus slack for a loaded test machine.
  EXPECT_LT(took, absl::Seconds(4)) << d.Log();
  for (int i = 0; i < kWatches; ++i) {
    v1::Inventory more;
    while (watches[i]->Read(&more)) {
    }
    const grpc::Status end = watches[i]->Finish();
    EXPECT_TRUE(end.ok()) << "watch " << i << ": " << end.error_code() << " " << end.error_message();
  }
}

TEST(Lifecycle, AFailedFirstProbeIsRetriedWithBackoffAndItsReasonServed) {
  TempDir dir;
  // A probe that fails (with a quote and a newline in its stderr) until `allow` exists.
  const std::string probe = dir.File("flaky-probe");
  {
    std::ofstream script(probe);
    script << "#!/bin/sh\n"
           << "if [ ! -e " << dir.File("allow") << " ]; then printf 'failing \"on purpose\"\\nline two\\n' >&2; exit 3; fi\n"
           << "exec " << ShellQuote(DEVPLACE_PROBE_BINARY) << " \"$@\"\n";
  }
  ASSERT_EQ(chmod(probe.c_str(), 0755), 0);
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--probe_command=" + probe, "--refresh_interval=0"});
  ASSERT_TRUE(d.WaitForLog("event=probe result=error", absl::Seconds(20))) << d.Log();
  // The log line escapes the child's stderr: one line, quotes escaped.
  EXPECT_THAT(d.Log(), HasSubstr(R"(failing \"on purpose\" | line two)")) << d.Log();

  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  const grpc::Status early = stub->GetInventory(&ctx, {}, &inv);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(early.error_message(), HasSubstr("failing \"on purpose\""));
  EXPECT_THAT(early.error_message(), HasSubstr("retrying"));

  std::ofstream(dir.File("allow")).put('\n');
  // Backoff is 1 s doubling: the retry lands within a few seconds, with no refresh interval.
  EXPECT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(15))) << d.Log();
  grpc::ClientContext again;
  EXPECT_TRUE(stub->GetInventory(&again, {}, &inv).ok());
}

}  // namespace
}  // namespace devplace::testing
