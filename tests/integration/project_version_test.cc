// The project's one version (CMake's project(VERSION), passed here as DEVPLACE_PROJECT_VERSION):
// `--version` on every binary, `devplace version` against a real daemon and without one, the
// daemon's Inventory.daemon_version over the wire and its start log line.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kVersion[] = DEVPLACE_PROJECT_VERSION;
// The newest releases whose rules devplaced and the CLI have (rule V-SKEW): devplaced --version,
// devplace version and devplace_build_info name them.
constexpr char kNewestRules[] = " (newest rules: Transformers 5.15.0, Accelerate 1.14.0)";
// The same in `devplace --json version`, for "client" or "daemon".
std::string RulesJson(const std::string& who) {
  return absl::StrCat("  \"", who, "NewestRules\": {\n    \"accelerate\": \"1.14.0\",\n    \"transformers\": \"5.15.0\"\n  },\n");
}

TEST(ProjectVersion, EveryBinaryPrintsItsNameAndTheProjectVersion) {
  struct Binary {
    const char* path;
    const char* name;
  };
  for (const Binary& binary : {Binary{DEVPLACE_DAEMON_BINARY, "devplaced"}, Binary{DEVPLACE_PROBE_BINARY, "devplace-probe"},
#ifdef DEVPLACE_TORCH_PROBE_BINARY
                               Binary{DEVPLACE_TORCH_PROBE_BINARY, "devplace-torch-probe"},
#endif
                               Binary{DEVPLACE_CLI_BINARY, "devplace"}}) {
    SCOPED_TRACE(binary.name);
    const CommandResult r = RunCommand(absl::StrCat(ShellQuote(binary.path), " --version"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, absl::StrCat(binary.name, " ", kVersion,
                                  std::string(binary.name) == "devplaced" ? kNewestRules : "", "\n"));
    EXPECT_EQ(r.err, "");
  }
  // The CLI's --version wins over a command and needs no daemon.
  const CommandResult cli = RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " --address=unix:/nonexistent/x.sock inventory --version");
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, absl::StrCat("devplace ", kVersion, "\n"));
}

TEST(ProjectVersion, TheDaemonReportsItsVersionOverTheWireInTheLogAndToDevplaceVersion) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100", "--nvml_library="});
  EXPECT_THAT(d.Log(), HasSubstr(absl::StrCat("event=start version=", kVersion, " ")));

  ConnectOptions connect;
  connect.address = d.unix_target();
  absl::StatusOr<Client> client = Client::Connect(connect);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 200 && !client->Health().value_or(false); ++i) absl::SleepFor(absl::Milliseconds(20));
  absl::StatusOr<v1::Inventory> inventory = client->Inventory();
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_EQ(inventory->daemon_version(), kVersion);

  // The probe's raw output carries none: only the daemon stamps it.
  const CommandResult probe = RunCommand(
      absl::StrCat(ShellQuote(DEVPLACE_PROBE_BINARY), " --json --host_root=",
                   ShellQuote(DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100"), " --nvml_library="));
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  EXPECT_THAT(probe.out, Not(HasSubstr("daemonVersion")));

  for (const std::string& target : {d.unix_target(), d.tcp_target()}) {
    SCOPED_TRACE(target);
    const CommandResult text = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", target, " version"));
    EXPECT_EQ(text.exit_code, 0) << text.err;
    EXPECT_EQ(text.out, absl::StrCat("Client: devplace ", kVersion, kNewestRules, "\nDaemon: devplaced ", kVersion,
                                     kNewestRules, "\n"));
    const CommandResult json = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --json --address=", target, " version"));
    EXPECT_EQ(json.exit_code, 0) << json.err;
    EXPECT_EQ(json.out, absl::StrCat("{\n", RulesJson("client"), "  \"clientVersion\": \"", kVersion, "\",\n",
                                     RulesJson("daemon"), "  \"daemonVersion\": \"", kVersion, "\"\n}\n"));
  }
}

TEST(ProjectVersion, DevplaceVersionWithoutADaemonPrintsTheClientAndSaysSo) {
  TempDir dir;
  const std::string at = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --timeout=2s --address=unix:", dir.path(), "/none.sock");
  const CommandResult text = RunCommand(at + " version");
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_EQ(text.out, absl::StrCat("Client: devplace ", kVersion, kNewestRules, "\n"));
  EXPECT_THAT(text.err, HasSubstr("devplace: version: UNAVAILABLE: cannot reach the daemon for its version: "));
  const CommandResult json = RunCommand(at + " --json version");
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_EQ(json.out, absl::StrCat("{\n", RulesJson("client"), "  \"clientVersion\": \"", kVersion, "\"\n}\n"));
  EXPECT_THAT(json.err, HasSubstr("cannot reach the daemon for its version"));
  // `version` takes no argument; its help names the JSON keys.
  EXPECT_EQ(RunCommand(at + " version extra").exit_code, 2);
  const CommandResult help = RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " version --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("daemonVersion"));
}

}  // namespace
}  // namespace devplace::testing
