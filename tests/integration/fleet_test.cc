// `devplace fleet` against real devplaced processes on loopback TCP, each on a different fixture
// host, one of them stopped before the run: table, JSON (parsed as JSON), --resolve per node, the
// targets file form, and usage errors.
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Three daemons that answer (NVIDIA, AMD, CPU-only fixture hosts) and one that was stopped
// (SIGTERM, waited for), so its port refuses connections. The stopped one comes second in
// `targets` so that the error row sits between answering rows.
class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* host : {"nvidia-2x-h100", "amd-2x-mi210", "cpu-only", "nvidia-mig"}) {
      // devplaced creates no socket directory but its default one: each daemon gets its own.
      ASSERT_EQ(mkdir((dir_.path() + "/" + host).c_str(), 0755), 0);
      daemons_.push_back(std::make_unique<DaemonProcess>(
          dir_.path() + "/" + host,
          std::vector<std::string>{absl::StrCat("--host_root=", DEVPLACE_FIXTURES_DIR, "/hosts/", host),
                                   "--nvml_library="}));
    }
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(daemons_[i]->WaitForLog("event=inventory revision=1", absl::Seconds(20))) << daemons_[i]->Log();
    }
    daemons_[3]->Signal(SIGTERM);
    ASSERT_EQ(daemons_[3]->WaitExit(absl::Seconds(10)), 0);
    nvidia_ = daemons_[0]->tcp_target();
    amd_ = daemons_[1]->tcp_target();
    cpu_ = daemons_[2]->tcp_target();
    stopped_ = daemons_[3]->tcp_target();
    targets_ = absl::StrJoin({nvidia_, stopped_, amd_, cpu_}, ",");
  }

  TempDir dir_;
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
  std::string nvidia_, amd_, cpu_, stopped_, targets_;
};

TEST_F(FleetTest, InventoryTableHasOneRowPerTargetInOrderAndAnErrorRow) {
  const CommandResult r = RunCli("fleet --targets=" + targets_);
  EXPECT_EQ(r.exit_code, 1) << r.err;  // one target failed
  EXPECT_THAT(r.err, IsEmpty());
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_THAT(lines[0], StartsWith("TARGET"));
  EXPECT_THAT(lines[0], HasSubstr("HOSTNAME"));
  EXPECT_THAT(lines[1], StartsWith(nvidia_ + " "));
  EXPECT_THAT(lines[1], HasSubstr("nvidia-2x-h100"));
  EXPECT_THAT(lines[1], HasSubstr("cuda/nvidia"));
  EXPECT_THAT(lines[1], HasSubstr("READY"));
  EXPECT_THAT(lines[1], HasSubstr("2/2 usable"));
  EXPECT_THAT(lines[1], HasSubstr("NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(lines[2], StartsWith(stopped_ + " "));
  EXPECT_THAT(lines[2], HasSubstr("UNAVAILABLE: "));
  EXPECT_THAT(lines[3], StartsWith(amd_ + " "));
  EXPECT_THAT(lines[3], HasSubstr("amd-2x-mi210"));
  EXPECT_THAT(lines[3], HasSubstr("cuda/amd"));
  EXPECT_THAT(lines[3], HasSubstr("AMD Instinct MI210"));
  EXPECT_THAT(lines[3], HasSubstr("64.0 GiB"));  // 68702699520 bytes per MI210 in the fixture
  EXPECT_THAT(lines[4], StartsWith(cpu_ + " "));
  EXPECT_THAT(lines[4], HasSubstr("cpu-only"));
  EXPECT_THAT(lines[4], HasSubstr("cpu only"));
  EXPECT_THAT(lines[4], Not(HasSubstr("UNAVAILABLE")));

  // One target at a time gives the same rows: the order is the targets', not the answers'.
  const CommandResult serial = RunCli("fleet --concurrency=1 --targets=" + targets_);
  EXPECT_EQ(serial.exit_code, 1);
  EXPECT_EQ(serial.out, r.out);

  // Every target answering: exit 0, no error row.
  const CommandResult all = RunCli(absl::StrCat("fleet --targets=", nvidia_, ",", cpu_));
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(Lines(all.out).size(), 3u);
  EXPECT_THAT(all.out, Not(HasSubstr("UNAVAILABLE")));
}

TEST_F(FleetTest, JsonParsesAndHasTheSameNodes) {
  const CommandResult r = RunCli("fleet --json --targets=" + targets_);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &doc).ok()) << r.out;
  EXPECT_EQ(doc.fields().at("answered").number_value(), 3);
  EXPECT_EQ(doc.fields().at("failed").number_value(), 1);
  const google::protobuf::ListValue& nodes = doc.fields().at("nodes").list_value();
  ASSERT_EQ(nodes.values_size(), 4);
  auto field = [&](int i, const std::string& name) -> const google::protobuf::Value& {
    return nodes.values(i).struct_value().fields().at(name);
  };
  EXPECT_EQ(field(0, "target").string_value(), nvidia_);
  EXPECT_EQ(field(0, "code").string_value(), "OK");
  EXPECT_EQ(field(0, "hostname").string_value(), "nvidia-2x-h100");
  const auto& nvidia_row = field(0, "rows").list_value().values(0).struct_value().fields();
  EXPECT_EQ(nvidia_row.at("name").string_value(), "cuda/nvidia");
  EXPECT_EQ(nvidia_row.at("state").string_value(), "READY");
  EXPECT_EQ(nvidia_row.at("usable").number_value(), 2);
  EXPECT_EQ(nvidia_row.at("total").number_value(), 2);
  EXPECT_EQ(nvidia_row.at("models").list_value().values(0).string_value(), "NVIDIA H100 80GB HBM3");
  // The whole inventory comes along.
  EXPECT_EQ(field(0, "inventory").struct_value().fields().at("host").struct_value().fields().at("hostname")
                .string_value(),
            "nvidia-2x-h100");

  EXPECT_EQ(field(1, "target").string_value(), stopped_);
  EXPECT_EQ(field(1, "code").string_value(), "UNAVAILABLE");
  EXPECT_THAT(field(1, "error").string_value(), Not(IsEmpty()));
  EXPECT_EQ(field(1, "rows").list_value().values_size(), 0);

  EXPECT_EQ(field(2, "hostname").string_value(), "amd-2x-mi210");
  const auto& amd_row = field(2, "rows").list_value().values(0).struct_value().fields();
  EXPECT_EQ(amd_row.at("name").string_value(), "cuda/amd");
  EXPECT_EQ(amd_row.at("memoryTotalBytes").list_value().values(0).string_value(), "68702699520");

  EXPECT_EQ(field(3, "hostname").string_value(), "cpu-only");
  EXPECT_EQ(field(3, "code").string_value(), "OK");
  EXPECT_EQ(field(3, "rows").list_value().values_size(), 0);
}

