// What a newcomer meets first, with the real binaries: no daemon running (the hint that names the
// cause and, for root, the command that starts it, and the opt-in cpu fallback of libdevplace and the CLI),
// a second daemon on a busy TCP or metrics port (one devplaced line, no library text), "did you
// mean" for commands, flags and device_map keywords, dashes in flag names, unreadable files and
// relative device-node paths.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/ports.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

CommandResult Cli(const std::string& args) { return RunCli(args, "env -u DEVPLACE_ADDRESS -u DEVPLACE_FALLBACK timeout 30"); }

// What a user is told to do about a daemon that does not answer: root, the command that starts it;
// any other user (who cannot) that it is not answering and to ask the host's operator.
std::string NoDaemonHint() {
  return geteuid() == 0 ? "devplaced is probably not running: start it with `sudo systemctl start devplaced`"
                        : "devplaced is not answering there (it is stopped, or restarting as a package upgrade does): "
                          "try again in a moment, or ask the host's operator to check it";
}

int Lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// A loopback TCP port that is bound and listening (so refused to anyone else) while it lives.
struct BusyPort {
  BusyPort() : fd(BoundLoopbackSocket(&port)) { EXPECT_EQ(listen(fd, 4), 0); }
  ~BusyPort() { close(fd); }
  int port = 0;
  int fd;
};

// A loopback port nothing listens on (bound, then released).
int ClosedPort() {
  int port = 0;
  close(BoundLoopbackSocket(&port));
  return port;
}

TEST(FirstHour, NoDaemonNamesTheLikelyCauseAndTheCommandThatStartsIt) {
  TempDir dir;
  const std::string socket = dir.File("devplace.sock");
  CommandResult r = Cli("--address=unix:" + socket + " inventory");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("devplace: inventory: UNAVAILABLE: no socket at " + socket + ": " + NoDaemonHint()));
  EXPECT_EQ(Lines(r.err), 1) << r.err;

  const std::string tcp = absl::StrCat("127.0.0.1:", ClosedPort());
  r = Cli("--address=" + tcp + " health");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("nothing listens on " + tcp + " (connection refused): " + NoDaemonHint()));
  if (geteuid() == 0) {
    EXPECT_THAT(r.err, HasSubstr("or run `devplaced`"));
  }
  EXPECT_EQ(Lines(r.err), 1) << r.err;

  // A socket left behind by a daemon that was killed: nobody accepts on it.
  {
    DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only")});
    d.Signal(SIGKILL);
    d.WaitExit(absl::Seconds(10));
    r = Cli("--address=" + d.unix_target() + " health");
    EXPECT_THAT(r.err, HasSubstr(d.socket_path() + " is a socket nobody accepts on (left behind by a devplaced that "
                                 "stopped): " + NoDaemonHint()));
  }

  // libdevplace gives the same cause.
  ConnectOptions options;
  options.address = "unix:" + socket;
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::Inventory> inv = client->Inventory();
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(inv.status().message()), StartsWith("no socket at " + socket + ": " + NoDaemonHint()));
}

TEST(FirstHour, CpuFallbackIsOptInAndOnlyForNoAnswer) {
  TempDir dir;
  const std::string nowhere = " --address=unix:" + dir.File("none.sock");
  const std::string resolve = " resolve --workload=inference --device_map=auto --no_environment";
  // Off by default: the error, exit 1.
  CommandResult r = Cli(nowhere + resolve);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  // --fallback=cpu: cpu on stdout, the warning quoting the cause on stderr, exit 0.
  r = Cli(nowhere + resolve + " --fallback=cpu");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");
  EXPECT_THAT(r.err, StartsWith("devplace: warning: devplace fallback: answered cpu without the daemon"));
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE: no socket at"));
  // DEVPLACE_FALLBACK=cpu from the environment (read unless --no_environment).
  r = RunCommand(absl::StrCat("env -u DEVPLACE_ADDRESS DEVPLACE_FALLBACK=cpu ", ShellQuote(DEVPLACE_CLI_BINARY), nowhere,
                              " resolve --workload=training --job_device_nodes=none"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");
  // A bad value is a usage error naming it and the accepted values.
  r = Cli(nowhere + resolve + " --fallback=gpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--fallback=gpu: accepted: cpu or none"));

  // libdevplace: the fallback answer in full, and only for "no answer".
  ConnectOptions options;
  options.address = "unix:" + dir.File("none.sock");
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  ResolveOptions job;
  job.workload = v1::WORKLOAD_INFERENCE;
  job.fallback = "cpu";
  absl::StatusOr<v1::ResolveDeviceResponse> answer = client->Resolve(job);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cpu");
  EXPECT_EQ(answer->backend(), v1::ROW_CPU);
  ASSERT_EQ(answer->devices_size(), 1);
  EXPECT_EQ(answer->devices(0), "cpu");
  ASSERT_EQ(answer->warnings_size(), 1);
  EXPECT_THAT(answer->warnings(0), StartsWith("devplace fallback: "));
  job.fallback = "";
  EXPECT_EQ(client->Resolve(job).status().code(), absl::StatusCode::kUnavailable);
  job.fallback = "maybe";
  EXPECT_EQ(client->Resolve(job).status().code(), absl::StatusCode::kInvalidArgument);

  // With a daemon, the daemon answers; its refusals are never replaced by the fallback.
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("nvidia-2x-h100")});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  options.address = d.unix_target();
  client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  job.fallback = "cpu";
  job.device_map = "auto";
  answer = client->Resolve(job);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cuda:0");
  job.device_map = "cuda:7";  // FAILED_PRECONDITION: no such device
  EXPECT_EQ(client->Resolve(job).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FirstHour, BusyTcpAndMetricsPortsAreOneDevplacedLine) {
  TempDir dir;
  BusyPort busy;
  const std::string address = absl::StrCat("127.0.0.1:", busy.port);
  const std::string daemon = absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --host_root=",
                                          ShellQuote(FixtureHost("cpu-only")),
                                          " --torch_probe_command=none");
  for (const auto& [flags, line] : std::vector<std::pair<std::string, std::string>>{
           {" --metrics_listen= --listen=unix:" + dir.File("a.sock") + "," + address,
            "devplaced: --listen=" + address + ": cannot bind " + address + ": Address already in use"},
           {" --metrics_listen= --listen=unix:" + dir.File("b.sock") + ",127.0.0.1:0," + address,
            "devplaced: --listen=" + address + ": cannot bind " + address + ": Address already in use"},
           {" --listen=unix:" + dir.File("c.sock") + " --metrics_listen=" + address,
            "devplaced: --metrics_listen=" + address + ": cannot bind " + address + ": Address already in use"}}) {
    SCOPED_TRACE(flags);
    const CommandResult r = RunCommand(daemon + flags);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.exit_code, 124) << "exits, does not hang";
    EXPECT_THAT(r.err, HasSubstr(line + "\n"));
    // The one line of devplaced's own; the log lines before it never quote a library.
    EXPECT_THAT(r.err, Not(HasSubstr("grpc")));
    EXPECT_THAT(r.err, Not(HasSubstr("library_log")));
    EXPECT_THAT(r.err, Not(HasSubstr("CivetServer")));
    EXPECT_THAT(r.err, Not(HasSubstr("null context")));
  }
}

