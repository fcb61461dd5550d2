// Prometheus metrics for devplaced that need no gRPC: the mapping from an Inventory snapshot to
// device, row, inventory and prober gauges (a pure function), a Collectable that applies it to
// the store's current snapshot at each scrape (so a device that disappears takes its series with
// it), per-probe-run counters, and the process collector (/proc/self). The gRPC side (RPC counts
// and latencies, open watch streams) lives in server/service/rpc_metrics.h.
#ifndef DEVPLACE_SERVER_METRICS_INVENTORY_METRICS_H_
#define DEVPLACE_SERVER_METRICS_INVENTORY_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace devplace::metrics {

// Devices with per-device series, per row: the first ones in host order (the probe keeps at most
// 256 per row, docs/SEMANTICS.md I-BOUND; this bounds a scrape whatever the inventory holds).
inline constexpr int kMaxDeviceSeriesPerRow = 256;

// The families one inventory maps to, at time `now` (for the age). Every device family carries
// the labels row (e.g. "cuda_nvidia"), host_index, pci_bus_id, uuid and name, for the first
// kMaxDeviceSeriesPerRow devices of each row; values in base units (bytes, seconds). Families
// (names as exposed):
//   devplace_device_memory_total_bytes / _free_bytes  gauge, only for devices that report it
//   devplace_device_usable                            gauge 1/0 (Device.usable)
//   devplace_device_health{state=ok|lost|fault|unspecified}  gauge 1 for the device's state, 0 else
//   devplace_backend_state{row,state=ready|driver_not_loaded|no_device_nodes|unusable|unspecified}
//                                                     gauge 1 for the row's state, 0 else
//   devplace_backend_devices{row}                     gauge, devices found in the row
//   devplace_backend_devices_without_series{row}      gauge, devices past kMaxDeviceSeriesPerRow
//                                                     (only for a row that has some)
//   devplace_inventory_revision                       gauge, Inventory.revision
//   devplace_inventory_age_seconds                    gauge, now - probed_at (>= 0)
//   devplace_prober_duration_seconds{prober}          gauge, the last run's ProbeReport.duration_ms
//   devplace_prober_status{prober,status=ok|skipped|error|timed_out|unspecified}  gauge 1/0
// Families with no series (e.g. no device reports memory) are left out.
std::vector<prometheus::MetricFamily> InventoryFamilies(const v1::Inventory& inventory, absl::Time now);

// The lower-case row label for `row`, e.g. ROW_CUDA_NVIDIA -> "cuda_nvidia".
std::string RowLabel(v1::Row row);

// Exposes InventoryFamilies(*current(), absl::Now()) at every scrape; nothing while `current`
// returns null (before the first probe). `current` must be thread-safe (InventoryStore::Current).
class InventoryCollector : public prometheus::Collectable {
 public:
  explicit InventoryCollector(std::function<std::shared_ptr<const v1::Inventory>()> current);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<std::shared_ptr<const v1::Inventory>()> current_;
};

// Registers devplace_build_info{version="MAJOR.MINOR.PATCH",newest_transformers="5.15.0",
// newest_accelerate="1.14.0"} 1 in `registry` (the Prometheus convention for a build's identity: a
// constant 1, the facts in labels; the version is kVersion, server/common/version.h; the releases
// are placement::NewestVersion, the newest whose rules this daemon has, V-SKEW). `registry` keeps
// the gauge for its lifetime.
void RegisterBuildInfo(prometheus::Registry& registry);

// Counters over probe runs, registered in `registry` (which must outlive this object):
//   devplace_probe_runs_total{result=ok|error}      one per run of the probe child
//   devplace_probe_run_duration_seconds             histogram of those runs (spawn to reap)
//   devplace_prober_failures_total{prober}          runs whose report for `prober` was error or
//                                                   timed_out (only from runs whose output parsed)
// Thread-safe.
class ProbeMetrics {
 public:
  explicit ProbeMetrics(prometheus::Registry& registry);
  // One probe run finished: `ok` whether it produced a good inventory, `duration` its run time.
  void ObserveRun(bool ok, absl::Duration duration);
  // The probe reports of one run's fresh inventory (before it is published).
  void ObserveReports(const v1::Inventory& fresh);

 private:
  prometheus::Counter& runs_ok_;
  prometheus::Counter& runs_error_;
  prometheus::Histogram& run_duration_;
  prometheus::Family<prometheus::Counter>& prober_failures_;
};

// Process metrics from /proc/self, with the names Prometheus' client libraries use:
//   process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
//   process_max_fds, process_start_time_seconds (unix time), process_cpu_seconds_total.
// A value that cannot be read is left out.
class ProcessCollector : public prometheus::Collectable {
 public:
  // `proc_self`: the directory to read (tests may point it at another /proc/<pid>).
  explicit ProcessCollector(std::string proc_self = "/proc/self");
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string proc_self_;
};

}  // namespace devplace::metrics

#endif  // DEVPLACE_SERVER_METRICS_INVENTORY_METRICS_H_