TEST_F(FleetTest, ResolveAnswersPerNode) {
  // The caller's own CUDA_VISIBLE_DEVICES (empty: no GPU) is not the remote job's: not sent.
  const CommandResult r =
      RunCommand(absl::StrCat("CUDA_VISIBLE_DEVICES= ", ShellQuote(DEVPLACE_CLI_BINARY),
                              " fleet --resolve --workload=inference --device_map=auto --targets=", targets_));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, IsEmpty());
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_THAT(lines[0], StartsWith("TARGET"));
  EXPECT_THAT(lines[0], HasSubstr("DEVICE"));
  EXPECT_THAT(lines[1], MatchesRegex(nvidia_ + " +cuda:0 +cuda/nvidia +cuda:0,cuda:1,cpu .*"));
  EXPECT_THAT(lines[2], StartsWith(stopped_ + " "));
  EXPECT_THAT(lines[2], HasSubstr("UNAVAILABLE: "));
  EXPECT_THAT(lines[3], MatchesRegex(amd_ + " +cuda:0 +cuda/amd +cuda:0,cuda:1,cpu .*"));
  EXPECT_THAT(lines[4], MatchesRegex(cpu_ + " +cpu +cpu +cpu .*"));

  // --json: each node's ResolveDeviceResponse.
  const CommandResult json =
      RunCli("fleet --json --resolve --workload=inference --device_map=auto --targets=" + targets_);
  EXPECT_EQ(json.exit_code, 1) << json.err;
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &doc).ok()) << json.out;
  const google::protobuf::ListValue& nodes = doc.fields().at("nodes").list_value();
  ASSERT_EQ(nodes.values_size(), 4);
  auto device = [&](int i) {
    return nodes.values(i).struct_value().fields().at("resolved").struct_value().fields().at("device").string_value();
  };
  EXPECT_EQ(device(0), "cuda:0");
  EXPECT_EQ(nodes.values(1).struct_value().fields().at("code").string_value(), "UNAVAILABLE");
  EXPECT_EQ(nodes.values(1).struct_value().fields().count("resolved"), 0u);
  EXPECT_EQ(device(2), "cuda:0");
  EXPECT_EQ(device(3), "cpu");
}

