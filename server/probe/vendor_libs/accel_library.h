// What the accelerator management-library probers share: those of the registered libraries
// (server/common/vendor_libraries.h) that complete one row by PCI bus id, such as HLML for Intel
// Gaudi, each a <lib>_prober.cc whose factory returns LibraryProber(...). Each is a plain
// VendorProber (vendor_prober.h) modelled on the NVML one: the library is loaded with dlopen at run
// time (no build-time vendor header or library; the few types and functions used are declared in
// its <lib>_api.h, citing the vendor header they follow), read into a private LibrarySnapshot in
// the prober's child process, and merged into its row by canonical PCI bus id
// (MergeLibrarySnapshot).
//
// Merge rules, the same for every such library:
// - a library device whose bus id the PCI scan did not put in the row is only named in the
//   report message; a device the PCI scan found that the library does not list keeps what sysfs
//   gave (it is never dropped) and is named in the message;
// - the library's name and UUID replace sysfs' (a non-empty value only); memory total and free
//   (total - used, never below 0) are set, and Device.attributes["memory_source"] names the
//   prober (LibraryInfo::prober, its registry name) so answers can say where a figure came from;
// - vendor facts go to Device.attributes (e.g. "serial", "module_id", "card_id", "logic_id");
// - processes the library lists go to Device.usage (source: the prober), compute processes;
// - the library's health counters (library_health.h) go to Device.health_counters, after the
//   sysfs ones, up to kMaxHealthCounters; BuildInventory derives the device's health from them;
// - a device the library reports lost becomes HEALTH_LOST, one it reports faulty HEALTH_FAULT,
//   with the library call and its answer in health_reason (appended to an earlier reason); a
//   device it refuses (no permission) gets an inaccessible reason; all three make it unusable.
// The prober is SKIPPED when its row has no device on the PCI bus (the library is not loaded),
// when the library is not found, or when it says the driver is not loaded; ERROR when the
// library lacks a required function or refuses to start (e.g. a wrong version); ERROR after
// merging when a call failed unexpectedly.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ACCEL_LIBRARY_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ACCEL_LIBRARY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/library_status.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// One device as a library reports it. Optional fields stay empty when the call is missing from
// the library, unsupported, or failed.
struct LibraryDevice {
  int index = -1;      // the library's own device index (DCMI: the logic id); -1 unknown
  std::string bus_id;  // canonical "dddd:bb:dd.f"
  std::string name;
  std::string uuid;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_used_bytes;
  std::map<std::string, std::string> attributes;  // vendor facts for Device.attributes
  // The processes using the device, (pid, device memory bytes), for Device.usage; absent when the
  // library does not list them (or the call is missing or failed).
  std::optional<std::vector<std::pair<uint32_t, uint64_t>>> processes;
  // "HLML hlml_device_get_memory_info: HLML_ERROR_AIP_IS_LOST (15)" when a call said the device
  // is gone (no later call is made on it); empty otherwise.
  std::string lost;
  // Why the library reports the device faulty (a health call's answer); empty when healthy.
  std::string fault;
  // The first call that this process was refused (no permission); empty otherwise.
  std::string no_permission;
  // The library's health counters of the device (library_health.h), merged into
  // Device.health_counters (at most kMaxHealthCounters in all).
  std::vector<v1::HealthCounter> health_counters;
};

// Everything one library session read, before merging.
struct LibrarySnapshot {
  // Set when the library could not be used at all: the prober is skipped (`skipped`) or failed.
  std::optional<std::string> unusable;
  bool skipped = false;
  std::string driver_version;  // from the library, when it tells one
  unsigned int count = 0;      // devices the library counts
  std::vector<LibraryDevice> devices;  // those whose bus id is known
  // Findings that are not failures (a device the library will not open, an optional function
  // the library lacks, a PCI device it does not list).
  std::vector<std::string> notes;
  // Unexpected errors: they make the report PROBE_STATUS_ERROR (what was read is merged).
  std::vector<std::string> problems;
};

