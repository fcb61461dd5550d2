// --max_receive_bytes is validated, and oversized requests sent at once do not
// make the daemon hold gigabytes: its peak RSS (VmHWM) stays under a stated bound.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
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

// A /proc/PID/status field in kB ("VmHWM", "VmRSS"), -1 if absent.
int64_t StatusKb(pid_t pid, const std::string& field) {
  const std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find(field + ":");
  if (at == std::string::npos) return -1;
  return std::stoll(status.substr(at + field.size() + 1));
}

TEST(ReceiveLimit, OutOfRangeFlagsExitTwoNamingTheFlagAndRange) {
  TempDir dir;
  for (const std::string value : {"-1", "0", "-5", "100", "1073741824"}) {
    SCOPED_TRACE(value);
    const CommandResult r =
        RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=unix:", dir.File("s.sock"),
                                " --host_root=", ShellQuote(FixtureHost("cpu-only")), " --max_receive_bytes=", value));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("--max_receive_bytes=" + value + " is out of range; accepted: 4096..67108864"));
  }
  const CommandResult quota =
      RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=unix:", dir.File("s.sock"),
                              " --host_root=", ShellQuote(FixtureHost("cpu-only")), " --memory_quota_bytes=1000"));
  EXPECT_EQ(quota.exit_code, 2) << quota.out << quota.err;
  EXPECT_THAT(quota.err, HasSubstr("--memory_quota_bytes=1000 is out of range"));
}

// Four concurrent requests of kRequestBytes each over TCP (scaled down from the 4 x 1 GB so
// the test stays quick; the bound holds the same way).
constexpr size_t kRequestBytes = size_t{128} << 20;
constexpr int kRequests = 4;
// The daemon's peak RSS must stay under its --memory_quota_bytes (64 MiB here) plus 160 MiB: gRPC's
// quota is a target it reclaims towards, not a hard cap. Measured on the 2-core test machine:
// 95..167 MiB with the quota, about 465 MiB without one (the requests buffered whole).
constexpr int64_t kPeakBoundKb = (64 + 160) * 1024;

TEST(ReceiveLimit, ConcurrentOversizedRequestsKeepPeakRssBounded) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--memory_quota_bytes=" + std::to_string(64 << 20)});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const int64_t before_kb = StatusKb(d.pid(), "VmHWM");
  ASSERT_GT(before_kb, 0);

  // One payload shared by every request (slices are reference-counted): field 3 (device_map) of
  // kRequestBytes.
  std::string payload;
  {
    v1::ResolveDeviceRequest oversized;
    oversized.mutable_device_map()->assign(kRequestBytes, 'x');
    payload = oversized.SerializeAsString();
  }
  grpc::Slice slice(payload);
  payload.clear();
  payload.shrink_to_fit();

  std::vector<grpc::Status> statuses(kRequests);
  std::vector<std::thread> callers;
  for (int i = 0; i < kRequests; ++i) {
    callers.emplace_back([&, i] {
      // A channel each, so the requests arrive on separate connections as an attacker would send them.
      grpc::ChannelArguments args;
      args.SetInt("devplace.test.channel", i);
      grpc::GenericStub generic(grpc::CreateCustomChannel(d.tcp_target(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      grpc::ByteBuffer request(&slice, 1), response;
      absl::Notification done;
      generic.UnaryCall(&ctx, "/devplace.v1.DevicePlacement/ResolveDevice", grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) {
                          statuses[i] = std::move(s);
                          done.Notify();
                        });
      done.WaitForNotification();
    });
  }
  for (std::thread& t : callers) t.join();
  const int64_t peak_kb = StatusKb(d.pid(), "VmHWM");
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  RecordProperty("peak_rss_kb", std::to_string(peak_kb));
  RecordProperty("start_rss_kb", std::to_string(before_kb));
  fprintf(stderr, "devplaced VmHWM: %lld kB at start, %lld kB after %d x %zu MiB requests\n",
          static_cast<long long>(before_kb), static_cast<long long>(peak_kb), kRequests, kRequestBytes >> 20);
#if defined(__SANITIZE_ADDRESS__)
  // ASan's allocator keeps freed memory in quarantine and adds redzones: the figure is not the
  // daemon's. The bound is asserted in the ordinary builds.
  fprintf(stderr, "peak RSS bound not asserted under AddressSanitizer\n");
#else
  EXPECT_LT(peak_kb, kPeakBoundKb);
#endif

  // The daemon still answers.
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  v1::ListBackendsResponse backends;
  EXPECT_TRUE(stub->ListBackends(&ctx, {}, &backends).ok());
}

}  // namespace
}  // namespace devplace::testing