TEST_F(FleetTest, ResolveRequestFlagsAndRefusals) {
  // A job asking for cuda:1 with CUDA_VISIBLE_DEVICES=1 gets its cuda:0 (host GPU 1) on the
  // NVIDIA node; the CPU-only node cannot satisfy it: FAILED_PRECONDITION in its row.
  const CommandResult r = RunCli(absl::StrCat("fleet --resolve --workload=inference --device_map=cuda:0 ",
                                              "--env=CUDA_VISIBLE_DEVICES=1 --targets=", nvidia_, ",", cpu_));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_THAT(lines[1], MatchesRegex(nvidia_ + " +cuda:0 +cuda/nvidia +cuda:0 .*"));
  EXPECT_THAT(lines[2], StartsWith(cpu_ + " "));
  EXPECT_THAT(lines[2], HasSubstr("FAILED_PRECONDITION: "));

  const CommandResult json = RunCli(absl::StrCat("fleet --json --resolve --workload=inference ",
                                                 "--device_map=cuda:0 --env=CUDA_VISIBLE_DEVICES=1 --targets=", nvidia_));
  EXPECT_EQ(json.exit_code, 0) << json.err;
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &doc).ok()) << json.out;
  const auto& resolved =
      doc.fields().at("nodes").list_value().values(0).struct_value().fields().at("resolved").struct_value().fields();
  // The job's cuda:0 is the host's second GPU.
  EXPECT_EQ(resolved.at("placed").list_value().values(0).struct_value().fields().at("pciBusId").string_value(),
            "0000:9a:00.0");
}

// Every table cell is bounded whatever a node says (a long warning, an unreachable node's long
// message); --json keeps every text in full, names --targets in error rows, and leaves out
// memory a node does not know rather than writing 0.
TEST_F(FleetTest, TableCellsAreBoundedAndJsonKeepsTheFullText) {
  const std::string job = "--resolve --workload=inference --device_map=auto --env=CUDA_VISIBLE_DEVICE=1 "
                          "--env=LOCAL_RANKS=0 --targets=" + nvidia_ + "," + stopped_;
  const CommandResult r = RunCli("fleet " + job);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, IsEmpty());  // no gRPC log lines either
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  // The columns start where their headings do.
  const size_t warnings_at = lines[0].find("WARNINGS"), error_at = lines[0].find("ERROR");
  ASSERT_NE(warnings_at, std::string::npos);
  ASSERT_NE(error_at, std::string::npos);
  // The first warning, cut at 60 characters with the count of the others; the error cut at 90.
  const std::string warning_cell(absl::StripTrailingAsciiWhitespace(lines[1].substr(warnings_at, error_at - warnings_at)));
  EXPECT_LE(warning_cell.size(), 60u) << warning_cell;
  EXPECT_THAT(warning_cell, MatchesRegex(".*\\.\\.\\. \\(\\+[0-9]+ more\\)"));
  const std::string error_cell = lines[2].substr(error_at);
  EXPECT_LE(error_cell.size(), 90u) << error_cell;
  EXPECT_THAT(error_cell, StartsWith("UNAVAILABLE: nothing listens on " + stopped_));
  EXPECT_THAT(error_cell, ::testing::EndsWith("..."));

  const CommandResult json = RunCli("fleet --json " + job);
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &doc).ok()) << json.out;
  const auto& nodes = doc.fields().at("nodes").list_value();
  const auto& warnings = nodes.values(0).struct_value().fields().at("resolved").struct_value().fields().at("warnings");
  ASSERT_GE(warnings.list_value().values_size(), 2);
  std::string all;
  for (const auto& w : warnings.list_value().values()) all += w.string_value() + "\n";
  EXPECT_THAT(all, HasSubstr("env CUDA_VISIBLE_DEVICE is not read by anything; did you mean CUDA_VISIBLE_DEVICES?"));
  EXPECT_THAT(all, HasSubstr("env LOCAL_RANKS is not read by anything; did you mean LOCAL_RANK?"));
  const std::string error = nodes.values(1).struct_value().fields().at("error").string_value();
  // Root is told to start it; another user (who cannot) is told it is not answering.
  EXPECT_THAT(error, HasSubstr(geteuid() == 0 ? "devplaced is probably not running" : "devplaced is not answering there"));
  EXPECT_THAT(error, HasSubstr("[target " + stopped_ + " from --targets]"));
  EXPECT_THAT(error, Not(HasSubstr("--address")));  // fleet refuses --address

  // The NVIDIA node without NVML does not know its GPUs' memory: absent and counted, not "0".
  const CommandResult inventory = RunCli("fleet --json --targets=" + nvidia_);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(inventory.out, &doc).ok()) << inventory.out;
  const auto& row = doc.fields().at("nodes").list_value().values(0).struct_value().fields().at("rows")
                        .list_value().values(0).struct_value().fields();
  EXPECT_EQ(row.at("memoryTotalBytes").list_value().values_size(), 0);
  EXPECT_EQ(row.at("memoryUnknown").number_value(), 2);
  EXPECT_THAT(RunCli("fleet --targets=" + nvidia_).out, HasSubstr("?"));
}

