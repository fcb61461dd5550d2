#include "server/probe/vendor_libs/accel_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/probe/host/pci_health.h"
#include "server/probe/host/prober_util.h"

namespace devplace::probe {

std::string BufferText(const char* buffer, size_t size) { return std::string(buffer, strnlen(buffer, size)); }

bool LoadedLibrary::Open(const std::string& path, LibrarySnapshot& out) {
  dlerror();
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ != nullptr) return true;
  const char* error = dlerror();
  const std::string why = error != nullptr ? error : "dlopen failed";
  out.skipped = absl::StrContains(why, "No such file or directory");
  out.unusable = absl::StrCat(path, out.skipped ? " not found (" : " cannot be loaded (", why, ")");
  return false;
}

void* LoadedLibrary::Lookup(const char* symbol, std::vector<std::string>& missing) {
  void* fn = dlsym(handle_, symbol);
  if (fn == nullptr) missing.emplace_back(symbol);
  return fn;
}

bool LoadedLibrary::CheckSymbols(const std::string& path, const char* library, LibrarySnapshot& out) {
  if (!required_missing_.empty()) {
    out.unusable = absl::StrCat(path, " lacks ", absl::StrJoin(required_missing_, ", "), " (not a ", library,
                                " library, or one too old)");
    dlclose(handle_);
    handle_ = nullptr;
    return false;
  }
  if (!optional_missing_.empty()) {
    out.notes.push_back(absl::StrCat("library lacks ", absl::StrJoin(optional_missing_, ", ")));
  }
  return true;
}

void LoadedLibrary::Close(VendorCall& call) {
  if (handle_ == nullptr) return;
  call.Enter("dlclose");
  dlclose(handle_);
  handle_ = nullptr;
}

bool AddLibraryDevice(LibraryDevice device, const char* library, LibrarySnapshot& out) {
  for (const LibraryDevice& d : out.devices) {
    if (d.bus_id == device.bus_id) {
      // Two devices on one bus id: a broken library; keep the first, say so.
      out.problems.push_back(absl::StrCat(library, " device ", device.index, " repeats bus id ", device.bus_id,
                                          "; ignored"));
      return false;
    }
  }
  out.devices.push_back(std::move(device));
  return true;
}

std::vector<std::string> UnlistedBusIds(const std::vector<std::string>& bus_ids, const LibrarySnapshot& out) {
  std::set<std::string> seen;
  for (const LibraryDevice& d : out.devices) seen.insert(d.bus_id);
  std::vector<std::string> unlisted;
  for (const std::string& bus_id : bus_ids) {
    if (seen.count(bus_id) == 0) unlisted.push_back(bus_id);
  }
  return unlisted;
}

namespace {

// Appends `reason` to the device's health reason and sets `health` (LOST wins over FAULT).
void MarkUnhealthy(v1::Device& d, v1::Health health, const std::string& reason) {
  const bool had_reason = d.health() != v1::HEALTH_OK && d.health() != v1::HEALTH_UNSPECIFIED &&
                          !d.health_reason().empty();
  d.set_health_reason(had_reason ? absl::StrCat(d.health_reason(), "; ", reason) : reason);
  if (d.health() != v1::HEALTH_LOST) d.set_health(health);
}

}  // namespace

