// The Inventory -> Prometheus mapping (server/metrics): device, row, inventory and prober series
// with their labels and base units, no stale series, and the /proc/self process collector.
#include "server/metrics/inventory_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace devplace::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Inventory Parse(const std::string& text) {
  v1::Inventory inv;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &inv));
  return inv;
}

std::string Text(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

constexpr char kTwoGpus[] = R"pb(
  revision: 7
  probed_at { seconds: 1000 }
  backends { row: ROW_CPU state: BACKEND_STATE_READY }
  backends {
    row: ROW_CUDA_NVIDIA
    state: BACKEND_STATE_READY
    devices { host_index: 0 name: "NVIDIA H100" pci_bus_id: "0000:17:00.0" uuid: "GPU-a"
              memory_total_bytes: 85899345920 memory_free_bytes: 1024 usable: true health: HEALTH_OK }
    devices { host_index: 1 name: "NVIDIA H100" pci_bus_id: "0000:65:00.0" uuid: "GPU-b"
              usable: false health: HEALTH_LOST }
  }
  probe_reports { name: "pci" status: PROBE_STATUS_OK duration_ms: 1500 }
  probe_reports { name: "nvml" status: PROBE_STATUS_TIMED_OUT duration_ms: 6000 }
)pb";

const char kGpu0[] = R"(host_index="0",name="NVIDIA H100",pci_bus_id="0000:17:00.0",row="cuda_nvidia",uuid="GPU-a")";
const char kGpu1[] = R"(host_index="1",name="NVIDIA H100",pci_bus_id="0000:65:00.0",row="cuda_nvidia",uuid="GPU-b")";

TEST(InventoryFamilies, DeviceSeriesCarryTheirLabelsAndBaseUnits) {
  const std::string text = Text(InventoryFamilies(Parse(kTwoGpus), absl::FromUnixSeconds(1030)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_memory_total_bytes{", kGpu0, "} 85899345920\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_memory_free_bytes{", kGpu0, "} 1024\n")));
  // The second GPU reports no memory: no memory series, but usable and health.
  EXPECT_THAT(text, Not(HasSubstr(absl::StrCat("devplace_device_memory_total_bytes{", kGpu1))));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_usable{", kGpu0, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_usable{", kGpu1, "} 0\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health{", kGpu0, ",state=\"ok\"} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health{", kGpu0, ",state=\"lost\"} 0\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health{", kGpu1, ",state=\"lost\"} 1\n")));
  EXPECT_THAT(text, HasSubstr("# TYPE devplace_device_memory_total_bytes gauge\n"));
}

const char kGpu2[] = R"(host_index="2",name="NVIDIA H100",pci_bus_id="0000:9a:00.0",row="cuda_nvidia",uuid="GPU-c")";

