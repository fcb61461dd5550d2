// Every RPC of the real devplaced through libdevplace (devplace::Client) and through the
// `devplace` CLI, over the unix socket and TCP.
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Waits for the first inventory (up to 60 s: a guard, the event is SERVING).
void WaitServing(const Client& client) {
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
    absl::StatusOr<bool> serving = client.Health();
    if (serving.ok() && *serving) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  FAIL() << "never SERVING";
}

TEST(ClientAndCli, EveryRpcThroughTheLibrary) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100")});
  for (const std::string& target : {d.unix_target(), d.tcp_target()}) {
    SCOPED_TRACE(target);
    ConnectOptions options;
    options.address = target;
    absl::StatusOr<Client> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    WaitServing(*client);
    EXPECT_EQ(client->Backends()->backends_size(), 12);
    absl::StatusOr<v1::Inventory> inv = client->Inventory();
    ASSERT_TRUE(inv.ok()) << inv.status();
    EXPECT_EQ(inv->backends(1).devices(0).pci_bus_id(), "0000:18:00.0");
    ResolveOptions job;
    job.workload = v1::WORKLOAD_TRAINING;
    job.local_rank = 1;
    job.world_size = 2;
    job.env["CUDA_VISIBLE_DEVICES"] = "1,0";
    absl::StatusOr<v1::ResolveDeviceResponse> answer = client->Resolve(job);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->device(), "cuda:1");
    EXPECT_EQ(answer->placed(0).pci_bus_id(), "0000:18:00.0");  // job's cuda:1 is host GPU 0
    job.env["LOCAL_RANK"] = "abc";
    answer = client->Resolve(job);
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(answer.status().message()), HasSubstr("env.LOCAL_RANK"));
    absl::StatusOr<v1::Inventory> refreshed = client->Refresh();
    if (target == d.tcp_target()) {  // plaintext TCP may not re-probe
      EXPECT_EQ(refreshed.status().code(), absl::StatusCode::kPermissionDenied) << refreshed.status();
    } else {
      ASSERT_TRUE(refreshed.ok()) << refreshed.status();
      EXPECT_EQ(refreshed->revision(), inv->revision());
    }
    uint64_t watched = 0;
    absl::Status watch = client->Watch(0, [&](const v1::Inventory& i) {
      watched = i.revision();
      return false;  // stop after the first message
    });
    EXPECT_TRUE(watch.ok()) << watch;
    EXPECT_EQ(watched, inv->revision());
  }
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(ClientAndCli, EveryCommandOfTheCli) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100")});
  const std::string at = "--address=" + d.unix_target();
  CommandResult health;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60); health.out != "SERVING\n" && absl::Now() < give_up;) {
    health = RunCli(at + " health");
  }
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");

  CommandResult resolve = RunCli(at + " resolve --workload=inference --device_map=auto --no_environment");
  EXPECT_EQ(resolve.exit_code, 0) << resolve.err;
  EXPECT_EQ(resolve.out, "cuda:0\n");
  CommandResult explain = RunCli(at + " resolve --workload=inference --device_map=auto --no_environment --explain");
  EXPECT_EQ(explain.out, "cuda:0\n");
  EXPECT_THAT(explain.err, HasSubstr("I-AUTO"));
  CommandResult json =
      RunCli("--json " + at + " resolve --workload=training --local_rank=1 --world_size=2 --no_environment");
  v1::ResolveDeviceResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out << json.err;
  EXPECT_EQ(parsed.device(), "cuda:1");
  CommandResult missing = RunCli(at + " resolve --workload=inference --device_map=cuda:5 --no_environment");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, StartsWith("devplace: resolve: FAILED_PRECONDITION: "));
  EXPECT_EQ(missing.out, "");

  CommandResult inventory = RunCli(at + " inventory");
  EXPECT_EQ(inventory.exit_code, 0) << inventory.err;
  EXPECT_THAT(inventory.out, HasSubstr("0000:9a:00.0"));
  EXPECT_THAT(inventory.out, HasSubstr("NVIDIA H100 80GB HBM3"));
  CommandResult inventory_json = RunCli("--json " + at + " inventory");
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(inventory_json.out, &inv).ok());
  EXPECT_EQ(inv.backends(1).devices_size(), 2);
  CommandResult backends = RunCli(at + " backends");
  EXPECT_THAT(backends.out, HasSubstr("cuda/nvidia"));
  EXPECT_THAT(backends.out, HasSubstr("torch-npu"));
  // The first revision, then still watching: stopped once it printed it (up to 60 s for that).
  const std::string out = dir.File("watch.json");
  CommandResult watch = RunCommand(absl::StrCat(
      ShellQuote(DEVPLACE_CLI_BINARY), " --json ", at, " watch >", ShellQuote(out), " & pid=$!; for i in $(seq 1200); do ",
      "grep -q '\"revision\": \"1\"' ", ShellQuote(out), " && break; sleep 0.05; done; ",
      "kill -0 $pid && echo still-watching; kill $pid; wait $pid; echo exit=$?"));
  EXPECT_THAT(watch.out, StartsWith("still-watching\n")) << watch.out << watch.err;
  EXPECT_THAT(watch.out, HasSubstr("exit=143")) << watch.out << watch.err;  // SIGTERM while it watched
  EXPECT_THAT(ReadFile(out), HasSubstr("\"revision\": \"1\""));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(ClientAndCli, CpuOnlyHostExplainsThatNoAcceleratorRowIsPresent) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
  const std::string at = "--address=" + d.tcp_target();
  CommandResult health;
  for (int i = 0; i < 100 && health.out != "SERVING\n"; ++i) health = RunCli(at + " health");
  CommandResult r = RunCli(at + " resolve --workload=inference --device_map=auto --explain");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");
  EXPECT_THAT(r.err, HasSubstr("no accelerator row"));
  CommandResult unreachable = RunCli("--address=127.0.0.1:1 --timeout=2s health");
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_THAT(unreachable.err, HasSubstr("UNAVAILABLE"));
}

}  // namespace
}  // namespace devplace::testing
