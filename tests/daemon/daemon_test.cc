// The Daemon (server/daemon/daemon.h) in this test process: started on a unix socket in a
// temporary directory and 127.0.0.1:0 with /metrics on 127.0.0.1:0, probing a fixture host
// through the real devplace-probe child; called over real gRPC channels; stopped by Stop() or by
// signals; and a second Daemon on the same socket refused as a second devplaced is (exit 1).
#include "server/daemon/daemon.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/daemon/config.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"

namespace devplace::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using devplace::testing::TempDir;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

ValidConfig TestConfig(const TempDir& dir) {
  DaemonConfig c;
  c.listen = "unix:" + dir.File("d.sock") + ",127.0.0.1:0";
  c.host_root = DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100";
  c.probe_command = DEVPLACE_PROBE_BINARY;
  c.torch_probe_command = "none";
  c.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<ValidConfig> v = ValidateConfig(c);
  EXPECT_TRUE(v.ok()) << v.status();
  return *std::move(v);
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return ctx;
}

// grpc.health.v1 Check of `service` ("" = the server) at `target`; UNKNOWN when the call fails.
HealthCheckResponse::ServingStatus Health(const std::string& target, const std::string& service = "") {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  return stub->Check(Ctx().get(), req, &resp).ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
}

bool WaitServing(const std::string& target) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (Health(target) != HealthCheckResponse::SERVING) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

grpc::Status Resolve(const std::string& target, v1::ResolveDeviceResponse* answer) {
  auto stub = v1::DevicePlacement::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  return stub->ResolveDevice(Ctx().get(), req, answer);
}

// GET http://<address>/metrics over a plain socket (HTTP/1.0: the server closes when done). Not
// curl through RunCommand: a running Daemon kills this process's children that no probe owns.
std::string ScrapeMetrics(const std::string& address) {
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) return "";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

TEST(DaemonInProcess, ServesOverUnixAndTcpThenStopEndsWaitWithZero) {
  TempDir dir;
  Daemon d(TestConfig(dir));
  ASSERT_TRUE(d.Start().ok());
  ASSERT_EQ(d.listening().size(), 2u);
  const std::string unix_target = "unix:" + dir.File("d.sock");
  EXPECT_EQ(d.listening()[0], unix_target);
  ASSERT_THAT(d.listening()[1], StartsWith("127.0.0.1:"));
  EXPECT_NE(d.listening()[1], "127.0.0.1:0");  // the port picked is the one reported
  for (const std::string& target : d.listening()) {
    SCOPED_TRACE(target);
    ASSERT_TRUE(WaitServing(target)) << "never SERVING after the first probe";
    EXPECT_EQ(Health(target, "devplace.v1.DevicePlacement"), HealthCheckResponse::SERVING);
    v1::ResolveDeviceResponse answer;
    const grpc::Status s = Resolve(target, &answer);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(answer.device(), "cuda:0");  // the fixture host's first H100
    EXPECT_EQ(answer.inventory_revision(), 1u);
  }
  ASSERT_THAT(d.metrics_address(), StartsWith("127.0.0.1:"));
  const std::string metrics = ScrapeMetrics(d.metrics_address());
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("devplace_inventory_revision 1"));
  EXPECT_THAT(metrics, HasSubstr("devplace_rpc_handled_total{"));

  // A second daemon on the same socket is refused as a second devplaced is: exit status 1, and
  // the running one keeps its socket.
  {
    DaemonConfig second = TestConfig(dir).config;
    second.listen = unix_target;
    second.metrics_listen = "";
    second.lease_state_file = "none";  // the same lease file would be refused first (its lock)
    Daemon other(*ValidateConfig(second));
    const absl::Status refused = other.Start();
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(refused.message(), HasSubstr("another process is serving on this socket"));
    EXPECT_EQ(ExitStatus(refused), 1);
    EXPECT_EQ(other.Wait(), 0);  // nothing to wait for
  }
  v1::ResolveDeviceResponse again;
  EXPECT_TRUE(Resolve(unix_target, &again).ok());

  // Stop() from another thread ends Wait() here, without a signal.
  std::thread stopper([&d] {
    absl::SleepFor(absl::Milliseconds(300));
    d.Stop();
  });
  const absl::Time before = absl::Now();
  EXPECT_EQ(d.Wait(), 0);
  stopper.join();
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  EXPECT_FALSE(std::filesystem::exists(dir.File("d.sock")));  // removed: it was ours
  EXPECT_EQ(Health(d.listening()[1]), HealthCheckResponse::UNKNOWN);  // nothing listens any more
}