TEST(InventoryFamilies, HealthStateAndNumericHealthCountersPerDevice) {
  v1::Inventory inv = Parse(kTwoGpus);
  *inv.mutable_backends(1)->add_devices() = Parse(R"pb(
    backends { devices { host_index: 2 name: "NVIDIA H100" pci_bus_id: "0000:9a:00.0" uuid: "GPU-c"
               usable: true health: HEALTH_DEGRADED
               health_counters { name: "current_link_width" value: "8" effect: HEALTH_DEGRADED }
               health_counters { name: "current_link_speed" value: "16.0 GT/s PCIe" effect: HEALTH_OK }
               health_counters { name: "aer_dev_fatal" value: "" effect: HEALTH_UNSPECIFIED } } }
  )pb").backends(0).devices(0);
  const std::string text = Text(InventoryFamilies(inv, absl::FromUnixSeconds(1030)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health{", kGpu2, ",state=\"degraded\"} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health{", kGpu2, ",state=\"ok\"} 0\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health_reading{counter=\"current_link_width\",effect=\"degraded\",",
                                           kGpu2, "} 8\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("devplace_device_health_reading{counter=\"current_link_speed\",effect=\"ok\",",
                                           kGpu2, "} 16\n")));
  // An unknown counter has no series (an absent value is not 0).
  EXPECT_THAT(text, Not(HasSubstr("counter=\"aer_dev_fatal\"")));
  EXPECT_THAT(text, Not(HasSubstr(absl::StrCat("devplace_device_health_reading{counter=\"current_link_width\",effect=\"degraded\",", kGpu0))));
}

TEST(InventoryFamilies, RowInventoryAndProberSeries) {
  const std::string text = Text(InventoryFamilies(Parse(kTwoGpus), absl::FromUnixSeconds(1030)));
  EXPECT_THAT(text, HasSubstr("devplace_backend_state{row=\"cuda_nvidia\",state=\"ready\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("devplace_backend_state{row=\"cuda_nvidia\",state=\"unusable\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("devplace_backend_devices{row=\"cuda_nvidia\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("devplace_backend_devices{row=\"cpu\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("devplace_inventory_revision 7\n"));
  EXPECT_THAT(text, HasSubstr("devplace_inventory_age_seconds 30\n"));
  EXPECT_THAT(text, HasSubstr("devplace_prober_duration_seconds{prober=\"pci\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("devplace_prober_status{prober=\"nvml\",status=\"timed_out\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("devplace_prober_status{prober=\"nvml\",status=\"ok\"} 0\n"));
}

TEST(InventoryFamilies, ADeviceThatDisappearsTakesItsSeriesWithIt) {
  v1::Inventory inv = Parse(kTwoGpus);
  inv.mutable_backends(1)->mutable_devices()->RemoveLast();
  const std::string text = Text(InventoryFamilies(inv, absl::FromUnixSeconds(1030)));
  EXPECT_THAT(text, HasSubstr(kGpu0));
  EXPECT_THAT(text, Not(HasSubstr("GPU-b")));
  EXPECT_THAT(text, HasSubstr("devplace_backend_devices{row=\"cuda_nvidia\"} 1\n"));
}

TEST(InventoryFamilies, PerDeviceSeriesAreBoundedPerRow) {
  // An inventory the probe would not build (it keeps 256 per row), as a custom --probe_command could
  // write it: 300 GPUs get series for the first 256 only, and one gauge counts the rest.
  v1::Inventory inv = Parse(kTwoGpus);
  v1::Backend& cuda = *inv.mutable_backends(1);
  cuda.clear_devices();
  for (int i = 0; i < 300; ++i) {
    v1::Device& d = *cuda.add_devices();
    d.set_host_index(i);
    d.set_uuid(absl::StrCat("GPU-", i));
    d.set_usable(true);
  }
  const std::string text = Text(InventoryFamilies(inv, absl::FromUnixSeconds(1030)));
  int usable = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) usable += absl::StartsWith(line, "devplace_device_usable{");
  EXPECT_EQ(usable, kMaxDeviceSeriesPerRow);
  EXPECT_THAT(text, HasSubstr("uuid=\"GPU-255\""));
  EXPECT_THAT(text, Not(HasSubstr("uuid=\"GPU-256\"")));
  EXPECT_THAT(text, HasSubstr("devplace_backend_devices{row=\"cuda_nvidia\"} 300\n"));
  EXPECT_THAT(text, HasSubstr("devplace_backend_devices_without_series{row=\"cuda_nvidia\"} 44\n"));
  // Below the bound the family is not there at all.
  EXPECT_THAT(Text(InventoryFamilies(Parse(kTwoGpus), absl::FromUnixSeconds(1030))),
              Not(HasSubstr("devplace_backend_devices_without_series")));
}

TEST(InventoryFamilies, AgeIsNeverNegative) {
  const std::string text = Text(InventoryFamilies(Parse(kTwoGpus), absl::FromUnixSeconds(900)));
  EXPECT_THAT(text, HasSubstr("devplace_inventory_age_seconds 0\n"));
}

TEST(InventoryCollector, FollowsTheCurrentSnapshotAndIsEmptyWithoutOne) {
  std::shared_ptr<const v1::Inventory> current;
  InventoryCollector collector([&current] { return current; });
  EXPECT_TRUE(collector.Collect().empty());
  current = std::make_shared<const v1::Inventory>(Parse(kTwoGpus));
  EXPECT_THAT(Text(collector.Collect()), HasSubstr("devplace_inventory_revision 7\n"));
  v1::Inventory next = Parse(kTwoGpus);
  next.set_revision(8);
  next.mutable_backends(1)->clear_devices();
  current = std::make_shared<const v1::Inventory>(next);
  const std::string text = Text(collector.Collect());
  EXPECT_THAT(text, HasSubstr("devplace_inventory_revision 8\n"));
  EXPECT_THAT(text, Not(HasSubstr("devplace_device_")));
}

TEST(ProbeMetrics, CountsRunsAndProberFailures) {
  prometheus::Registry registry;
  ProbeMetrics metrics(registry);
  metrics.ObserveRun(true, absl::Milliseconds(60));
  metrics.ObserveRun(false, absl::Seconds(10));
  metrics.ObserveReports(Parse(kTwoGpus));
  metrics.ObserveReports(Parse(kTwoGpus));
  const std::string text = Text(registry.Collect());
  EXPECT_THAT(text, HasSubstr("devplace_probe_runs_total{result=\"ok\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("devplace_probe_runs_total{result=\"error\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("devplace_probe_run_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("devplace_probe_run_duration_seconds_bucket{le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("devplace_prober_failures_total{prober=\"nvml\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("devplace_prober_failures_total{prober=\"pci\"} 0\n"));
}

double Value(const std::string& text, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, name + " ")) return std::stod(std::string(line.substr(name.size() + 1)));
  }
  ADD_FAILURE() << name << " missing from\n" << text;
  return -1;
}

TEST(ProcessCollector, ReadsThisProcess) {
  ProcessCollector collector;
  const double before = Value(Text(collector.Collect()), "process_open_fds");
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string text = Text(collector.Collect());
  close(fd);
  EXPECT_EQ(Value(text, "process_open_fds"), before + 1);
  EXPECT_GT(Value(text, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Value(text, "process_max_fds"), 0);
  const double start = Value(text, "process_start_time_seconds");
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 24 * 3600);  // a test binary started today
}

}  // namespace
}  // namespace devplace::metrics
