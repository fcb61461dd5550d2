// devplaced's /metrics scraped by a real Prometheus server (Debian's `prometheus`, started here on
// loopback with a temporary config and storage), `promtool check metrics` on the scraped text, and
// the log under a flood of unparsable (invalid UTF-8) requests: small, and every line one JSON
// object.
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/ports.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

extern char** environ;

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// A loopback TCP port that was free a moment ago (for Prometheus' own web listener).
int FreePort() {
  int port = 0;
  close(BoundLoopbackSocket(&port));
  return port;
}

// The Prometheus server, in a process group of its own, its output in <dir>/prometheus.log.
// The destructor SIGKILLs the group and reaps it.
class PrometheusServer {
 public:
  PrometheusServer(const TempDir& dir, const std::string& target) : port_(FreePort()) {
    const std::string config = dir.Write("prometheus.yml", absl::StrCat("global:\n  scrape_interval: 1s\n"
                                                                        "scrape_configs:\n"
                                                                        "  - job_name: devplaced\n"
                                                                        "    static_configs:\n"
                                                                        "      - targets: ['",
                                                                        target, "']\n"));
    std::vector<std::string> args = {"/usr/bin/prometheus", "--config.file=" + config,
                                     "--storage.tsdb.path=" + dir.File("tsdb"),
                                     absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, dir.File("prometheus.log").c_str(), O_WRONLY | O_CREAT, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  ~PrometheusServer() { Stop(); }

  // SIGTERM (Prometheus shuts down cleanly), SIGKILL after 10 s; returns whether the process
  // group is gone afterwards.
  bool Stop() {
    if (pid_ <= 0) return true;
    kill(-pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) == 0; ++i) usleep(100 * 1000);
    kill(-pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    const bool gone = kill(-pid_, 0) != 0 && errno == ESRCH;
    pid_ = -1;
    return gone;
  }

  bool running() const { return pid_ > 0; }
  // GET /api/v1/query?query=<promql> (URL-encoded by curl); the JSON answer.
  std::string Query(const std::string& promql) const {
    return RunCommand(absl::StrCat("curl -sS --max-time 5 -G http://127.0.0.1:", port_,
                                   "/api/v1/query --data-urlencode 'query=", promql, "'"))
        .out;
  }
  // Polls `promql` until its answer has a sample (bounded by `timeout`); the last answer.
  std::string WaitForSample(const std::string& promql, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    std::string answer;
    while (absl::Now() < deadline) {
      answer = Query(promql);
      if (answer.find("\"value\":[") != std::string::npos) return answer;
      absl::SleepFor(absl::Milliseconds(500));
    }
    return answer;
  }

 private:
  int port_;
  pid_t pid_ = -1;
};

// The value in a one-sample instant-query answer: ..."value":[<time>,"<value>"]...
std::string SampleValue(const std::string& answer) {
  std::smatch m;
  if (!std::regex_search(answer, m, std::regex("\"value\":\\[[0-9.]+,\"([^\"]+)\"\\]"))) return "";
  return m[1];
}

TEST(MetricsDaemon, PrometheusScrapesDevicesAndRpcCounters) {
  TempDir dir;
  setenv("FAKE_NVML_CONFIG", DEVPLACE_FIXTURES_DIR "/nvml/h100.txt", 1);  // GPUs with memory figures
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100",
                               "--nvml_library=" DEVPLACE_FAKE_NVML, "--metrics_listen=127.0.0.1:0"});
  unsetenv("FAKE_NVML_CONFIG");
  const std::string metrics = d.metrics_address();
  ASSERT_FALSE(metrics.empty()) << d.Log();
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();