TEST_F(FleetTest, ATargetThatNeverAnswersIsADeadlineRow) {
  // A loopback listener that never accepts: the TCP handshake completes in the kernel, gRPC's
  // never does, so only --timeout ends that target's call.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string hung = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));

  const CommandResult r = RunCli(absl::StrCat("fleet --timeout=500ms --targets=", hung, ",", nvidia_));
  close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_THAT(lines[1], StartsWith(hung + " "));
  EXPECT_THAT(lines[1], HasSubstr("DEADLINE_EXCEEDED: "));
  EXPECT_THAT(lines[2], StartsWith(nvidia_ + " "));
  EXPECT_THAT(lines[2], HasSubstr("cuda/nvidia"));
}

TEST_F(FleetTest, TargetsFileWithCommentsAndBlankLines) {
  TempDir files;
  const std::string path = files.Write("nodes.txt", absl::StrCat("# the lab\n", nvidia_, "\n\n  ", stopped_,
                                                                 "   # down for maintenance\n", amd_, "\n# end\n"));
  const CommandResult r = RunCli("fleet --targets=" + path);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_THAT(lines[1], StartsWith(nvidia_ + " "));
  EXPECT_THAT(lines[1], HasSubstr("cuda/nvidia"));
  EXPECT_THAT(lines[2], StartsWith(stopped_ + " "));
  EXPECT_THAT(lines[2], HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(lines[3], StartsWith(amd_ + " "));
  EXPECT_THAT(lines[3], HasSubstr("cuda/amd"));

  // The unix socket form works the same.
  const CommandResult unix_socket = RunCli("fleet --targets=" + daemons_[2]->unix_target());
  EXPECT_EQ(unix_socket.exit_code, 0) << unix_socket.err;
  EXPECT_THAT(unix_socket.out, HasSubstr("cpu-only"));
}

TEST(FleetUsage, ErrorsExitTwoWithOneLine) {
  TempDir files;
  const std::string bad_file = files.Write("bad.txt", "127.0.0.1:7465\n# fine\nnode-b\n");
  const std::string empty_file = files.Write("empty.txt", "# nothing here\n\n");
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"fleet", "--targets is required"},
      {"fleet --targets=" + files.File("missing.txt"), "no such file"},
      {"fleet --targets=" + files.path(), "is a directory"},
      {"fleet --targets=" + bad_file, absl::StrCat("--targets=", bad_file, ":3: \"node-b\" is not a target")},
      {"fleet --targets=" + empty_file, "names no target"},
      {"fleet --targets=127.0.0.1:7465,host:0", "item 2 \"host:0\" is not a target"},
      {"fleet --targets=127.0.0.1:7465,,host:1", "item 2 \"\" is not a target"},
      {"fleet --targets=unix:", "item 1"},
      {"fleet --targets=127.0.0.1:7465 --concurrency=0", "--concurrency=0: want 1..1024"},
      {"fleet --targets=127.0.0.1:7465 --resolve", "--workload is required"},
      {"fleet --targets=127.0.0.1:7465 --resolve --workload=sleeping", "--workload=sleeping"},
      {"fleet --targets=127.0.0.1:7465 --address=127.0.0.1:7465", "--address does not apply"},
      {"fleet --targets=127.0.0.1:7465 --explain", "--explain does not apply"},
      {"fleet --targets=127.0.0.1:7465 --device_map=auto", "--device_map describes a job: it applies only with --resolve"},
      {"fleet --targets=127.0.0.1:7465 --env=CUDA_VISIBLE_DEVICES=0", "--env describes a job"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CommandResult r = RunCli(c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.out, IsEmpty());
    EXPECT_THAT(r.err, StartsWith("devplace: fleet: "));
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  }
}

TEST(FleetUsage, HelpDescribesTheCommand) {
  const CommandResult r = RunCli("fleet --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* text : {"--targets", "--concurrency", "--resolve", "--workload", "--device_map", "--env",
                           "Exit status", "--timeout", "--json"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
  EXPECT_THAT(RunCli("--help").out, HasSubstr("fleet"));
}

}  // namespace
}  // namespace devplace::testing
