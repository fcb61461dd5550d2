#include "server/metrics/inventory_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/time_util.h"
#include "prometheus/gauge.h"
#include "server/common/host_file.h"
#include "server/common/version.h"
#include "server/placement/versions.h"

namespace devplace::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// /proc/<pid>/stat is one line of about 300 bytes, /proc/<pid>/limits about 1.5 KiB.
constexpr size_t kProcFileMaxBytes = 64 << 10;

MetricFamily Gauge(std::string name, std::string help) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = MetricType::Gauge;
  return family;
}

void Add(MetricFamily& family, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
}

// The enum value's name without its prefix, lower-case: HEALTH_OK -> "ok".
template <typename Enum>
std::string EnumLabel(const std::string& name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(name, prefix));
}

// One series per state of a stateset: 1 for `current`, 0 for the others.
template <typename Enum>
void AddStateSet(MetricFamily& family, const std::vector<ClientMetric::Label>& labels, const std::string& label_name,
                 const google::protobuf::EnumDescriptor* descriptor, int current, absl::string_view prefix) {
  for (int i = 0; i < descriptor->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = descriptor->value(i);
    std::vector<ClientMetric::Label> with_state = labels;
    with_state.push_back({label_name, EnumLabel<Enum>(value->name(), prefix)});
    Add(family, std::move(with_state), value->number() == current ? 1 : 0);
  }
}

// The numeric value of a health counter: the number it starts with ("8", "16.0 GT/s PCIe" -> 16);
// none for an unknown counter or one without a number.
std::optional<double> CounterNumber(const v1::HealthCounter& c) {
  if (c.effect() == v1::HEALTH_UNSPECIFIED) return std::nullopt;
  const absl::string_view value = c.value();
  const size_t end = std::min(value.find(' '), value.size());
  double number = 0;
  if (!absl::SimpleAtod(value.substr(0, end), &number) || !std::isfinite(number)) return std::nullopt;
  return number;
}

void AddHealthCounters(MetricFamily& family, const std::vector<ClientMetric::Label>& labels, const v1::Device& device) {
  for (const v1::HealthCounter& c : device.health_counters()) {
    const std::optional<double> number = CounterNumber(c);
    if (!number) continue;
    // Labels in name order, as the other device series have them.
    std::vector<ClientMetric::Label> with = {{"counter", c.name()},
                                             {"effect", EnumLabel<v1::Health>(v1::Health_Name(c.effect()), "HEALTH_")}};
    with.insert(with.end(), labels.begin(), labels.end());
    Add(family, std::move(with), *number);
  }
}

void PushIfAny(std::vector<MetricFamily>& out, MetricFamily family) {
  if (!family.metric.empty()) out.push_back(std::move(family));
}

}  // namespace

std::string RowLabel(v1::Row row) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::Row_Name(row), "ROW_"));
}