  auto stub = Stub(d.unix_target());
  v1::Inventory inv;
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  }
  grpc::ClientContext bad;
  v1::ResolveDeviceResponse answer;
  EXPECT_EQ(stub->ResolveDevice(&bad, {}, &answer).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_GE(inv.backends_size(), 2);
  const v1::Device& gpu = inv.backends(1).devices(0);
  ASSERT_TRUE(gpu.has_memory_total_bytes());

  // The exposition text passes promtool's lint.
  const std::string scraped = dir.File("metrics.txt");
  ASSERT_EQ(RunCommand(absl::StrCat("curl -sS --max-time 10 -o ", scraped, " http://", metrics, "/metrics")).exit_code,
            0);
  const CommandResult lint = RunCommand("promtool check metrics < " + scraped);
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_THAT(ReadFile(scraped), HasSubstr("process_open_fds "));

  PrometheusServer prometheus(dir, metrics);
  ASSERT_TRUE(prometheus.running());
  const std::string memory = prometheus.WaitForSample(
      absl::StrCat("devplace_device_memory_total_bytes{uuid=\"", gpu.uuid(), "\",row=\"cuda_nvidia\"}"),
      absl::Seconds(40));
  EXPECT_EQ(SampleValue(memory), absl::StrCat(gpu.memory_total_bytes()))
      << memory << "\nprometheus log:\n" << ReadFile(dir.File("prometheus.log"));
  const std::string calls = prometheus.WaitForSample(
      "devplace_rpc_handled_total{service=\"devplace.v1.DevicePlacement\",method=\"GetInventory\",code=\"OK\"}",
      absl::Seconds(10));
  EXPECT_EQ(SampleValue(calls), "3") << calls;
  const std::string invalid = prometheus.WaitForSample(
      "devplace_rpc_handled_total{method=\"ResolveDevice\",code=\"INVALID_ARGUMENT\"}", absl::Seconds(10));
  EXPECT_EQ(SampleValue(invalid), "1") << invalid;
  EXPECT_EQ(SampleValue(prometheus.Query("devplace_inventory_revision")), "1");
  EXPECT_EQ(SampleValue(prometheus.Query("up{job=\"devplaced\"}")), "1");

  EXPECT_TRUE(prometheus.Stop()) << "Prometheus left processes behind";
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

TEST(MetricsDaemon, BuildInfoCarriesTheProjectVersion) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/cpu-only", "--metrics_listen=127.0.0.1:0"});
  const std::string metrics = d.metrics_address();
  const CommandResult scrape = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics"));
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  EXPECT_THAT(scrape.out, HasSubstr("# TYPE devplace_build_info gauge\n"));
  // The version, and the newest releases whose rules the daemon has (V-SKEW).
  EXPECT_THAT(scrape.out, HasSubstr(absl::StrCat("devplace_build_info{newest_accelerate=\"1.14.0\",newest_transformers="
                                                 "\"5.15.0\",version=\"", DEVPLACE_PROJECT_VERSION, "\"} 1\n")));
}

TEST(MetricsDaemon, OpenWatchStreamsAreCounted) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100",
                               "--metrics_listen=127.0.0.1:0", "--nvml_library="});
  const std::string metrics = d.metrics_address();
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  auto stub = Stub(d.unix_target());
  grpc::ClientContext ctx;
  auto reader = stub->WatchInventory(&ctx, {});
  v1::Inventory first;
  ASSERT_TRUE(reader->Read(&first));
  auto scrape = [&metrics] {
    return RunCommand(absl::StrCat("curl -sS --max-time 10 http://", metrics, "/metrics")).out;
  };
  EXPECT_THAT(scrape(), HasSubstr("devplace_watch_streams_open 1\n"));
  ctx.TryCancel();
  while (reader->Read(&first)) {
  }
  reader->Finish();
  // The server notices the cancel asynchronously: bounded poll.
  std::string text;
  for (int i = 0; i < 50; ++i) {
    text = scrape();
    if (text.find("devplace_watch_streams_open 0\n") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(text, HasSubstr("devplace_watch_streams_open 0\n"));
  EXPECT_THAT(text, HasSubstr("devplace_rpc_handled_total{code=\"CANCELLED\",method=\"WatchInventory\","));
}

TEST(MetricsDaemon, NonLoopbackMetricsAddressNeedsAnExplicitChoice) {
  const CommandResult r =
      RunCommand(ShellQuote(DEVPLACE_DAEMON_BINARY) + " --listen=unix:/nonexistent/x.sock --metrics_listen=0.0.0.0:0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--metrics_listen='0.0.0.0:0' is not a loopback address"));
  EXPECT_THAT(r.err, HasSubstr("--metrics_allow_remote"));
  const CommandResult level = RunCommand(ShellQuote(DEVPLACE_DAEMON_BINARY) + " --log_level=loud");
  EXPECT_EQ(level.exit_code, 2);
  EXPECT_THAT(level.err, HasSubstr("--log_level='loud' is not one of debug, info, warn, error"));
}

TEST(MetricsDaemon, AMetricsAddressThatCannotBeBoundIsFatal) {
  int port = 0;
  const int fd = BoundLoopbackSocket(&port);
  ASSERT_EQ(listen(fd, 1), 0);
  TempDir dir;
  const std::string taken = absl::StrCat("127.0.0.1:", port);
  const CommandResult r = RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --listen=unix:", dir.path(),
                                                  "/d.sock --torch_probe_command=none --metrics_listen=", taken));
  close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("event=listen_failed metrics_listen=" + taken));
}