TEST(FirstHour, DidYouMeanForCommandsFlagsAndKeywords) {
  CommandResult r = Cli("invetory");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command \"invetory\"; did you mean \"inventory\"?"));
  r = Cli("slurn gres");
  EXPECT_THAT(r.err, HasSubstr("did you mean \"slurm\"?"));
  r = Cli("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, Not(HasSubstr("did you mean")));  // nothing within two edits

  r = Cli("resolve --workload=inference --device_mapp=auto");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --device_mapp; did you mean --device_map?"));
  r = Cli("inventory --adress=unix:/x.sock");
  EXPECT_THAT(r.err, HasSubstr("did you mean --address?"));

  const std::string inventory = ShellQuote(FixtureHost("nvidia-2x-h100"));
  r = Cli("probe --host_root=" + inventory + " --json > /dev/null");  // the probe works offline
  EXPECT_EQ(r.exit_code, 0) << r.err;
  TempDir dir;
  const std::string saved = dir.File("inv.json");
  ASSERT_EQ(Cli("probe --json --host_root=" + inventory + " > " + saved).exit_code, 0);
  r = Cli("resolve --workload=inference --device_map=balanced_low0 --inventory=" + saved);
  EXPECT_EQ(r.exit_code, 2);  // a mistyped keyword is a bad value, like every other
  EXPECT_THAT(r.err, HasSubstr("(did you mean 'balanced_low_0'?)"));
  r = Cli("resolve --workload=inference --device_map=Auto --inventory=" + saved);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("keywords are case-sensitive: did you mean 'auto'?"));
  r = Cli("resolve --workload=inference -device_map=auto --inventory=" + saved);  // one dash works too
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Cli("resolve --workload=inference -d auto --inventory=" + saved);  // no short flags: quoted as typed
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag -d "));

  // Dashes work as underscores.
  r = Cli("resolve --workload=inference --device-map=auto --job-device-nodes=/dev/nvidia1 --inventory=" + saved);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");  // the job sees only host GPU 1, as its cuda:0
}

TEST(FirstHour, UnreadableFilesNameTheOsErrorAndRelativeDeviceNodesAreUsageErrors) {
  TempDir dir;
  const std::string missing = dir.File("nosuch.json");
  for (const std::string command : {"resolve --workload=training", "labels", "slurm gres"}) {
    SCOPED_TRACE(command);
    const CommandResult r = Cli(command + " --inventory=" + missing);
    EXPECT_EQ(r.exit_code, 2) << r.err;  // a usage error, as for every file flag
    EXPECT_THAT(r.err, HasSubstr("--inventory=" + missing + ": cannot read: No such file or directory"));
    EXPECT_EQ(Lines(r.err), 1);
  }
  CommandResult r = Cli("resolve --workload=training --inventory=" + dir.path());
  EXPECT_THAT(r.err, HasSubstr("is a directory"));
  const std::string unreadable = dir.Write("secret.txt", "127.0.0.1:7465\n");
  ASSERT_EQ(chmod(unreadable.c_str(), 0), 0);
  if (geteuid() != 0) {  // root reads anything
    r = Cli("fleet --targets=" + unreadable);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--targets=" + unreadable + ": cannot read: Permission denied"));
  }

  r = Cli("resolve --workload=training --no_environment --job_device_nodes=nvidia0 --inventory=" + missing);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--job_device_nodes: 'nvidia0' is not an absolute path"));
  EXPECT_THAT(r.err, HasSubstr("/dev/nvidia1"));
}

}  // namespace
}  // namespace devplace::testing
