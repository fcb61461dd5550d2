// --metrics_listen checks and the real /metrics endpoint (prometheus-cpp's exposer) on loopback.
#include "server/metrics/exposer.h"

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

}  // namespace
}  // namespace devplace::metrics