// The default metrics address held by another process is a warning that names the port, says that
// what answers there is not this daemon and how to start it with metrics; the daemon serves gRPC.
// Port 9465 must be this test's own: it moves this test process (each ctest test is a process of
// its own) into a private network namespace (root only; skipped otherwise).
TEST(MetricsDaemon, ATakenDefaultMetricsPortIsAWarningNamingThePort) {
  if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0) GTEST_SKIP() << "needs root for a private network namespace";
  ASSERT_EQ(RunCommand("ip link set lo up").exit_code, 0);
  const int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(9465);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << strerror(errno);
  ASSERT_EQ(listen(holder, 1), 0);
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/cpu-only", "--metrics_listen=127.0.0.1:9465"});
  ASSERT_TRUE(d.WaitForLog("event=metrics_disabled", absl::Seconds(10))) << d.Log();
  const std::string log = d.Log();
  const std::string line = log.substr(log.find("warning event=metrics_disabled"));
  EXPECT_THAT(line, ::testing::StartsWith(
                        "warning event=metrics_disabled metrics_listen=127.0.0.1:9465 error=\"cannot bind "
                        "127.0.0.1:9465: Address already in use\" hint=\"this daemon serves no metrics: another process "
                        "holds port 9465 (ss -ltnp 'sport = :9465' names it), so http://127.0.0.1:9465/metrics is not "
                        "this daemon's; start it with --metrics_listen=127.0.0.1:0"));
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  EXPECT_EQ(RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target(), " health")).out, "SERVING\n");
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(20)), 0);
  close(holder);
}

// Sends `count` ResolveDevice requests whose device_map holds the bytes 0xff 0xfe (invalid
// UTF-8), as raw bytes through a generic stub, all in flight at once; returns how many failed.
int SendInvalidUtf8(const std::string& target, int count) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  // field 1 (workload) = 1; field 3 (device_map, string) = "\xff\xfe"
  static const char kRequest[] = {0x08, 0x01, 0x1a, 0x02, static_cast<char>(0xff), static_cast<char>(0xfe)};
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer response;
    grpc::Status status;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  };
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < count; ++i) {
    auto call = std::make_unique<Call>();
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Slice slice(kRequest, sizeof kRequest);
    grpc::ByteBuffer request(&slice, 1);
    call->reader = stub.PrepareUnaryCall(&call->ctx, "/devplace.v1.DevicePlacement/ResolveDevice", request, &cq);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
    if (!static_cast<Call*>(tag)->status.ok()) ++failed;
  }
  cq.Shutdown();
  return failed;
}

TEST(LogFlood, InvalidUtf8RequestsLeaveASmallStructuredLog) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100", "--nvml_library=",
                               "--metrics_listen=", "--log_format=json"});
  ASSERT_TRUE(d.WaitForLog("\"event\":\"inventory\",\"revision\":1", absl::Seconds(20))) << d.Log();
  const size_t before = d.Log().size();
  constexpr int kRequests = 3000;
  for (int round = 0; round < 3; ++round) EXPECT_EQ(SendInvalidUtf8(d.unix_target(), kRequests / 3), kRequests / 3);
  ASSERT_TRUE(d.WaitForLog("\"source\":\"protobuf\"", absl::Seconds(5))) << d.Log();
  // After a quiet second the next line reports how many were dropped.
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_EQ(SendInvalidUtf8(d.unix_target(), 1), 1);
  EXPECT_TRUE(d.WaitForLog("\"event\":\"library_log_suppressed\",\"source\":\"protobuf\",\"suppressed\":",
                           absl::Seconds(5)))
      << d.Log();
  const std::string log = d.Log();
  // 3000 unlimited lines would be ~700 KB; 10 a second per library keeps it to a few KB.
  EXPECT_LT(log.size() - before, 40u * 1024) << log.substr(before, 4000);
  int library_lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "{\"time\":\"") && absl::EndsWith(line, "}")) << line;
    if (absl::StrContains(line, "\"event\":\"library_log\"")) {
      ++library_lines;
      EXPECT_THAT(std::string(line), HasSubstr("\"level\":\"error\""));
      EXPECT_THAT(std::string(line), HasSubstr("invalid UTF-8"));
    }
  }
  fprintf(stderr, "[figure] %d invalid-UTF-8 requests: %zu log bytes, %d library_log lines\n", kRequests + 1,
          log.size() - before, library_lines);
  EXPECT_GE(library_lines, 2);
  EXPECT_LT(library_lines, kRequests / 10);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

}  // namespace
}  // namespace devplace::testing
