// Helpers shared by the prober implementations (not part of the probe library's API).
#ifndef DEVPLACE_SERVER_PROBE_HOST_PROBER_UTIL_H_
#define DEVPLACE_SERVER_PROBE_HOST_PROBER_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/probe/host/host_root.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {

// Collects the problems one prober meets while it goes on recording what it can. At most
// kMaxListed are kept (a hostile tree can hold 100,000 bad entries; the report is inventory
// content), the rest only counted.
class Problems {
 public:
  static constexpr size_t kMaxListed = 16;
  void Add(const absl::Status& status);
  void Add(std::string problem);
  // Adds `problem` before the others (what matters most, e.g. the device bound), never dropped.
  void AddFirst(std::string problem);
  // Found(`found`) when there were no problems; else an Internal error naming the problems (then
  // "and K more" past kMaxListed) and what was found anyway.
  absl::StatusOr<ProbeOutcome> Finish(std::string found) const;

 private:
  std::vector<std::string> list_;
  size_t more_ = 0;
};

// Helpers for the vendor-library merges (nvml, amd_smi, ...).
// Marks `d` HEALTH_LOST with `reason`, appended ("; ") to an earlier loss reason.
void MarkLost(v1::Device& d, const std::string& reason);

// A process's device memory that the library does not give for one device (ROCm SMI gives one
// figure for all the GPUs a process uses): its used_memory_bytes stays absent.
inline constexpr uint64_t kUnknownProcessBytes = ~uint64_t{0};
// Device.usage from a library that lists the compute processes of a device as (pid, device memory
// bytes or kUnknownProcessBytes): `source` (the prober's name), processes known, their count and
// each one.
void SetListedProcesses(v1::Device& d, const char* source, const std::vector<std::pair<uint32_t, uint64_t>>& processes);
// A vendor library's driver version for `row`: kept when no kernel source gave one; else a note
// "<library>'s driver V differs from the <kernel_source>'s K" when they differ. Adds
// "driver V" to `found`. Nothing when `version` is empty.
void MergeLibraryDriverVersion(HostFacts& facts, v1::Row row, const std::string& version, absl::string_view library,
                               absl::string_view kernel_source, std::vector<std::string>& found,
                               std::vector<std::string>& notes);
// The report message of a vendor merge: `found` joined by ", ", then "; " and `notes` joined by
// "; " when there are notes.
std::string FoundAndNotes(const std::vector<std::string>& found, const std::vector<std::string>& notes);

// The entries of `names` spelled "<prefix><decimal number>" (e.g. "card1", not "card1-DP-1"),
// as (number, name), sorted by number.
std::vector<std::pair<uint32_t, std::string>> NumberedEntries(const std::vector<std::string>& names,
                                                              absl::string_view prefix);

// ListDir, then NumberedEntries; an unreadable directory gives no entries.
std::vector<std::pair<uint32_t, std::string>> ListNumbered(const HostRoot& root,
                                                           absl::string_view dir,
                                                           absl::string_view prefix);

// The trimmed content of an optional file: nullopt when it cannot be read.
std::optional<std::string> ReadOptional(const HostRoot& root, absl::string_view path);

// An optional decimal file: nullopt when it cannot be read or parsed.
std::optional<int64_t> ReadOptionalDecimal(const HostRoot& root, absl::string_view path);

// Lower-case hex with `digits` digits, e.g. HexId(0x10de, 4) = "10de".
std::string HexId(uint32_t value, int digits);

// The probers (registered in AllProbers(), host/prober.cc), by source file:
// host_probers.cc
absl::StatusOr<ProbeOutcome> ProbeHostIdentity(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeMemory(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeCpu(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeNuma(const HostRoot& root, HostFacts& facts);
// pci_probers.cc
absl::StatusOr<ProbeOutcome> ProbePci(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeModules(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeDeviceNodes(const HostRoot& root, HostFacts& facts);
// gpu_probers.cc
absl::StatusOr<ProbeOutcome> ProbeNvidiaProc(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeAmd(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeDrm(const HostRoot& root, HostFacts& facts);
// accel_probers.cc
absl::StatusOr<ProbeOutcome> ProbeNeuron(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeTpu(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeHpu(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeNpu(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeMlu(const HostRoot& root, HostFacts& facts);
absl::StatusOr<ProbeOutcome> ProbeMusa(const HostRoot& root, HostFacts& facts);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_PROBER_UTIL_H_