absl::StatusOr<ProbeOutcome> MergeLibrarySnapshot(const LibraryInfo& info, const LibrarySnapshot& snapshot,
                                                  HostFacts& facts) {
  if (snapshot.unusable) {
    if (snapshot.skipped) return Skipped(*snapshot.unusable);
    return absl::InternalError(*snapshot.unusable);
  }
  std::vector<std::string> notes = snapshot.notes;
  int merged = 0, with_memory = 0, lost = 0, faulty = 0, refused = 0;
  for (const LibraryDevice& dev : snapshot.devices) {
    PciFunction* fn = facts.Find(dev.bus_id);
    if (fn == nullptr || fn->row != info.row) {
      notes.push_back(absl::StrCat(info.library, " device ", dev.bus_id,
                                   dev.index >= 0 ? absl::StrCat(" (index ", dev.index, ")") : "", " is not a ",
                                   info.hardware, " of the PCI scan"));
      continue;
    }
    ++merged;
    v1::Device& d = fn->device;
    if (!dev.name.empty()) d.set_name(dev.name);
    if (!dev.uuid.empty()) d.set_uuid(dev.uuid);
    for (const auto& [key, value] : dev.attributes) (*d.mutable_attributes())[key] = value;
    if (dev.memory_total_bytes) {
      ++with_memory;
      d.set_memory_total_bytes(*dev.memory_total_bytes);
      if (dev.memory_used_bytes) {
        d.set_memory_free_bytes(*dev.memory_total_bytes - std::min(*dev.memory_used_bytes, *dev.memory_total_bytes));
      }
      (*d.mutable_attributes())["memory_source"] = info.prober;
    }
    if (dev.processes) SetListedProcesses(d, info.prober, *dev.processes);
    for (const v1::HealthCounter& c : dev.health_counters) {
      if (d.health_counters_size() < kMaxHealthCounters) *d.add_health_counters() = c;
    }
    if (!dev.lost.empty()) {
      ++lost;
      MarkUnhealthy(d, v1::HEALTH_LOST, dev.lost);
    } else if (!dev.fault.empty()) {
      ++faulty;
      MarkUnhealthy(d, v1::HEALTH_FAULT, dev.fault);
    }
    if (!dev.no_permission.empty()) {
      ++refused;
      fn->inaccessible_reason = absl::StrCat(dev.no_permission, ": this process may not use ", dev.bus_id);
    }
  }
  for (const std::string& bus_id : UnlistedBusIds([&] {
         std::vector<std::string> ids;
         for (PciFunction* fn : facts.OfRow(info.row)) ids.push_back(fn->device.pci_bus_id());
         return ids;
       }(), snapshot)) {
    notes.push_back(absl::StrCat(bus_id, " is not listed by ", info.library, " (kept as sysfs found it)"));
  }

  std::vector<std::string> found;
  if (!snapshot.driver_version.empty()) {
    found.push_back(absl::StrCat("driver ", snapshot.driver_version));
    std::string& version = facts.driver_versions[info.row];
    if (version.empty()) {
      version = snapshot.driver_version;
    } else if (version != snapshot.driver_version) {
      notes.push_back(absl::StrCat(info.library, "'s driver ", snapshot.driver_version, " differs from the kernel's ",
                                   version));
    }
  }
  found.push_back(absl::StrCat(snapshot.count, " ", info.library, " devices, ", merged, " matched by bus id"));
  if (with_memory > 0) found.push_back(absl::StrCat(with_memory, " with memory"));
  if (lost > 0) found.push_back(absl::StrCat(lost, " lost"));
  if (faulty > 0) found.push_back(absl::StrCat(faulty, " faulty"));
  if (refused > 0) found.push_back(absl::StrCat(refused, " not accessible"));
  std::string message = absl::StrJoin(found, ", ");
  if (!notes.empty()) absl::StrAppend(&message, "; ", absl::StrJoin(notes, "; "));
  Problems problems;
  for (const std::string& problem : snapshot.problems) problems.Add(problem);
  return problems.Finish(std::move(message));
}

VendorProber LibraryProber(const LibraryInfo& info, std::string library, LibraryReader read) {
  VendorProber prober{info.prober,
          [info, library = std::move(library), read = std::move(read)](const HostFacts& facts,
                                                                      VendorCall& call) -> VendorMerge {
            std::vector<std::string> bus_ids;
            for (const auto& [bus_id, fn] : facts.pci) {
              if (fn.row == info.row) bus_ids.push_back(bus_id);
            }
            if (bus_ids.empty()) {
              const std::string why = absl::StrCat("no ", info.hardware, " on the PCI bus");
              return [why](HostFacts&) -> absl::StatusOr<ProbeOutcome> { return Skipped(why); };
            }
            auto snapshot = std::make_shared<const LibrarySnapshot>(read(library, bus_ids, call));
            return [info, snapshot](HostFacts& merged) { return MergeLibrarySnapshot(info, *snapshot, merged); };
          }};
  prober.row = info.row;
  return prober;
}

}  // namespace devplace::probe
