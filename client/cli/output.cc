// The devplace CLI's shared output (output.h): tables, sizes, JSON and the inventory view.
#include "client/cli/output.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "google/protobuf/struct.pb.h"
#include "server/common/json.h"
#include "server/placement/backends.h"
#include "server/placement/health.h"

namespace devplace::cli {
namespace {

// protobuf's JSON printer indents by one space; every command's --json output uses two.
std::string TwoSpaceIndent(const std::string& json) {
  std::string out;
  out.reserve(json.size() * 5 / 4);
  for (absl::string_view line : absl::StrSplit(json, '\n')) {
    const size_t depth = std::min(line.find_first_not_of(' '), line.size());  // strings never hold raw newlines
    absl::StrAppend(&out, out.empty() ? "" : "\n", std::string(depth * 2, ' '), line.substr(depth));
  }
  return out;
}

// The daemon's own libtorch view, said as such; when it lacks the backend of a present
// accelerator row, says that the jobs' PyTorch (which may well have it) was not what was probed.
// The device's health word; a usable device's reasons too (DEGRADED: why), since an unusable one's
// are in its USABLE column already.
std::string HealthColumn(const v1::Device& d) {
  const std::string word = placement::HealthWord(d.health());
  return d.usable() && !d.health_reason().empty() ? absl::StrCat(word, ": ", d.health_reason()) : word;
}

std::string TorchLine(const v1::Inventory& inv) {
  const v1::TorchInfo& t = inv.torch();
  std::string line = absl::StrCat("daemon's own libtorch ", t.version(), " (", absl::StrJoin(t.compiled_backends(), ", "),
                                  "), ", t.cuda_device_count(), " CUDA devices");
  std::vector<std::string> missing;
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == v1::ROW_CPU || b.devices().empty()) continue;
    const bool has = std::any_of(t.compiled_backends().begin(), t.compiled_backends().end(), [&](const std::string& c) {
      return c == b.device_type() || (b.row() == v1::ROW_CUDA_AMD && c == "hip") ||
             (b.row() == v1::ROW_TPU && c == "xla");
    });
    if (!has && std::find(missing.begin(), missing.end(), b.name()) == missing.end()) missing.push_back(b.name());
  }
  if (!missing.empty()) {
    absl::StrAppend(&line, "; it has no backend for ", absl::StrJoin(missing, ", "),
                    " present here: the jobs' PyTorch was not probed and may differ");
  }
  return line;
}

}  // namespace

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 == row.size()) {
        line += row[i];
      } else {
        line += row[i] + std::string(widths[i] - row[i].size() + 2, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
}

std::string Bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string Timestamp(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(ts.seconds()), absl::UTCTimeZone());
}

std::string Strip(absl::string_view prefix, const std::string& enum_name) {
  absl::string_view s = enum_name;
  absl::ConsumePrefix(&s, prefix);
  return std::string(s);
}

int PrintJson(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = devplace::ToJson(message);
  if (!json.ok()) return Fail(json.status());
  std::printf("%s\n", TwoSpaceIndent(*json).c_str());
  std::fflush(stdout);
  return 0;
}

int PrintJsonObject(const std::vector<std::pair<std::string, std::string>>& fields) {
  google::protobuf::Struct object;
  for (const auto& [key, value] : fields) (*object.mutable_fields())[key].set_string_value(value);
  return PrintJson(object);
}

int PrintKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs) {
  if (absl::GetFlag(FLAGS_json)) return PrintJsonObject(pairs);
  std::string out;
  for (const auto& [key, value] : pairs) absl::StrAppend(&out, key, "=", value, "\n");
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

namespace {

// Who holds the unit (row, bus id, partition), from the inventory's leases: "pid 1234", "TTL to
// 12:00:00Z", "leased" (details hidden), or "-".
std::string LeaseOf(const v1::Inventory& inv, v1::Row row, const std::string& bus_id, const std::string& partition) {
  for (const v1::LeaseInfo& lease : inv.leases()) {
    for (const v1::LeaseDevice& d : lease.devices()) {
      if (d.row() != row || d.pci_bus_id() != bus_id) continue;
      if (!partition.empty() && !d.partition_uuid().empty() && d.partition_uuid() != partition) continue;
      if (lease.pid() != 0) return absl::StrCat("pid ", lease.pid());
      if (lease.has_expires_at()) return absl::StrCat("TTL to ", Timestamp(lease.expires_at()));
      return "leased";
    }
  }
  return "-";
}

std::string Processes(const v1::DeviceUsage& u) {
  if (!u.processes_known()) return "?";
  std::vector<std::string> pids;
  for (const v1::DeviceUsageProcess& p : u.processes()) {
    if (p.pid() == 0) continue;
    pids.push_back(absl::StrCat(p.pid(), p.has_uid() ? absl::StrCat("(uid ", p.uid(), ")") : "",
                                p.has_used_memory_bytes() ? absl::StrCat(":", Bytes(p.used_memory_bytes())) : ""));
  }
  if (pids.size() > 4) {
    pids.resize(4);
    pids.push_back("...");
  }
  return absl::StrCat(u.process_count(), pids.empty() ? "" : absl::StrCat(" [", absl::StrJoin(pids, " "), "]"));
}

std::string Mode(const v1::DeviceUsage& u) {
  if (u.compute_mode() == v1::DEVICE_USAGE_COMPUTE_MODE_UNSPECIFIED) return u.busy() ? "busy" : "-";
  const std::string mode = Strip("DEVICE_USAGE_COMPUTE_MODE_", v1::DeviceUsageComputeMode_Name(u.compute_mode()));
  return u.busy() ? absl::StrCat(mode, " (busy)") : mode;
}

// The usage table (devices and MIG instances a vendor library read) and the leases.
void PrintUsage(const v1::Inventory& inv) {
  std::vector<std::vector<std::string>> usage = {
      {"BACKEND", "#", "UNIT", "USED", "FREE", "PROCESSES", "MODE", "LEASE", "SOURCE"}};
  for (const v1::Backend& b : inv.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (d.has_usage()) {
        const v1::DeviceUsage& u = d.usage();
        usage.push_back({b.name(), absl::StrCat(d.host_index()), "device",
                         u.has_memory_used_bytes() ? Bytes(u.memory_used_bytes()) : "-",
                         d.has_memory_free_bytes() ? Bytes(d.memory_free_bytes()) : "-", Processes(u), Mode(u),
                         LeaseOf(inv, b.row(), d.pci_bus_id(), ""), u.source()});
      }
      for (const v1::Partition& p : d.partitions()) {
        if (!p.has_usage()) continue;
        usage.push_back({b.name(), absl::StrCat(d.host_index()), p.uuid().empty() ? "MIG" : p.uuid(),
                         p.usage().has_memory_used_bytes() ? Bytes(p.usage().memory_used_bytes()) : "-",
                         p.has_memory_free_bytes() ? Bytes(p.memory_free_bytes()) : "-", Processes(p.usage()),
                         Mode(p.usage()), LeaseOf(inv, b.row(), d.pci_bus_id(), p.uuid()), p.usage().source()});
      }
    }
  }
  if (usage.size() > 1) {
    std::printf("\n");
    PrintTable(usage);
  }
  if (inv.leases_size() == 0) return;
  std::vector<std::vector<std::string>> leases = {{"LEASE", "HOLDER", "PID", "UID", "DEVICES", "SINCE", "EXPIRES"}};
  for (const v1::LeaseInfo& l : inv.leases()) {
    std::vector<std::string> units;
    for (const v1::LeaseDevice& d : l.devices()) {
      units.push_back(absl::StrCat(placement::RowName(d.row()), " ", d.host_index(),
                                   d.partition_uuid().empty() ? "" : absl::StrCat(" ", d.partition_uuid()),
                                   d.sub_device() >= 0 ? absl::StrCat(".", d.sub_device()) : ""));
    }
    leases.push_back({l.lease_id().empty() ? "(hidden)" : l.lease_id(),
                      Strip("LEASE_HOLDER_", v1::LeaseHolder_Name(l.holder())),
                      l.pid() == 0 ? "-" : absl::StrCat(l.pid()), l.has_uid() ? absl::StrCat(l.uid()) : "-",
                      absl::StrJoin(units, ", "), Timestamp(l.created_at()),
                      l.has_expires_at() ? Timestamp(l.expires_at()) : "-"});
  }
  std::printf("\n");
  PrintTable(leases);
}

}  // namespace

