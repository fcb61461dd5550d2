// The Daemon's state files beside the lease file: the lock of their directory, held for the
// daemon's life, and the health file (docs/PROBE.md "A reading that survives a restart"): the FAULT
// and LOST readings of each new inventory are written beside the lease file when they change, and
// the first inventory after a restart is carried from them.
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/daemon/daemon.h"
#include "server/placement/health_carry.h"
#include "server/service/health_file.h"
#include "server/service/lease_file.h"
#include "spdlog/spdlog.h"

namespace devplace::daemon {
namespace {

// The number of counters in FaultReadings' result.
int CountReadings(const v1::Inventory& readings) {
  int n = 0;
  for (const v1::Backend& b : readings.backends()) {
    for (const v1::Device& d : b.devices()) n += d.health_counters_size();
  }
  return n;
}

}  // namespace

absl::Status Daemon::LockStateFiles() {
  const std::string& lease_file = config_.lease_state_file;
  if (lease_file.empty() || state_lock_settled_) return absl::OkStatus();
  absl::StatusOr<service::StateDirectoryLock> lock = service::StateDirectoryLock::Take(lease_file);
  if (absl::IsNotFound(lock.status())) return absl::OkStatus();  // nothing there to read yet
  state_lock_settled_ = true;
  if (lock.ok()) {
    spdlog::info("event=lease_state_lock file={} pid={}", lock->path(), getpid());
    state_lock_.emplace(*std::move(lock));
  } else if (absl::IsUnavailable(lock.status())) {
    spdlog::error("event=lease_state_locked file={} error=\"{}\"", lease_file, absl::CHexEscape(lock.status().message()));
    return lock.status();
  } else {
    spdlog::warn("event=lease_state_lock_failed file={} error=\"{}\" (a second devplaced on this file would not be "
                 "refused)",
                 lease_file, absl::CHexEscape(lock.status().message()));
  }
  return absl::OkStatus();
}

void Daemon::LoadHealthFile(inventory::StoreOptions& options) {
  const std::string& lease_file = config_.lease_state_file;
  if (lease_file.empty()) {
    spdlog::info("event=health_state file=none (without a lease file, a kept FAULT reading ends with devplaced)");
    return;
  }
  health_file_ = service::HealthFileBeside(lease_file);
  service::HealthFileContents contents = service::ReadHealthFile(health_file_);
  absl::MutexLock lock(&health_mu_);
  if (!contents.warning.empty()) {
    spdlog::warn("event=health_state_ignored file={} error=\"{}\"", health_file_, absl::CHexEscape(contents.warning));
    health_file_unused_ = true;  // rewritten with the first inventory's readings
    return;
  }
  spdlog::info("event=health_state file={} found={} readings={}", health_file_, contents.found,
               CountReadings(contents.readings));
  health_written_ = contents.readings;
  if (contents.readings.backends_size() > 0) {
    options.carry_from = std::make_shared<const v1::Inventory>(std::move(contents.readings));
  }
}

void Daemon::SaveHealthReadings(const v1::Inventory& snapshot) {
  if (health_file_.empty()) return;
  v1::Inventory readings = placement::FaultReadings(snapshot);
  absl::MutexLock lock(&health_mu_);
  google::protobuf::util::MessageDifferencer same;  // the same readings, whichever probe read them
  same.IgnoreField(v1::Inventory::descriptor()->FindFieldByNumber(v1::Inventory::kProbedAtFieldNumber));
  if (!health_file_unused_ && same.Compare(health_written_, readings)) return;
  const absl::Status written = service::WriteHealthFile(health_file_, readings);
  if (!written.ok()) {
    spdlog::warn("event=health_state_write_failed file={} error=\"{}\"", health_file_,
                 absl::CHexEscape(written.message()));
    return;
  }
  spdlog::info("event=health_state_written file={} revision={} readings={}", health_file_, snapshot.revision(),
               CountReadings(readings));
  health_written_ = std::move(readings);
  health_file_unused_ = false;
}

}  // namespace devplace::daemon
