// devplaced's health file: the FAULT and LOST health readings of the last inventory
// (placement::FaultReadings), kept in "health.state" beside the lease file, so that a reading kept
// while its counter cannot be read (placement::KeepFaultReadings) survives a restart: the store's
// first inventory is carried from it (StoreOptions.carry_from). docs/PROBE.md "A reading that
// survives a restart". Format: lease_state.proto's HealthState, version kHealthFileVersion. No
// mutex: devplaced writes it from its one store subscriber, and no other daemon uses the directory
// (StateDirectoryLock, lease_file.h).
#ifndef DEVPLACE_SERVER_SERVICE_HEALTH_FILE_H_
#define DEVPLACE_SERVER_SERVICE_HEALTH_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::service {

inline constexpr char kHealthStateFileName[] = "health.state";
// HealthState.version this daemon writes and reads.
inline constexpr uint32_t kHealthFileVersion = 1;
// The largest health file ReadHealthFile reads, in bytes (1 MiB: every counter of every device of
// a host is a few KiB).
inline constexpr size_t kMaxHealthFileBytes = size_t{1} << 20;

// The health file beside `lease_file` (the lease file's directory, "health.state").
std::string HealthFileBeside(const std::string& lease_file);

struct HealthFileContents {
  bool found = false;  // whether the file existed
  // Non-empty when the file was not used (ReadStateFile's reasons: the directory or the file not
  // the daemon's own, too large, unreadable; "is not a health state (corrupt or another format)";
  // another version), ending "; starting without the kept readings". An empty file (0 bytes) is
  // no readings kept and no warning.
  std::string warning;
  // The readings (HealthState.readings); empty when missing or not used.
  v1::Inventory readings;
};

// Reads the health file at `path`; never fails: a file that cannot be used is a warning.
HealthFileContents ReadHealthFile(const std::string& path);

// Replaces the file with `readings` (placement::FaultReadings; empty: nothing kept) atomically,
// mode 0600 (WriteStateFile, lease_file.h: its errors).
absl::Status WriteHealthFile(const std::string& path, const v1::Inventory& readings);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_HEALTH_FILE_H_