std::vector<MetricFamily> InventoryFamilies(const v1::Inventory& inventory, absl::Time now) {
  MetricFamily memory_total = Gauge("devplace_device_memory_total_bytes", "Device memory in bytes, as probed");
  MetricFamily memory_free =
      Gauge("devplace_device_memory_free_bytes", "Free device memory in bytes at the last probe (NVML)");
  MetricFamily usable = Gauge("devplace_device_usable", "1 when placement may use the device, else 0");
  MetricFamily memory_used = Gauge("devplace_device_memory_used_bytes",
                                   "Device memory in use in bytes at the last usage read (Device.usage)");
  MetricFamily processes = Gauge("devplace_device_processes",
                                 "Processes using the device at the last usage read, where its library lists them");
  MetricFamily busy = Gauge("devplace_device_busy",
                            "1 when no further process can use the device (exclusive-process mode taken, or "
                            "prohibited), else 0; where the library reports a compute mode");
  MetricFamily health = Gauge("devplace_device_health", "1 for the device's health state, 0 for the others");
  MetricFamily health_counter =
      Gauge("devplace_device_health_reading",
            "Each health counter of the device with a numeric value (Device.health_counters: PCIe link width in "
            "lanes, link speed in GT/s, AER error totals since boot, NVML's ECC totals, pending and failed flags "
            "and clocks-event reasons as 1 or 0), labelled with the counter and its effect");
  MetricFamily row_state = Gauge("devplace_backend_state", "1 for the row's state, 0 for the others");
  MetricFamily row_devices = Gauge("devplace_backend_devices", "Devices found in the row");
  MetricFamily without_series = Gauge("devplace_backend_devices_without_series",
                                      "Devices of the row past the per-row bound on per-device series");
  for (const v1::Backend& backend : inventory.backends()) {
    const std::string row = RowLabel(backend.row());
    AddStateSet<v1::BackendState>(row_state, {{"row", row}}, "state", v1::BackendState_descriptor(), backend.state(),
                                  "BACKEND_STATE_");
    Add(row_devices, {{"row", row}}, backend.devices_size());
    if (backend.devices_size() > kMaxDeviceSeriesPerRow) {
      Add(without_series, {{"row", row}}, backend.devices_size() - kMaxDeviceSeriesPerRow);
    }
    for (int i = 0; i < std::min(backend.devices_size(), kMaxDeviceSeriesPerRow); ++i) {
      const v1::Device& device = backend.devices(i);
      const std::vector<ClientMetric::Label> labels = {{"host_index", absl::StrCat(device.host_index())},
                                                       {"name", device.name()},
                                                       {"pci_bus_id", device.pci_bus_id()},
                                                       {"row", row},
                                                       {"uuid", device.uuid()}};
      if (device.has_memory_total_bytes()) Add(memory_total, labels, static_cast<double>(device.memory_total_bytes()));
      if (device.has_memory_free_bytes()) Add(memory_free, labels, static_cast<double>(device.memory_free_bytes()));
      Add(usable, labels, device.usable() ? 1 : 0);
      if (device.usage().has_memory_used_bytes()) {
        Add(memory_used, labels, static_cast<double>(device.usage().memory_used_bytes()));
      }
      if (device.usage().processes_known()) Add(processes, labels, device.usage().process_count());
      if (device.usage().compute_mode() != v1::DEVICE_USAGE_COMPUTE_MODE_UNSPECIFIED) {
        Add(busy, labels, device.usage().busy() ? 1 : 0);
      }
      AddStateSet<v1::Health>(health, labels, "state", v1::Health_descriptor(), device.health(), "HEALTH_");
      AddHealthCounters(health_counter, labels, device);
    }
  }
  MetricFamily revision = Gauge("devplace_inventory_revision", "Revision of the inventory being served");
  Add(revision, {}, static_cast<double>(inventory.revision()));
  MetricFamily age = Gauge("devplace_inventory_age_seconds", "Seconds since the served inventory was probed");
  if (inventory.has_probed_at()) {
    const absl::Time probed_at = absl::FromUnixMillis(
        google::protobuf::util::TimeUtil::TimestampToMilliseconds(inventory.probed_at()));
    Add(age, {}, std::max(0.0, absl::ToDoubleSeconds(now - probed_at)));
  }
  MetricFamily prober_duration =
      Gauge("devplace_prober_duration_seconds", "How long each prober took in the probe run that is served");
  MetricFamily prober_status =
      Gauge("devplace_prober_status", "1 for each prober's outcome in the probe run that is served, 0 for the others");
  for (const v1::ProbeReport& report : inventory.probe_reports()) {
    Add(prober_duration, {{"prober", report.name()}}, report.duration_ms() / 1000.0);
    AddStateSet<v1::ProbeStatus>(prober_status, {{"prober", report.name()}}, "status", v1::ProbeStatus_descriptor(),
                                 report.status(), "PROBE_STATUS_");
  }

  std::vector<MetricFamily> out;
  for (MetricFamily* family : {&memory_total, &memory_free, &memory_used, &processes, &busy, &usable, &health,
                               &health_counter, &row_state, &row_devices,
                               &without_series, &revision, &age, &prober_duration, &prober_status}) {
    PushIfAny(out, std::move(*family));
  }
  return out;
}

InventoryCollector::InventoryCollector(std::function<std::shared_ptr<const v1::Inventory>()> current)
    : current_(std::move(current)) {}

std::vector<MetricFamily> InventoryCollector::Collect() const {
  const std::shared_ptr<const v1::Inventory> inventory = current_();
  if (inventory == nullptr) return {};
  return InventoryFamilies(*inventory, absl::Now());
}

void RegisterBuildInfo(prometheus::Registry& registry) {
  prometheus::BuildGauge()
      .Name("devplace_build_info")
      .Help("A constant 1 labelled with the version of this devplaced and the newest Transformers and Accelerate "
            "releases its rules know (a job's newer release gets these rules, with a warning)")
      .Register(registry)
      .Add({{"version", kVersion},
            {"newest_transformers", placement::NewestVersion(placement::Library::kTransformers).ToString()},
            {"newest_accelerate", placement::NewestVersion(placement::Library::kAccelerate).ToString()}})
      .Set(1);
}

