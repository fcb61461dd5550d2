#include "server/probe/build_inventory.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "server/placement/backends.h"
#include "server/placement/device_state.h"
#include "server/placement/health.h"

namespace devplace::probe {
namespace {

using placement::BackendSpec;

using placement::DriverFix;
using placement::kNotVisible;

// Why a device is not usable, first failing check first; empty when it is usable.
std::string UnusableReason(const BackendSpec& spec, const probe::PciFunction& fn, const v1::Device& d) {
  if (!d.driver_loaded()) {
    if (d.driver().empty()) {
      return absl::StrCat("driver not loaded: no driver bound to ", d.pci_bus_id(), " (", DriverFix(spec), ")");
    }
    return absl::StrCat("driver not loaded: ", d.pci_bus_id(), " is bound to ", d.driver(), ", not ",
                        spec.drivers.front(), " (unbind it and ", DriverFix(spec), ")");
  }
  if (!placement::HealthUsable(d.health())) return placement::HealthUnusableReason(d);
  if (!d.supported()) {
    return absl::StrCat(spec.hardware, " ", d.vendor_id(), ":", d.device_id(), " is not supported by PyTorch's ",
                        spec.device_type, " backend (not a validated torch ", spec.device_type, " target)");
  }
  if (!fn.inaccessible_reason.empty()) return absl::StrCat(fn.inaccessible_reason, " (", kNotVisible, ")");
  if (d.device_nodes().empty()) {
    return absl::StrCat("no device node known for ", d.pci_bus_id(),
                        " (the driver lists none for it; ", kNotVisible, "?)");
  }
  if (!fn.missing_nodes.empty()) {
    return absl::StrCat(fn.missing_nodes.size() == 1 ? "device node " : "device nodes ",
                        absl::StrJoin(fn.missing_nodes, ", "), " missing (", kNotVisible, ")");
  }
  return "";
}

// The processes of `usage` bounded to kMaxUsageProcesses (the most memory first), then by pid.
void BoundProcesses(v1::DeviceUsage& usage) {
  auto& processes = *usage.mutable_processes();
  const auto by_memory = [](const v1::DeviceUsageProcess& a, const v1::DeviceUsageProcess& b) {
    if (a.used_memory_bytes() != b.used_memory_bytes()) return a.used_memory_bytes() > b.used_memory_bytes();
    return a.pid() < b.pid();
  };
  std::sort(processes.begin(), processes.end(), by_memory);
  if (processes.size() > kMaxUsageProcesses) {
    processes.DeleteSubrange(kMaxUsageProcesses, processes.size() - kMaxUsageProcesses);
  }
  std::sort(processes.begin(), processes.end(),
            [](const v1::DeviceUsageProcess& a, const v1::DeviceUsageProcess& b) { return a.pid() < b.pid(); });
  if (usage.process_count() < static_cast<uint32_t>(processes.size())) usage.set_process_count(processes.size());
}

// Device.usage from what the vendor probers recorded: the memory in use (total - free) from the
// library that gave the memory (attributes["memory_source"]), the processes bounded; likewise for
// each MIG instance's usage.
void DeriveUsage(v1::Device& d) {
  const auto source = d.attributes().find("memory_source");
  const bool library_memory =
      source != d.attributes().end() && d.has_memory_total_bytes() && d.has_memory_free_bytes();
  if (library_memory) {
    v1::DeviceUsage& usage = *d.mutable_usage();
    if (usage.source().empty()) usage.set_source(source->second);
    usage.set_memory_used_bytes(d.memory_total_bytes() - std::min(d.memory_free_bytes(), d.memory_total_bytes()));
  }
  if (d.has_usage()) BoundProcesses(*d.mutable_usage());
  for (v1::Partition& p : *d.mutable_partitions()) {
    if (!p.has_usage()) continue;
    if (p.has_memory_total_bytes() && p.has_memory_free_bytes()) {
      p.mutable_usage()->set_memory_used_bytes(p.memory_total_bytes() -
                                               std::min(p.memory_free_bytes(), p.memory_total_bytes()));
    }
    BoundProcesses(*p.mutable_usage());
  }
}

void DeriveDevice(const BackendSpec& spec, const probe::PciFunction& fn, uint32_t host_index, v1::Device& d) {
  d = fn.device;
  DeriveUsage(d);
  d.set_host_index(host_index);
  d.set_driver_loaded(placement::IsRowDriver(spec, d.driver()));
  d.set_device_nodes_present(!d.device_nodes().empty() && fn.missing_nodes.empty());
  d.set_supported(placement::IsTorchSupported(spec.row, fn.device_id));
  d.set_integrated(placement::IsIntegrated(spec.row, fn.device_id, d.pci_bus_id()));
  placement::ApplyHealthCounters(d);
  d.set_usable(d.driver_loaded() && d.device_nodes_present() && placement::HealthUsable(d.health()) && d.supported() &&
               fn.inaccessible_reason.empty());
  d.set_unusable_reason(UnusableReason(spec, fn, d));
}

v1::Backend& AddBackend(const BackendSpec& spec, v1::Inventory& inv) {
  v1::Backend& b = *inv.add_backends();
  b.set_row(spec.row);
  b.set_name(std::string(spec.name));
  b.set_device_type(std::string(spec.device_type));
  b.set_hardware(std::string(spec.hardware));
  b.set_vendor(std::string(spec.vendor));
  b.set_package(std::string(spec.package));
  return b;
}

// Host files may hold any bytes, but proto3 strings must be UTF-8 (an invalid one makes the whole
// serialized Inventory unparseable): replaces each byte of an invalid sequence with '?'.
std::string ValidUtf8(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= in.size() && !(len == 2 && c < 0xc2);
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(in[i + k]) & 0xc0) == 0x80;
    if (ok && len == 3) {  // no overlongs, no surrogates
      const auto c1 = static_cast<unsigned char>(in[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(in[i + 1]);
      ok = c <= 0xf4 && !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(in, i, len);
      i += len;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

void SanitizeUtf8(google::protobuf::Message& msg) {
  const google::protobuf::Reflection* refl = msg.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  refl->ListFields(msg, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING && f->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(msg, f); ++i) refl->SetRepeatedString(&msg, f, i, ValidUtf8(refl->GetRepeatedString(msg, f, i)));
      } else {
        refl->SetString(&msg, f, ValidUtf8(refl->GetString(msg, f)));
      }
    } else if (f->is_map()) {
      continue;  // string maps are sanitized through their typed API below (see SanitizeMap)
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < refl->FieldSize(msg, f); ++i) SanitizeUtf8(*refl->MutableRepeatedMessage(&msg, f, i));
      } else {
        SanitizeUtf8(*refl->MutableMessage(&msg, f));
      }
    }
  }
}