// What the merge needs to know about one library.
struct LibraryInfo {
  const char* prober;    // ProbeReport.name and the "memory_source" value, e.g. "hlml"
  const char* library;   // in messages, e.g. "HLML"
  v1::Row row;           // the row it completes
  const char* hardware;  // in messages, e.g. "Gaudi"
};

// Merges `snapshot` into `info.row` of `facts` by bus id (rules at the top of this file).
absl::StatusOr<ProbeOutcome> MergeLibrarySnapshot(const LibraryInfo& info, const LibrarySnapshot& snapshot,
                                                  HostFacts& facts);

// Reads one library session: `library` is the dlopen path, `bus_ids` the row's canonical bus ids
// from the PCI scan; every library call is announced on `call` first.
using LibraryReader =
    std::function<LibrarySnapshot(const std::string& library, const std::vector<std::string>& bus_ids, VendorCall& call)>;

// A VendorProber named info.prober: SKIPPED without loading anything when the PCI scan found no
// device of info.row; otherwise `read`, then MergeLibrarySnapshot.
VendorProber LibraryProber(const LibraryInfo& info, std::string library, LibraryReader read);

// ---- helpers shared by the readers ----

// A loaded library: dlopen / dlsym / dlclose with the missing-symbol bookkeeping.
class LoadedLibrary {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL). On failure fills out.unusable (skipped when the file is
  // not found) and returns false.
  bool Open(const std::string& path, LibrarySnapshot& out);
  // Looks `symbol` up into `fn`; records it as missing when absent.
  template <typename Fn>
  void Required(const char* symbol, Fn& fn) {
    fn = reinterpret_cast<Fn>(Lookup(symbol, required_missing_));
  }
  template <typename Fn>
  void Optional(const char* symbol, Fn& fn) {
    fn = reinterpret_cast<Fn>(Lookup(symbol, optional_missing_));
  }
  // After the lookups: false (library closed, out.unusable set) when a required symbol is
  // missing; a note naming the missing optional ones.
  bool CheckSymbols(const std::string& path, const char* library, LibrarySnapshot& out);
  void Close(VendorCall& call);

 private:
  void* Lookup(const char* symbol, std::vector<std::string>& missing);
  void* handle_ = nullptr;
  std::vector<std::string> required_missing_, optional_missing_;
};

// Makes a reader's calls (LibraryStatus, library_status.h: each announced on `call`, its code
// filed as the device's lost / fault / refusal, an unsupported field or a problem) on the
// snapshot `out` and its LibraryDevices.
class LibraryCalls : public LibraryStatus {
 public:
  LibraryCalls(const LibraryErrors& errors, VendorCall& call, LibrarySnapshot& out)
      : LibraryStatus(errors, call, out.notes, out.problems), out_(out) {}
  // A per-device call, skipped once the device is lost: true on success.
  template <typename Fn>
  bool Device(LibraryDevice& device, const char* name, Fn fn) {
    return LibraryStatus::Device(Findings(device), name, fn);
  }
  bool DeviceResult(LibraryDevice& device, const char* name, int code) {
    return LibraryStatus::DeviceResult(Findings(device), name, code);
  }
  LibrarySnapshot& out() { return out_; }

 private:
  static DeviceFindings Findings(LibraryDevice& device) {
    return {device.index, device.bus_id, device.lost, &device.no_permission, &device.fault};
  }
  LibrarySnapshot& out_;
};

// Text of a fixed-size C string buffer (up to its first NUL).
std::string BufferText(const char* buffer, size_t size);

// Appends a device read by bus id unless one with that bus id is already in `out` (then a
// problem naming `library` is recorded and false returned).
bool AddLibraryDevice(LibraryDevice device, const char* library, LibrarySnapshot& out);

// The bus ids of `bus_ids` that no device of `out` has, for a by-bus-id lookup or a note.
std::vector<std::string> UnlistedBusIds(const std::vector<std::string>& bus_ids, const LibrarySnapshot& out);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ACCEL_LIBRARY_H_