TEST(DaemonInProcess, SighupRecreatesADeletedSocketAndSigtermEndsWait) {
  TempDir dir;
  Daemon d(TestConfig(dir));
  ASSERT_TRUE(d.Start().ok());  // SIGHUP and SIGTERM are blocked from here on, in every new thread
  const std::string socket = dir.File("d.sock");
  bool recreated = false;
  std::thread signaller([&] {
    if (!WaitServing("unix:" + socket)) {
      kill(getpid(), SIGTERM);
      return;
    }
    std::filesystem::remove(socket);
    kill(getpid(), SIGHUP);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!std::filesystem::exists(socket) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    recreated = WaitServing("unix:" + socket);
    kill(getpid(), SIGTERM);
  });
  EXPECT_EQ(d.Wait(), 0);
  signaller.join();
  EXPECT_TRUE(recreated) << "SIGHUP did not re-create the deleted socket";
}

TEST(DaemonInProcess, DestroyingARunningDaemonStopsIt) {
  TempDir dir;
  std::string tcp;
  {
    Daemon d(TestConfig(dir));
    ASSERT_TRUE(d.Start().ok());
    tcp = d.listening()[1];
    ASSERT_TRUE(WaitServing(tcp));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("d.sock")));
  EXPECT_EQ(Health(tcp), HealthCheckResponse::UNKNOWN);
}

// ValidateConfig reads and checks the TLS files once; Start() serves what it read, without reading
// them again (here they are gone by then).
TEST(DaemonInProcess, TlsFilesAreReadOnceWhenTheConfigIsValidated) {
  TempDir dir;
  const devplace::testing::CertFiles ca = devplace::testing::MakeCa(dir.path(), "ca");
  const devplace::testing::CertFiles server =
      devplace::testing::MakeLeaf(dir.path(), ca, "server", "IP:127.0.0.1", false);
  DaemonConfig c = TestConfig(dir).config;
  c.listen = "unix:" + dir.File("d.sock") + ",tls:127.0.0.1:0";
  c.tls = {server.cert, server.key, ""};
  absl::StatusOr<ValidConfig> valid = ValidateConfig(c);
  ASSERT_TRUE(valid.ok()) << valid.status();
  ASSERT_TRUE(valid->tls_material.has_value());
  EXPECT_EQ(valid->tls_material->subject, "CN=server");
  std::filesystem::remove(server.cert);
  std::filesystem::remove(server.key);
  Daemon d(*std::move(valid));
  const absl::Status started = d.Start();
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_EQ(d.listening().size(), 2u);
  ASSERT_THAT(d.listening()[1], StartsWith("tls:127.0.0.1:"));
  ASSERT_TRUE(WaitServing("unix:" + dir.File("d.sock")));
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = devplace::testing::ReadFile(ca.cert);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(d.listening()[1].substr(4), grpc::SslCredentials(tls)));
  HealthCheckResponse resp;
  const grpc::Status s = stub->Check(Ctx().get(), HealthCheckRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
}

TEST(DaemonInProcess, UnsafeSocketDirectoryIsExitTwo) {
  TempDir dir;
  dir.Touch("open/");
  ASSERT_EQ(chmod(dir.File("open").c_str(), 0777), 0);  // writable by others, not sticky
  DaemonConfig c = TestConfig(dir).config;
  c.listen = "unix:" + dir.File("open/d.sock");
  c.metrics_listen = "";
  Daemon d(*ValidateConfig(c));
  const absl::Status s = d.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ExitStatus(s), 2);
}

}  // namespace
}  // namespace devplace::daemon
