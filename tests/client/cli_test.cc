// The real `devplace` binary: offline probe and resolve, output contracts, exit statuses and
// messages, and the online commands against the in-process test server.
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/client/test_server.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class CliTest : public ::testing::Test {
 protected:
  CliTest() {
    // The offline answers below must not depend on the environment ctest runs in.
    for (const std::string& name : PlacementEnvironmentVariables()) {
      env_.push_back(std::make_unique<ScopedEnv>(name, nullptr));
    }
    env_.push_back(std::make_unique<ScopedEnv>("DEVPLACE_ADDRESS", nullptr));
  }

  // Runs `devplace <args>` (shell words), capturing stdout and stderr.
  CommandResult Run(const std::string& args) { return RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " " + args); }

  // Saves `devplace probe --json` of a fixture host; returns the file's path.
  std::string SaveInventory(const std::string& host) {
    const std::string path = tmp_.path() + "/" + host + ".json";
    const CommandResult r = Run("probe --json --host_root=" + ShellQuote(FixtureHost(host)) + " >" + path);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }

  TempDir tmp_;

 private:
  std::vector<std::unique_ptr<ScopedEnv>> env_;
};

TEST_F(CliTest, ProbeJsonParsesAsAnInventory) {
  const CommandResult r = Run("probe --host_root=" + ShellQuote(FixtureHost("nvidia-2x-h100")) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok()) << r.out;
  EXPECT_EQ(inv.host().hostname(), "nvidia-2x-h100");
  ASSERT_EQ(inv.backends_size(), 2);
  EXPECT_EQ(inv.backends(1).row(), v1::ROW_CUDA_NVIDIA);
  EXPECT_EQ(inv.backends(1).devices_size(), 2);
  EXPECT_GT(inv.probed_at().seconds(), 0);
}