int PrintInventory(const v1::Inventory& inv) {
  if (absl::GetFlag(FLAGS_json)) return PrintJson(inv);
  const v1::Host& host = inv.host();
  const v1::Cpu& cpu = host.cpu();
  std::vector<std::vector<std::string>> head = {
      {"Host", absl::StrCat(host.hostname().empty() ? "?" : host.hostname(), " (", host.os(), " ",
                            host.kernel_release(), ")")},
      {"CPU", absl::StrCat(cpu.architecture(), " ", cpu.model_name().empty() ? cpu.vendor() : cpu.model_name(), ", ",
                           cpu.sockets(), " sockets / ", cpu.cores(), " cores / ", cpu.threads(), " threads, torch ",
                           cpu.torch_cpu_capability())},
      {"Memory", absl::StrCat(Bytes(host.memory_total_bytes()), " total, ", Bytes(host.memory_available_bytes()),
                              " available, ", host.numa_nodes_size(), " NUMA nodes")},
      {"Revision", absl::StrCat(inv.revision(), ", probed ", Timestamp(inv.probed_at()))},
  };
  if (inv.has_usage_read_at()) {
    head.push_back({"Usage", absl::StrCat("read ", Timestamp(inv.usage_read_at()), ", ", inv.leases_size(),
                                          " lease", inv.leases_size() == 1 ? "" : "s", " held")});
  }
  // Accelerators whose usage no vendor library read: a pick takes them as idle.
  std::vector<std::string> unknown;
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == v1::ROW_CPU || b.row() == v1::ROW_MPS) continue;
    for (const v1::Device& d : b.devices()) {
      if (!d.has_usage()) unknown.push_back(absl::StrCat(b.name(), " ", d.host_index()));
    }
  }
  if (!unknown.empty()) {
    head.push_back({"Usage", absl::StrCat("unknown for ", unknown.size(), " device(s) (", absl::StrJoin(unknown, ", "),
                                          "): no vendor library reads it here, so a pick takes them as idle and "
                                          "--min_free cannot be met")});
  }
  if (inv.torch().probed()) {
    head.push_back({"Torch", TorchLine(inv)});
  } else if (!inv.torch().error().empty()) {
    head.push_back({"Torch", absl::StrCat("the daemon's own libtorch was not probed: ", inv.torch().error())});
  }
  PrintTable(head);

  std::printf("\n");
  std::vector<std::vector<std::string>> backends = {{"BACKEND", "TYPE", "STATE", "DEVICES", "DRIVER", "PACKAGE", "NOTE"}};
  std::vector<std::vector<std::string>> devices = {
      {"BACKEND", "#", "NAME", "PCI BUS ID", "UUID", "MEMORY", "FREE", "NUMA", "NODES", "HEALTH", "USABLE"}};
  std::vector<std::vector<std::string>> partitions = {{"BACKEND", "#", "PARTITION", "UUID", "GI", "CI", "MEMORY"}};
  // The runtime's own numbering (the cuda prober): cuda:N of a job without a mask.
  std::vector<std::vector<std::string>> orders = {{"BACKEND", "#", "PCI BUS ID", "DEFAULT ORDER", "PCI ORDER"}};
  for (const v1::Backend& b : inv.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (!d.has_runtime_ordinal() && !d.has_runtime_ordinal_pci()) continue;
      orders.push_back({b.name(), absl::StrCat(d.host_index()), d.pci_bus_id().empty() ? "-" : d.pci_bus_id(),
                        d.has_runtime_ordinal() ? absl::StrCat(b.device_type(), ":", d.runtime_ordinal()) : "-",
                        d.has_runtime_ordinal_pci() ? absl::StrCat(b.device_type(), ":", d.runtime_ordinal_pci()) : "-"});
    }
  }
  for (const v1::Backend& b : inv.backends()) {
    int usable = 0;
    for (const v1::Device& d : b.devices()) {
      usable += d.usable() ? 1 : 0;
      devices.push_back({b.name(), absl::StrCat(d.host_index()), d.name().empty() ? "-" : d.name(),
                         d.pci_bus_id().empty() ? "-" : d.pci_bus_id(), d.uuid().empty() ? "-" : d.uuid(),
                         d.has_memory_total_bytes() ? Bytes(d.memory_total_bytes()) : "-",
                         d.has_memory_free_bytes() ? Bytes(d.memory_free_bytes()) : "-",
                         d.numa_node() < 0 ? "-" : absl::StrCat(d.numa_node()),
                         d.device_nodes().empty() ? "-" : absl::StrJoin(d.device_nodes(), ","), HealthColumn(d),
                         d.usable() ? "yes" : absl::StrCat("no: ", d.unusable_reason())});
      for (const v1::Partition& p : d.partitions()) {
        partitions.push_back({b.name(), absl::StrCat(d.host_index()), p.profile().empty() ? "MIG" : p.profile(),
                              p.uuid().empty() ? "-" : p.uuid(), absl::StrCat(p.gpu_instance_id()),
                              absl::StrCat(p.compute_instance_id()),
                              p.has_memory_total_bytes() ? Bytes(p.memory_total_bytes()) : "-"});
      }
    }
    backends.push_back({b.name(), b.device_type(), Strip("BACKEND_STATE_", v1::BackendState_Name(b.state())),
                        b.devices().empty() ? "-" : absl::StrCat(usable, "/", b.devices_size(), " usable"),
                        b.driver_version().empty() ? "-" : b.driver_version(), b.package(), b.state_reason()});
  }
  PrintTable(backends);
  if (devices.size() > 1) {
    std::printf("\n");
    PrintTable(devices);
  }
  if (partitions.size() > 1) {
    std::printf("\n");
    PrintTable(partitions);
  }
  if (orders.size() > 1) {
    std::printf("\n");
    PrintTable(orders);
  }
  PrintUsage(inv);
  if (!inv.probe_reports().empty()) {
    std::printf("\n");
    std::vector<std::vector<std::string>> reports = {{"PROBE", "STATUS", "MS", "MESSAGE"}};
    for (const v1::ProbeReport& r : inv.probe_reports()) {
      reports.push_back({r.name(), Strip("PROBE_STATUS_", v1::ProbeStatus_Name(r.status())),
                         absl::StrCat(r.duration_ms()), r.message()});
    }
    PrintTable(reports);
  }
  return 0;
}

}  // namespace devplace::cli