// A map<string, string> with every key and value made valid UTF-8 (rebuilt: keys may change).
void SanitizeMap(google::protobuf::Map<std::string, std::string>& map) {
  google::protobuf::Map<std::string, std::string> clean;
  for (const auto& [key, value] : map) clean[ValidUtf8(key)] = ValidUtf8(value);
  map.swap(clean);
}

void SanitizeUtf8(v1::Inventory& inv) {
  SanitizeUtf8(static_cast<google::protobuf::Message&>(inv));
  for (v1::Backend& b : *inv.mutable_backends()) {
    SanitizeMap(*b.mutable_attributes());
    for (v1::Device& d : *b.mutable_devices()) SanitizeMap(*d.mutable_attributes());
  }
}

}  // namespace

v1::Inventory BuildInventory(const probe::ProbeRun& run) {
  v1::Inventory inv;
  *inv.mutable_host() = run.facts.host;
  std::vector<std::string> left_out;  // "<row>: kept K of N"
  int kept_total = 0;
  // placement::Backends() is in row order, cpu first.
  for (const BackendSpec& spec : placement::Backends()) {
    if (spec.row == v1::ROW_CPU) {
      AddBackend(spec, inv).set_state(v1::BACKEND_STATE_READY);
      continue;
    }
    std::vector<const probe::PciFunction*> functions;
    for (const auto& [bus_id, fn] : run.facts.pci) {
      if (fn.row == spec.row) functions.push_back(&fn);
    }
    if (functions.empty()) continue;
    // The bound (I-BOUND): the first devices in PCI bus order, so every answer built from the
    // inventory (inventory, resolve's devices and max_memory, /metrics) stays small on any host.
    const size_t keep = std::min({functions.size(), static_cast<size_t>(probe::kMaxDevicesPerRow),
                                  static_cast<size_t>(probe::kMaxDevices - kept_total)});
    if (keep < functions.size()) left_out.push_back(absl::StrCat(spec.name, ": kept ", keep, " of ", functions.size()));
    if (keep == 0) continue;
    kept_total += static_cast<int>(keep);
    v1::Backend& b = AddBackend(spec, inv);
    const auto version = run.facts.driver_versions.find(spec.row);
    if (version != run.facts.driver_versions.end()) b.set_driver_version(version->second);
    const auto attributes = run.facts.backend_attributes.find(spec.row);
    if (attributes != run.facts.backend_attributes.end()) {
      b.mutable_attributes()->insert(attributes->second.begin(), attributes->second.end());
    }
    for (size_t i = 0; i < keep; ++i) {
      const auto host_index = static_cast<uint32_t>(b.devices_size());
      DeriveDevice(spec, *functions[i], host_index, *b.add_devices());
    }
    placement::DeriveBackendState(spec, b);
  }
  for (const v1::ProbeReport& report : run.reports) {
    v1::ProbeReport& copy = *inv.add_probe_reports();
    copy = report;
    // A report is for people: a hostile tree must not turn it into megabytes (SanitizeUtf8 below
    // repairs a sequence cut in the middle).
    if (copy.message().size() > kMaxReportMessageBytes) {
      copy.set_message(absl::StrCat(copy.message().substr(0, kMaxReportMessageBytes), "... (",
                                    report.message().size(), " bytes in all)"));
    }
  }
  if (!left_out.empty()) {
    v1::ProbeReport& report = *inv.add_probe_reports();
    report.set_name("device_bound");
    report.set_status(v1::PROBE_STATUS_ERROR);
    report.set_message(absl::StrCat("devices left out of the inventory (at most ", probe::kMaxDevicesPerRow,
                                    " per row and ", probe::kMaxDevices, " in all, the first in PCI bus order): ",
                                    absl::StrJoin(left_out, ", ")));
  }
  SanitizeUtf8(inv);
  return inv;
}

v1::Inventory ProbeInventory(const probe::HostRoot& root) { return BuildInventory(probe::RunProbers(root)); }

v1::Inventory ProbeInventory(const probe::HostRoot& root, const probe::ProbeOptions& options) {
  return BuildInventory(probe::RunProbers(root, options));
}

}  // namespace devplace::probe