TEST_F(CliTest, ProbeTableHasAlignedColumns) {
  const CommandResult r = Run("probe --host_root=" + ShellQuote(FixtureHost("nvidia-2x-h100")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  std::stringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // The device table: header, then one row per GPU, the bus id under its header.
  size_t header = 0;
  while (header < lines.size() && lines[header].find("PCI BUS ID") == std::string::npos) ++header;
  ASSERT_LT(header + 2, lines.size()) << r.out;
  const size_t column = lines[header].find("PCI BUS ID");
  EXPECT_EQ(lines[header + 1].find("0000:18:00.0"), column) << r.out;
  EXPECT_EQ(lines[header + 2].find("0000:9a:00.0"), column) << r.out;
}

TEST_F(CliTest, ProbeWithBadHostRootIsAUsageError) {
  const CommandResult r = Run("probe --host_root=/nonexistent/devplace");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("devplace: probe: --host_root"));
}

TEST_F(CliTest, OfflineResolvePrintsOnlyTheDevice) {
  const std::string h100 = SaveInventory("nvidia-2x-h100");
  CommandResult r = Run("resolve --inventory=" + h100 + " --workload=inference --device_map=auto --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");
  EXPECT_EQ(r.err, "");  // --quiet: no warnings

  r = Run("resolve --inventory=" + SaveInventory("cpu-only") + " --workload=inference --device_map=auto");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");

  // Flags in any order, values as separate words.
  r = Run("resolve --workload training --local_rank 1 --world_size=2 --inventory " + h100);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:1\n");
}

TEST_F(CliTest, ExplainGoesToStderrWithRuleIds) {
  const CommandResult r = Run("resolve --inventory=" + SaveInventory("nvidia-2x-h100") +
                       " --workload=inference --device_map=auto --explain");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");
  EXPECT_THAT(r.err, HasSubstr("I-AUTO"));
  EXPECT_THAT(r.err, HasSubstr("devices:    cuda:0, cuda:1, cpu"));
  EXPECT_THAT(r.err, HasSubstr("0000:9a:00.0"));
}

TEST_F(CliTest, EnvFlagsReachTheResolver) {
  const std::string h100 = SaveInventory("nvidia-2x-h100");
  CommandResult r = Run("resolve --json --inventory=" + h100 +
                 " --workload=inference --device_map=auto --env=CUDA_VISIBLE_DEVICES=1,0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::ResolveDeviceResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &response).ok()) << r.out;
  EXPECT_EQ(response.device(), "cuda:0");
  ASSERT_EQ(response.placed_size(), 2);
  EXPECT_EQ(response.placed(0).host_index(), 1);  // the list kept its comma
  EXPECT_EQ(response.placed(1).host_index(), 0);

  // From the CLI's own environment; --no_environment ignores it.
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "");
  r = Run("resolve --inventory=" + h100 + " --workload=inference --device_map=auto");
  EXPECT_EQ(r.out, "cpu\n") << r.err;
  r = Run("resolve --no_environment --inventory=" + h100 + " --workload=inference --device_map=auto");
  EXPECT_EQ(r.out, "cuda:0\n") << r.err;
  r = Run("resolve --job_device_nodes=none --no_environment --inventory=" + h100 +
          " --workload=inference --device_map=auto");
  EXPECT_EQ(r.out, "cpu\n") << r.err;
}

TEST_F(CliTest, ResolveErrorsExitWithTheCode) {
  const std::string h100 = SaveInventory("nvidia-2x-h100");
  CommandResult r = Run("resolve --inventory=" + h100 + " --workload=inference --device_map=cuda:5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("devplace: resolve: FAILED_PRECONDITION: device_map: cuda:5"));

  // A request the resolver refuses as malformed (INVALID_ARGUMENT) is a bad value: exit 2, like a
  // flag's bad value, with the code and the resolver's message.
  r = Run("resolve --inventory=" + h100 + " --workload=inference --device_map=cuda:-1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("devplace: resolve: INVALID_ARGUMENT: "));
  r = Run("resolve --inventory=" + h100 + " --workload=inference --device_map=balanced_low0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("devplace: resolve: INVALID_ARGUMENT: device_map: Invalid device string: "
                                "'balanced_low0'"));
  EXPECT_THAT(r.err, HasSubstr("did you mean 'balanced_low_0'?"));

  // A file that cannot be read is a usage error (exit 2) naming the flag and the OS error.
  r = Run("resolve --inventory=" + tmp_.path() + "/missing.json --workload=inference");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("devplace: resolve: --inventory=" + tmp_.path() +
                                "/missing.json: cannot read: No such file or directory"));
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  struct Case {
    std::string args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"resolve --device_map=auto", "devplace: resolve: --workload is required"},
           {"resolve --workload=eval", "devplace: resolve: --workload=eval: want training or inference"},
           {"resolve --workload=inference --convention=bogus", "devplace: resolve: --convention=bogus: want"},
           {"resolve --workload=inference --local_rank=x", "devplace: resolve: --local_rank=x"},
           {"resolve --workload=inference --env=1", "devplace: resolve: --env: \"1\" is not K=V"},
           {"frobnicate", "devplace: unknown command \"frobnicate\""},
           {"", "devplace: missing command"},
           {"health --bogus", "devplace: health: unknown flag --bogus"},
           {"health -x", "devplace: health: unknown flag -x "},  // as typed, not --x
           {"-x", "devplace: unknown flag -x "},
           {"resolve --workload=inference --device-mapp=auto",
            "devplace: resolve: unknown flag --device-mapp; did you mean --device_map?"},
           {"health --timeout", "devplace: health: flag --timeout needs a value"},
           {"--version=true", "devplace: flag --version takes no value (--version=true)"},
           {"health --version=false", "devplace: health: flag --version takes no value (--version=false)"},
           {"inventory --workload=inference", "devplace: inventory: flag --workload does not apply to this command"},
           {"health extra", "devplace: health: unexpected argument \"extra\""},
           {"health --timeout=soon", "devplace: health: --timeout=soon"},
           {"health --address=unix:", "devplace: health: --address"},
           {"slurm", "devplace: missing subcommand after \"slurm\" (one of gres, task-prolog, health-check)"},
           {"slurm gpus", "devplace: unknown subcommand \"slurm gpus\" (one of gres, task-prolog, health-check)"},
           {"slurm gres --name=rows", "devplace: slurm gres: --name='rows': accepted forms: gpu, per-row"},
           {"slurm task-prolog --step_numbering=pos", "devplace: slurm task-prolog: --step_numbering='pos': accepted forms: dev_num, index"},
           {"slurm gres --step_numbering=index", "devplace: slurm gres: flag --step_numbering does not apply"},
           {"slurm gres extra", "devplace: slurm gres: unexpected argument \"extra\""},
           // The daemon's bounds of a lease's time to live and of a pick's wait, named by the flag.
           {"run --ttl=25h -- true",
            "devplace: run: --ttl=25h: want a duration from 1s to 24h (e.g. 30m; 0: none, the lease is held for the "
            "shell or the command)"},
           {"run --ttl=500ms -- true", "devplace: run: --ttl=500ms: want a duration from 1s to 24h"},
           {"run --ttl=-5m -- true", "devplace: run: --ttl=-5m: want a duration from 1s to 24h"},
           {"run --wait=2h -- true",
            "devplace: run: --wait=2h: want a duration from 0 to 1h (e.g. 10m; 0: fail at once when too few are free)"},
           {"run --wait=-1s -- true", "devplace: run: --wait=-1s: want a duration from 0 to 1h"},
           {"renew --lease_id=x --ttl=48h",
            "devplace: renew: --ttl=48h: want a duration from 1s to 24h (e.g. 30m; 0: the default, 5m)"},
           {"renew --lease_id=x --ttl=inf", "devplace: renew: --ttl=inf: want a duration from 1s to 24h"},
       }) {
    const CommandResult r = Run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith(c.message)) << c.args;
    EXPECT_THAT(r.err, HasSubstr("--help")) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST_F(CliTest, HelpExplainsCommandsAndFlags) {
  CommandResult r = Run("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"Usage: devplace", "resolve", "inventory", "backends", "watch", "health", "probe",
                           "--address", "--timeout", "--json", "Exit status"}) {
    EXPECT_THAT(r.out, HasSubstr(word));
  }
  r = Run("resolve --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"Usage: devplace resolve", "DEVICE=$(devplace resolve", "--workload", "--device_map",
                           "--explain", "--inventory", "--env", "--no_environment", "--address"}) {
    EXPECT_THAT(r.out, HasSubstr(word));
  }
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("--host_root")));
  r = Run("help probe");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--host_root"));
  r = Run("slurm task-prolog --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* word : {"Usage: devplace slurm task-prolog", "SLURM_STEP_GPUS", "--step_numbering", "--inventory"}) {
    EXPECT_THAT(r.out, HasSubstr(word));
  }
  // One column of command names, wide enough for the two-word ones, each summary two or more
  // spaces after its name (help2man makes the man page's command list from these lines; "slurm
  // gres Print ..." with one space ran into the next entries there).
  const std::string general = Run("--help").out;
  const std::string commands = general.substr(general.find("Commands:\n"));
  for (const char* name : {"resolve", "slurm gres", "slurm task-prolog", "slurm health-check", "version"}) {
    EXPECT_THAT(commands, ::testing::ContainsRegex(std::string("\n  ") + name + "   *[A-Z]")) << name;
  }
  // The longest name, "slurm health-check", and two spaces.
  const size_t summary = commands.find("slurm health-check  ") + std::string("slurm health-check  ").size();
  EXPECT_EQ(commands.find("\n  resolve") + 3 + (summary - commands.find("slurm health-check")),
            commands.find("Which device", commands.find("\n  resolve")))
      << "summaries start in one column:\n" << commands;
  for (const char* group_help : {"slurm --help", "help slurm"}) {  // the group lists its subcommands
    r = Run(group_help);
    EXPECT_EQ(r.exit_code, 0) << group_help << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr("devplace slurm gres [--inventory=FILE]")) << group_help;
    EXPECT_THAT(r.out, HasSubstr("devplace slurm task-prolog [--inventory=FILE]")) << group_help;
  }
}

