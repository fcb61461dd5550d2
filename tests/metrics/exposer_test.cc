// --metrics_listen checks and the real /metrics endpoint (its own accept loop over prometheus-cpp's
// text serializer) on loopback: what it answers to each kind of request, and the connection hooks
// the daemon's /metrics gate sits behind.
#include "server/metrics/exposer.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/common/command.h"

namespace devplace::metrics {
namespace {

using ::testing::HasSubstr;

TEST(CheckMetricsAddress, LoopbackByDefaultRemoteOnlyWhenAllowed) {
  EXPECT_TRUE(CheckMetricsAddress("", false).ok());
  EXPECT_TRUE(CheckMetricsAddress("127.0.0.1:9465", false).ok());
  EXPECT_TRUE(CheckMetricsAddress("[::1]:0", false).ok());
  EXPECT_TRUE(CheckMetricsAddress("[::ffff:127.0.0.1]:0", false).ok());  // the daemon's loopback rule
  EXPECT_THAT(CheckMetricsAddress("[::ffff:10.0.0.1]:0", false).message(), HasSubstr("--metrics_allow_remote"));
  EXPECT_THAT(CheckMetricsAddress("0.0.0.0:9465", false).message(), HasSubstr("--metrics_allow_remote"));
  EXPECT_TRUE(CheckMetricsAddress("0.0.0.0:9465", true).ok());
  EXPECT_THAT(CheckMetricsAddress("localhost:9465", false).message(),
              HasSubstr("--metrics_listen='localhost:9465' is not an address; accepted:"));
  EXPECT_EQ(CheckMetricsAddress("127.0.0.1:70000", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckMetricsAddress("9465", false).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StartMetricsEndpoint, ServesTheCollectablesAndRefusesATakenPort) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("devplace_test_total").Help("t").Register(*registry).Add({}).Increment(3);
  absl::StatusOr<MetricsEndpoint> endpoint = StartMetricsEndpoint("127.0.0.1:0", {registry});
  registry.reset();  // the endpoint keeps what it serves alive
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_NE(endpoint->address, "127.0.0.1:0");
  const testing::CommandResult scrape =
      testing::RunCommand("curl -sS --max-time 10 http://" + endpoint->address + "/metrics");
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  EXPECT_THAT(scrape.out, HasSubstr("devplace_test_total 3\n"));
  absl::StatusOr<MetricsEndpoint> second =
      StartMetricsEndpoint(endpoint->address, {std::make_shared<prometheus::Registry>()});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(endpoint->address));
}

// curl's status line and headers (-i) for `args`, with a 10 s bound.
std::string Curl(const std::string& args) {
  return testing::RunCommand("curl -sS -i --max-time 10 " + args).out;
}

TEST(StartMetricsEndpoint, AnswersEachKindOfRequestAndCountsItsScrapes) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("devplace_test_total").Help("t").Register(*registry).Add({}).Increment(3);
  absl::StatusOr<MetricsEndpoint> endpoint = StartMetricsEndpoint("127.0.0.1:0", {registry});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string base = "http://" + endpoint->address;
  const std::string ok = Curl(base + "/metrics?name[]=x");
  EXPECT_THAT(ok, HasSubstr("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(ok, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(ok, HasSubstr("devplace_test_total 3\n"));
  EXPECT_THAT(ok, HasSubstr("# TYPE exposer_request_latencies summary"));
  EXPECT_THAT(Curl(base + "/metrics"), HasSubstr("exposer_scrapes_total 1\n"));  // the one before
  const std::string head = Curl("-I " + base + "/metrics");
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr("devplace_test_total")));
  EXPECT_THAT(Curl(base + "/"), HasSubstr("HTTP/1.1 404 Not Found\r\n"));
  const std::string post = Curl("-d x=1 " + base + "/metrics");
  EXPECT_THAT(post, HasSubstr("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(Curl("-H 'X-Big: " + std::string(kMetricsMaxRequestBytes, 'x') + "' " + base + "/metrics"),
              HasSubstr("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  const testing::CommandResult bad = testing::RunCommand(
      "timeout 10 bash -c 'exec 3<>/dev/tcp/" + absl::StrReplaceAll(endpoint->address, {{":", "/"}}) +
      " && printf \"hello\\r\\n\\r\\n\" >&3 && cat <&3'");
  EXPECT_THAT(bad.out, HasSubstr("HTTP/1.1 400 Bad Request\r\n")) << bad.err;
}

TEST(StartMetricsEndpoint, AConnectionTheHookRefusesIsClosedAndEveryAdmittedOneIsReleased) {
  std::atomic<int> admitted{0}, released{0};
  std::atomic<bool> refuse{false};
  MetricsConnectionHooks hooks;
  hooks.admit = [&](int, const sockaddr_storage& peer) {
    EXPECT_EQ(peer.ss_family, AF_INET);
    if (refuse.load()) return false;
    ++admitted;
    return true;
  };
  hooks.release = [&](int, bool timed_out) {
    EXPECT_FALSE(timed_out);
    ++released;
  };
  absl::StatusOr<MetricsEndpoint> endpoint =
      StartMetricsEndpoint("127.0.0.1:0", {std::make_shared<prometheus::Registry>()}, std::move(hooks));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_THAT(Curl("http://" + endpoint->address + "/metrics"), HasSubstr("HTTP/1.1 200 OK"));
  refuse = true;
  const testing::CommandResult refused = testing::RunCommand("curl -sS --max-time 10 http://" + endpoint->address + "/metrics");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, ::testing::AnyOf(HasSubstr("Empty reply"), HasSubstr("reset")));
  endpoint = absl::UnavailableError("stopped");  // stops serving: every admitted connection released
  EXPECT_EQ(admitted.load(), 1);
  EXPECT_EQ(released.load(), 1);
}

}  // namespace
}  // namespace devplace::metrics