ProbeMetrics::ProbeMetrics(prometheus::Registry& registry)
    : runs_ok_(prometheus::BuildCounter()
                   .Name("devplace_probe_runs_total")
                   .Help("Runs of the probe child, by result (error: failed, timed out or bad output)")
                   .Register(registry)
                   .Add({{"result", "ok"}})),
      runs_error_(prometheus::BuildCounter()
                      .Name("devplace_probe_runs_total")
                      .Help("Runs of the probe child, by result (error: failed, timed out or bad output)")
                      .Register(registry)
                      .Add({{"result", "error"}})),
      run_duration_(prometheus::BuildHistogram()
                        .Name("devplace_probe_run_duration_seconds")
                        .Help("Duration of each run of the probe child, spawn to reap")
                        .Register(registry)
                        .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                          5, 10, 30})),
      prober_failures_(prometheus::BuildCounter()
                           .Name("devplace_prober_failures_total")
                           .Help("Probe runs in which the prober reported error, timed out or crashed")
                           .Register(registry)) {}

void ProbeMetrics::ObserveRun(bool ok, absl::Duration duration) {
  (ok ? runs_ok_ : runs_error_).Increment();
  run_duration_.Observe(absl::ToDoubleSeconds(duration));
}

void ProbeMetrics::ObserveReports(const v1::Inventory& fresh) {
  for (const v1::ProbeReport& report : fresh.probe_reports()) {
    // Add() returns the existing series for known labels, so every prober seen gets a 0 series.
    prometheus::Counter& failures = prober_failures_.Add({{"prober", report.name()}});
    if (report.status() == v1::PROBE_STATUS_ERROR || report.status() == v1::PROBE_STATUS_TIMED_OUT ||
        report.status() == v1::PROBE_STATUS_CRASHED) {
      failures.Increment();
    }
  }
}

ProcessCollector::ProcessCollector(std::string proc_self) : proc_self_(std::move(proc_self)) {}

std::vector<MetricFamily> ProcessCollector::Collect() const {
  std::vector<MetricFamily> out;
  auto gauge = [&out](const char* name, const char* help, double value) {
    MetricFamily family = Gauge(name, help);
    Add(family, {}, value);
    out.push_back(std::move(family));
  };
  // /proc/<pid>/stat: fields after the parenthesised command name, numbered from 3 (state).
  // A file that cannot be read (a process that ended fails the read with ESRCH) gives no values.
  const std::string stat = ReadHostFile(proc_self_ + "/stat", kProcFileMaxBytes, HostFileLimit::kTruncate).value_or("");
  const size_t close = stat.rfind(')');
  const long ticks = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  if (close != std::string::npos && ticks > 0) {
    const std::vector<std::string> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(stat.substr(close + 1)), ' ', absl::SkipEmpty());
    auto field = [&fields](size_t number, double* value) {  // number as in proc(5)
      return number - 3 < fields.size() && absl::SimpleAtod(fields[number - 3], value);
    };
    double utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
    if (field(14, &utime) && field(15, &stime)) {
      MetricFamily cpu;
      cpu.name = "process_cpu_seconds_total";
      cpu.help = "User and system CPU time spent, in seconds";
      cpu.type = MetricType::Counter;
      ClientMetric metric;
      metric.counter.value = (utime + stime) / ticks;
      cpu.metric.push_back(metric);
      out.push_back(std::move(cpu));
    }
    if (field(23, &vsize)) gauge("process_virtual_memory_bytes", "Virtual memory size in bytes", vsize);
    if (field(24, &rss)) gauge("process_resident_memory_bytes", "Resident memory size in bytes", rss * page);
    // Start time: clock ticks after boot; boot time is /proc/stat's btime (after the intr line,
    // which grows with the host's interrupts).
    const std::string proc_stat = ReadHostFile("/proc/stat", kHostFileMaxBytes, HostFileLimit::kTruncate).value_or("");
    double btime = -1;
    for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
      if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &btime)) break;
    }
    if (btime >= 0 && field(22, &start)) {
      gauge("process_start_time_seconds", "Start time of the process since the unix epoch, in seconds",
            btime + start / ticks);
    }
  }
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it(proc_self_ + "/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
  if (!ec) gauge("process_open_fds", "Open file descriptors", fds);
  const std::string limits = ReadHostFile(proc_self_ + "/limits", kProcFileMaxBytes, HostFileLimit::kTruncate).value_or("");
  for (absl::string_view line : absl::StrSplit(limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    const std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double soft = 0;
    if (!words.empty() && absl::SimpleAtod(words[0], &soft)) {
      gauge("process_max_fds", "Limit on open file descriptors (soft)", soft);
    }
  }
  return out;
}

}  // namespace devplace::metrics