// The flags `devplace <command> --help` lists under "Flags:", in order.
std::vector<std::string> HelpFlags(const std::string& help) {
  const size_t start = help.find("\nFlags:\n"), end = help.find("\nGlobal flags:\n");
  std::vector<std::string> flags;
  if (start == std::string::npos || end == std::string::npos || end < start) {
    ADD_FAILURE() << "no Flags: section in\n" << help;
    return flags;
  }
  std::istringstream lines(help.substr(start, end - start));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) == 0) flags.push_back(line.substr(4, line.find('=') - 4));  // "  --name=VALUE"
  }
  return flags;
}

// The request flags of fleet, pick and run are resolve's (one list, request_flags.cc): each command
// takes exactly its subset, and lists it in resolve's order after its own flags.
TEST_F(CliTest, FleetPickAndRunTakeResolvesRequestFlagsInItsOrder) {
  const std::vector<std::string> resolve = HelpFlags(Run("resolve --help").out);
  const std::vector<std::string> job(resolve.begin(), std::find(resolve.begin(), resolve.end(), "explain"));
  ASSERT_EQ(job.size(), 17u) << ::testing::PrintToString(resolve);
  EXPECT_EQ(std::vector<std::string>(resolve.begin() + 17, resolve.end()),
            (std::vector<std::string>{"explain", "quiet", "inventory", "fallback"}));
  const auto subset = [&job](std::initializer_list<const char*> skip) {
    std::vector<std::string> out;
    for (const std::string& f : job) {
      if (std::find(skip.begin(), skip.end(), f) == skip.end()) out.push_back(f);
    }
    return out;
  };
  std::vector<std::string> fleet = {"targets", "concurrency", "resolve"};
  for (const std::string& f : subset({"no_environment", "dra_metadata_dir"})) fleet.push_back(f);
  EXPECT_EQ(HelpFlags(Run("fleet --help").out), fleet);
  std::vector<std::string> pick = {"count", "min_free", "shared", "row", "ttl", "wait"};
  for (const std::string& f : subset({"convention", "device_map", "use_cpu", "local_rank", "world_size", "strict",
                                      "model_size_bytes", "transformers_version", "accelerate_version",
                                      "python_env", "python"})) {
    pick.push_back(f);
  }
  EXPECT_EQ(HelpFlags(Run("pick --help").out), pick);
  EXPECT_EQ(HelpFlags(Run("run --help").out), pick);
  // Both say how health orders the pick (docs/PROBE.md "Device health").
  for (const char* command : {"pick --help", "run --help"}) {
    const std::string help = Run(command).out;
    EXPECT_THAT(help, HasSubstr("FAULT and LOST devices are never picked; a DEGRADED one comes after the OK ones"))
        << command;
  }
  // Accepted means parsed: a request flag of resolve's that pick does not take is a usage error.
  const CommandResult r = Run("pick --device_map=auto");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("devplace: pick: flag --device_map does not apply to this command"));
}

