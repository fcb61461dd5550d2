// Reflection and health checked with a client nobody here wrote: `buf curl` (npm @bufbuild/buf,
// installed by scripts/setup into .tools/) talks to the real devplaced through server reflection.
#include <signal.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// Runs a shell command; `out` is its stdout and stderr as one stream (2>&1).
CommandResult Shell(const std::string& command) { return RunCommand(command + " 2>&1"); }

class BufCurl : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(DEVPLACE_BUF, X_OK), 0) << DEVPLACE_BUF << " is missing: run scripts/setup (it installs buf)";
  }
  static std::string Curl(const std::string& target_url, const std::string& args) {
    return absl::StrCat(ShellQuote(DEVPLACE_BUF), " curl --protocol grpc --http2-prior-knowledge ", args, " ", target_url);
  }
};

TEST_F(BufCurl, ListsTheServiceMethodsAndCallsGetInventoryThroughReflection) {
  TempDir dir;
  // No timer refreshes: the two GetInventory reads below must see one snapshot (a usage refresh
  // between them, every 2 s by default, moved usage_read_at and made them differ on a loaded machine).
  DaemonProcess d(dir.path(), {"--host_root=" + std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100",
                               "--usage_interval=0", "--refresh_interval=0"});
  const std::string base = "http://" + d.tcp_target();
  CommandResult methods = Shell(Curl(base, "--list-methods"));
  ASSERT_EQ(methods.exit_code, 0) << methods.out;
  for (const char* m : {"ResolveDevice", "GetInventory", "WatchInventory", "ListBackends", "RefreshInventory",
                        "PickDevices", "LeaseRelease", "LeaseKeepAlive"}) {
    EXPECT_THAT(methods.out, HasSubstr(absl::StrCat("devplace.v1.DevicePlacement/", m)));
  }
  // Health first: the inventory exists once it says SERVING.
  CommandResult health;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
    health = Shell(Curl(base + "/grpc.health.v1.Health/Check", ""));
    if (health.out.find("SERVING") != std::string::npos && health.out.find("NOT_SERVING") == std::string::npos) break;
    usleep(100 * 1000);
  }
  EXPECT_EQ(health.exit_code, 0) << health.out;
  EXPECT_THAT(health.out, HasSubstr("\"status\": \"SERVING\""));

  // GetInventory through reflection alone returns the same inventory as the generated stub.
  CommandResult json = Shell(Curl(base + "/devplace.v1.DevicePlacement/GetInventory", "-d '{}'"));
  ASSERT_EQ(json.exit_code, 0) << json.out;
  v1::Inventory via_buf;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &via_buf).ok()) << json.out;
  auto stub = Stub(d.tcp_target());
  grpc::ClientContext ctx;
  v1::Inventory via_stub;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &via_stub).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(via_buf, via_stub))
      << via_buf.DebugString() << "\nvs\n" << via_stub.DebugString();
  EXPECT_EQ(via_buf.backends(1).devices(1).pci_bus_id(), "0000:9a:00.0");

  // The unix socket too, and an error comes back as buf's exit status (code x 8).
  CommandResult bad = Shell(absl::StrCat(ShellQuote(DEVPLACE_BUF), " curl --protocol grpc --http2-prior-knowledge --unix-socket ",
                               d.socket_path(), " http://localhost/devplace.v1.DevicePlacement/ResolveDevice",
                               " -d '{\"workload\": \"WORKLOAD_INFERENCE\", \"device_map\": \"cuda:01\"}'"));
  EXPECT_EQ(bad.exit_code, 3 * 8) << bad.out;  // INVALID_ARGUMENT
  EXPECT_THAT(bad.out, HasSubstr("Invalid device string"));
  // PickDevices through reflection alone: a TTL lease over TCP, the environment in its JSON.
  CommandResult pick = Shell(Curl(base + "/devplace.v1.DevicePlacement/PickDevices",
                                  "-d '{\"count\": 1, \"ttl_ms\": 60000, \"job\": {\"workload\": \"WORKLOAD_TRAINING\"}}'"));
  ASSERT_EQ(pick.exit_code, 0) << pick.out;
  EXPECT_THAT(pick.out, HasSubstr("\"CUDA_VISIBLE_DEVICES\": \"GPU-"));
  EXPECT_THAT(pick.out, HasSubstr("LEASE_HOLDER_TTL"));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace devplace::testing
