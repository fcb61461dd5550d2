// DaemonObserver (server/daemon/observer.h): devplaced's one metrics observer. A real inventory
// store whose probe and usage refresh are real child processes reports to it, and the service's
// events are sent as DevicePlacementService sends them; the Prometheus text of its registry and
// the log lines (captured from spdlog's default logger) must be exactly devplaced's.
#include "server/daemon/observer.h"

#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/common/temp_dir.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::daemon {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using devplace::testing::TempDir;

// devplaced's log lines, as "LEVEL MESSAGE\n" (spdlog's level names: debug, info, warning, ...),
// while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

std::string Scrape(const DaemonObserver& observer) {
  return prometheus::TextSerializer().Serialize(observer.registry()->Collect());
}

// Every one of `lines` is a whole line of `text`.
void ExpectLines(const std::string& text, std::initializer_list<std::string> lines) {
  for (const std::string& line : lines) EXPECT_THAT("\n" + text, HasSubstr("\n" + line + "\n"));
}

TEST(DaemonObserver, RegistersEveryFamilyInTheOrderMetricsListsThem) {
  DaemonObserver observer("");
  // A family is listed once it has a series: one event for each that has none at first.
  v1::Inventory fresh;
  fresh.add_probe_reports()->set_name("pci");
  observer.OnProbeReports(fresh);
  observer.OnNewerLibrary({placement::Library::kAccelerate, {9, 0, 0}});
  observer.OnLeaseCall("release", "ok");
  const std::string text = Scrape(observer);
  std::vector<std::string> families;
  for (size_t at = text.find("# HELP "); at != std::string::npos; at = text.find("\n# HELP ", at + 1)) {
    const size_t name = text.find("# HELP ", at) + 7;
    families.push_back(text.substr(name, text.find(' ', name) - name));
  }
  // prometheus-cpp lists the counters, then the gauges, then the histograms, each kind in the
  // order it was registered: devplaced's order.
  EXPECT_EQ(families, (std::vector<std::string>{
                          "devplace_probe_runs_total", "devplace_prober_failures_total",
                          "devplace_costly_calls_refused_total", "devplace_version_skew_answers_total",
                          "devplace_picks_total", "devplace_lease_calls_total", "devplace_usage_refreshes_total",
                          "devplace_build_info", "devplace_watch_streams_open", "devplace_costly_calls_queued",
                          "devplace_leases_held", "devplace_picks_waiting", "devplace_probe_run_duration_seconds",
                          "devplace_pick_duration_seconds", "devplace_usage_refresh_duration_seconds"}));
}

// The store's probe runs and usage refreshes, through a real store with real children.
TEST(DaemonObserver, ProbeRunsAndUsageRefreshesAreCountedAndLogged) {
  TempDir dir;
  testing::InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  dir.Write("inventory.bin", b.Build().SerializeAsString());
  DaemonObserver observer("");
  inventory::StoreOptions options;
  options.probe_command = {"/bin/cat", dir.File("inventory.bin")};
  options.usage_command = {"/bin/cat", dir.File("usage.bin")};  // missing at first: the refresh fails
  options.augment = [&observer](v1::Inventory& fresh) {
    observer.OnProbeReports(fresh);
    return absl::OkStatus();
  };
  observer.ObserveStore(options);
  inventory::InventoryStore store(options);
  CapturedLog log;
  ASSERT_TRUE(store.Refresh().ok());
  EXPECT_THAT(log.text(), ContainsRegex("info event=probe result=ok duration_ms=[0-9]+ revision=1 changed=true\n"));
  EXPECT_FALSE(store.RefreshUsage().ok());
  EXPECT_FALSE(store.RefreshUsage().ok());
  dir.Write("usage.bin", b.Build().SerializeAsString());
  EXPECT_TRUE(store.RefreshUsage().ok());
  const std::string text = log.text();
  // One warning per failing spell, with the child's exit quoted; then the recovery.
  EXPECT_THAT(text, ContainsRegex("warning event=usage_refresh result=error duration_ms=[0-9]+ code=[A-Z_]+ error=\".*\" "
                                  "\\(logged again after it recovers\\)\n"));
  EXPECT_EQ(text.find("event=usage_refresh result=error"), text.rfind("event=usage_refresh result=error"));
  EXPECT_THAT(text, HasSubstr("info event=usage_refresh result=ok (recovered)\n"));
  EXPECT_THAT(text, ContainsRegex("debug event=usage_refresh result=ok duration_ms=[0-9]+ revision=1 changed=false\n"));
  ExpectLines(Scrape(observer), {"devplace_probe_runs_total{result=\"ok\"} 1", "devplace_probe_runs_total{result=\"error\"} 0",
                                 "devplace_probe_run_duration_seconds_count 1",
                                 "devplace_usage_refreshes_total{result=\"error\"} 2",
                                 "devplace_usage_refreshes_total{result=\"ok\"} 1",
                                 "devplace_usage_refresh_duration_seconds_count 3"});
}

TEST(DaemonObserver, AFailedProbeIsAWarningQuotingTheChild) {
  DaemonObserver observer("");
  inventory::StoreOptions options;
  options.probe_command = {"/bin/sh", "-c", "echo 'no \"sysfs\" here' >&2; exit 3"};
  observer.ObserveStore(options);
  inventory::InventoryStore store(options);
  CapturedLog log;
  ASSERT_FALSE(store.Refresh().ok());
  EXPECT_THAT(log.text(), ContainsRegex("warning event=probe result=error duration_ms=[0-9]+ code=[A-Z_]+ error=\"[^\n]*"
                                        "no \\\\\"sysfs\\\\\" here[^\n]*\" serving_revision=0\n"));
  ExpectLines(Scrape(observer), {"devplace_probe_runs_total{result=\"error\"} 1"});
}

// What DevicePlacementService reports (service::ServiceObserver), as it reports it.
TEST(DaemonObserver, TheServicesEventsBecomeTheSharedHostAndVersionSkewFamilies) {
  DaemonObserver observer("/var/lib/devplace/leases");
  service::ServiceObserver& service_side = observer;
  CapturedLog log;
  service_side.OnNewerLibrary({placement::Library::kTransformers, {9, 1, 0}});
  service_side.OnPick("answered", absl::Milliseconds(3));
  service_side.OnPick("too_many_waiting", absl::Milliseconds(1));
  service_side.OnLeasesHeld(3);
  service_side.OnPicksWaiting(2);
  service_side.OnLeaseCall("release", "ok");
  service_side.OnLeaseCall("keep_alive", "not_found");
  service_side.OnLeaseWriteError(absl::PermissionDeniedError("open: Permission denied"));
  ExpectLines(Scrape(observer),
              {"devplace_version_skew_answers_total{job_release=\"9.1\",library=\"transformers\"} 1",
               "devplace_picks_total{outcome=\"answered\"} 1", "devplace_picks_total{outcome=\"too_many_waiting\"} 1",
               "devplace_picks_total{outcome=\"no_free_device\"} 0", "devplace_pick_duration_seconds_count 2",
               "devplace_leases_held 3", "devplace_picks_waiting 2", "devplace_lease_calls_total{call=\"release\",outcome=\"ok\"} 1",
               "devplace_lease_calls_total{call=\"keep_alive\",outcome=\"not_found\"} 1"});
  EXPECT_EQ(log.text(),
            "warning event=lease_state_write_failed file=/var/lib/devplace/leases error=\"open: Permission denied\" (picks "
            "are refused until the file can be written; a release or a lease's end stands in memory, and a restart "
            "checks the older table again)\n");
}

}  // namespace
}  // namespace devplace::daemon