TEST_F(CliTest, UnreachableDaemonExitsOneWithUnavailable) {
  for (const char* command : {"health", "inventory", "backends", "watch", "resolve --workload=inference"}) {
    const CommandResult r = Run(std::string("--address=unix:") + tmp_.path() + "/nothing.sock " + command);
    EXPECT_EQ(r.exit_code, 1) << command;
    const std::string name = std::string(command).substr(0, std::string(command).find(' '));
    EXPECT_THAT(r.err, StartsWith("devplace: " + name + ": UNAVAILABLE: ")) << r.err;
    // The note names the CLI's way to choose the daemon, not libdevplace's C++ field.
    EXPECT_THAT(r.err, HasSubstr("nothing.sock (from --address); set DEVPLACE_ADDRESS or --address to choose the daemon]"))
        << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("ConnectOptions"))) << r.err;
  }
}

class CliOnlineTest : public CliTest {
 protected:
  std::string Address() const { return "--address=" + server_.target() + " "; }
  TestServer server_;
};

TEST_F(CliOnlineTest, ResolveThroughTheDaemon) {
  CommandResult r = Run(Address() + "resolve --workload=inference --device_map=auto --no_environment");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");

  ScopedEnv address("DEVPLACE_ADDRESS", server_.target().c_str());
  r = Run("resolve --workload=training --no_environment --local_rank=1 --world_size=2 --explain");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:1\n");
  EXPECT_THAT(r.err, HasSubstr("T-DIST"));
  EXPECT_THAT(r.err, HasSubstr("inventory revision: 1"));

  r = Run(Address() + "resolve --workload=inference --device_map=bogus --no_environment");
  EXPECT_EQ(r.exit_code, 2);  // the daemon's INVALID_ARGUMENT: a bad value, as offline
  EXPECT_THAT(r.err, StartsWith("devplace: resolve: INVALID_ARGUMENT: device_map"));
  r = Run(Address() + "resolve --workload=inference --device_map=atuo --no_environment");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("did you mean 'auto'?"));
}

TEST_F(CliOnlineTest, InventoryAndBackends) {
  CommandResult r = Run(Address() + "inventory --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  v1::Inventory inv;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok()) << r.out;
  EXPECT_EQ(inv.revision(), 1u);

  r = Run(Address() + "inventory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(r.out, HasSubstr("2/2 usable"));

  r = Run(Address() + "backends");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("torch-npu"));
  EXPECT_THAT(r.out, HasSubstr("CUDA_VISIBLE_DEVICES"));
  r = Run(Address() + "backends --json");
  v1::ListBackendsResponse table;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &table).ok()) << r.out;
  EXPECT_EQ(table.backends_size(), 12);
}

TEST_F(CliOnlineTest, HealthExitStatusFollowsServing) {
  CommandResult r = Run(Address() + "health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
  server_.SetServing(false);
  r = Run(Address() + "health");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "NOT_SERVING\n");
}

TEST_F(CliOnlineTest, WatchPrintsEachRevision) {
  server_.service().EndWatchesAfter(1, grpc::Status::OK);
  CommandResult r = Run(Address() + "watch");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("revision 1  probed "));
  EXPECT_THAT(r.out, HasSubstr("cuda/nvidia READY 2/2"));

  server_.service().EndWatchesAfter(2, grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away"));
  // The refresh comes once the watch has sent revision 1 (however long the CLI takes to start).
  const int sent_before = server_.service().watch_messages();
  std::thread refresher([this, sent_before] {
    server_.service().WaitForWatchMessagesOver(sent_before, absl::Seconds(60));
    Client(MakeGrpcConnection(server_.target())).Refresh().IgnoreError();
  });
  r = Run(Address() + "watch --json");
  refresher.join();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "devplace: watch: UNAVAILABLE: going away\n");
  // Two pretty JSON objects, revisions 1 and 2.
  const size_t second = r.out.find("\n}\n{");
  ASSERT_NE(second, std::string::npos) << r.out;
  v1::Inventory first, next;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out.substr(0, second + 2), &first).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out.substr(second + 3), &next).ok());
  EXPECT_EQ(first.revision(), 1u);
  EXPECT_EQ(next.revision(), 2u);
}

}  // namespace
}  // namespace devplace::testing
