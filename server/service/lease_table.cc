#include "server/service/lease_table.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"

namespace devplace::service {
namespace {

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  return google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

std::string NewLeaseId() {
  unsigned char bytes[16] = {};
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof bytes) {  // no getrandom: time and address bits, still unique in this process
    const uint64_t t = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
    static uint64_t counter = 0;
    for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(t >> (8 * i));
    for (size_t i = 0; i < 8; ++i) bytes[8 + i] = static_cast<unsigned char>(++counter >> (8 * i));
  }
  std::string id;
  for (unsigned char b : bytes) absl::StrAppendFormat(&id, "%02x", b);
  return id;
}

}  // namespace

LeaseTable::LeaseTable(std::function<void()> on_release) : LeaseTable([&on_release] {
  LeaseTableOptions options;
  options.on_release = std::move(on_release);
  return options;
}()) {}

LeaseTable::LeaseTable(LeaseTableOptions options)
    : options_(std::move(options)), watcher_([this] { return WatcherWaits(); }, [this] { Sweep(); }) {}

// watcher_, the last member, is destroyed first: its thread is stopped before the leases close
// their pidfds.
LeaseTable::~LeaseTable() = default;

LeaseWatcher::Waits LeaseTable::WatcherWaits() const {
  LeaseWatcher::Waits waits;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, lease] : leases_) {
    if (lease.holder.pidfd() >= 0) waits.pidfds.push_back(lease.holder.pidfd());
    waits.next_expiry = std::min(waits.next_expiry, lease.holder.expires());
  }
  return waits;
}

absl::Status LeaseTable::CheckUserCap(std::optional<uid_t> caller_uid, size_t wanted) const {
  if (options_.max_devices_per_user <= 0 || !caller_uid || *caller_uid == 0) return absl::OkStatus();
  size_t held = 0;
  for (const auto& [id, lease] : leases_) {
    if (lease.info.has_uid() && lease.info.uid() == *caller_uid) held += lease.info.devices_size();
  }
  const size_t cap = static_cast<size_t>(options_.max_devices_per_user);
  if (held + wanted <= cap) return absl::OkStatus();
  // Past the cap by itself, the pick can never be answered: no release or wait helps.
  absl::Status over = absl::ResourceExhaustedError(
      wanted > cap ? absl::StrCat("asked for ", wanted, " devices; each user may hold at most ", cap,
                                  " at once on this host (devplaced --max_leased_devices_per_user), so no release or "
                                  "wait makes room for it: ask for at most ",
                                  cap, ", or ask the host's operator for a higher cap")
                   : absl::StrCat("uid ", *caller_uid, " holds ", held, " leased device(s) and asked for ", wanted,
                                  " more; each user may hold at most ", cap,
                                  " at once (devplaced --max_leased_devices_per_user); release one (`devplace release "
                                  "--lease_id=ID`, your leases' ids are in `devplace inventory`) or wait for a job "
                                  "to end"));
  over.SetPayload(kOverUserCapPayload, absl::Cord("1"));
  return over;
}

placement::PickOutcome LeaseTable::PickAndHold(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                                               const LeaseHolderSpec& holder, std::optional<uint64_t> only_if_ended,
                                               const std::vector<placement::LeasedUnit>& held_back) {
  placement::PickOutcome outcome;
  absl::StatusOr<LeaseHolder> held = LeaseHolder::ForNewLease(holder);
  if (!held.ok()) {
    outcome.status = held.status();
    return outcome;
  }
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    ended = SweepLocked(now);
    if (only_if_ended && *only_if_ended != ended_) {
      outcome.status = absl::AbortedError("leases ended since this round of waiting picks began: earlier waiters first");
    } else if (leases_.size() >= kMaxLeases) {
      outcome.status = absl::ResourceExhaustedError(
          absl::StrCat("devplaced holds ", leases_.size(), " leases, its limit; release some (LeaseRelease)"));
    } else {
      std::vector<placement::LeasedUnit> leased;
      for (const auto& [id, lease] : leases_) {
        for (const v1::LeaseDevice& d : lease.info.devices()) {
          leased.push_back({d.row(), d.pci_bus_id(), d.sub_device(), d.partition_uuid(), lease.holder.Description()});
        }
      }
      leased.insert(leased.end(), held_back.begin(), held_back.end());
      outcome = placement::Pick(inventory, request, leased);
      if (outcome.status.ok() || outcome.no_free_device) {  // a pick of count units leases count devices
        const size_t wanted = outcome.status.ok() ? static_cast<size_t>(outcome.response.lease().devices_size())
                                                  : std::max<size_t>(1, request.count());
        absl::Status capped = CheckUserCap(holder.caller_uid, wanted);
        if (!capped.ok()) {
          outcome = placement::PickOutcome();
          outcome.status = std::move(capped);
        }
      }
      if (outcome.status.ok()) {
        v1::LeaseInfo info = outcome.response.lease();  // the devices
        std::string id = NewLeaseId();
        while (leases_.count(id) > 0) id = NewLeaseId();
        info.set_lease_id(id);
        info.set_holder(holder.kind);
        if (held->is_process()) info.set_pid(static_cast<uint32_t>(holder.process.pid));
        if (holder.caller_uid) info.set_uid(*holder.caller_uid);
        *info.mutable_created_at() = ToTimestamp(now);
        if (!held->is_process()) {
          held->ExpireAt(now + holder.ttl);
          *info.mutable_expires_at() = ToTimestamp(held->expires());
        }
        *outcome.response.mutable_lease() = info;
        leases_.emplace(id, Lease{std::move(info), *std::move(held), next_order_++});
        ++granted_;
        ++generation_;
      }
    }
  }
  const absl::Status durable = Persist();  // the lease is on disk before the pick is answered
  if (outcome.status.ok() && !durable.ok()) {
    Unlease(outcome.response.lease().lease_id());
    outcome = placement::PickOutcome();
    outcome.status = NotDurable(durable);
    ++ended;
  }
  watcher_.Wake();   // the watcher polls the new pidfd
  AfterEnding(ended);
  return outcome;
}

void LeaseTable::Unlease(const std::string& lease_id) {
  {
    absl::MutexLock lock(&mu_);
    if (leases_.erase(lease_id) == 0) return;  // closes its pidfd
    --granted_;
    ++generation_;
    ++ended_;  // its devices are free again: waiting picks try again from the earliest
  }
  (void)Persist();  // best effort: a write that succeeded meanwhile may hold it until the next one
}

absl::Status LeaseTable::NotDurable(const absl::Status& error) {
  std::string path;
  {
    absl::MutexLock write(&write_mu_);
    if (file_) path = file_->path();
  }
  absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
      "devplaced cannot write its lease file ", path, " (", error.message(), "), and a lease it could not write "
      "would be forgotten by a restart and its devices handed to another job: nothing is leased. For the operator: "
      "free space on that filesystem, remove what stands at that name if it is not devplaced's file, or make the "
      "directory devplaced's own (owned by root or devplaced's user, writable by no one else); or start devplaced "
      "with --lease_state_file=PATH in such a directory, or --lease_state_file=none (leases in memory only)"));
  refused.SetPayload(kLeaseNotDurablePayload, absl::Cord("1"));
  return refused;
}

absl::Status LeaseTable::CheckOwner(const v1::LeaseInfo& lease, const LeaseCaller& caller) {
  if (!lease.has_uid() || (caller.uid && (*caller.uid == 0 || *caller.uid == lease.uid()))) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "lease_id: lease ", lease.lease_id(), " belongs to uid ", lease.uid(), "; only that user or root may release "
      "it or keep it alive", caller.uid ? absl::StrCat(" (the caller is uid ", *caller.uid, ")")
                                        : " (the caller's user is known only over the unix socket)"));
}

absl::StatusOr<v1::LeaseInfo> LeaseTable::Release(const std::string& lease_id, const LeaseCaller& caller) {
  v1::LeaseInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      return absl::NotFoundError(absl::StrCat("lease_id: no lease ", lease_id, " (unknown, released, or ended with "
                                              "its process or time to live)"));
    }
    if (absl::Status owner = CheckOwner(it->second.info, caller); !owner.ok()) return owner;
    info = it->second.info;
    leases_.erase(it);  // closes its pidfd
    ++generation_;
    ++ended_;
  }
  (void)Persist();
  if (options_.on_release) options_.on_release();
  return info;
}

absl::StatusOr<v1::LeaseInfo> LeaseTable::KeepAlive(const std::string& lease_id, absl::Duration ttl,
                                                    const LeaseCaller& caller) {
  v1::LeaseInfo info;
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    ended = SweepLocked(now);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      return absl::NotFoundError(absl::StrCat("lease_id: no lease ", lease_id, " (unknown, released, or expired)"));
    }
    Lease& lease = it->second;
    if (absl::Status owner = CheckOwner(lease.info, caller); !owner.ok()) return owner;
    if (lease.info.holder() != v1::LEASE_HOLDER_TTL) {
      return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is held for a process and lasts as long "
                                                        "as it; only a TTL lease is kept alive"));
    }
    lease.holder.ExpireAt(now + ttl);
    *lease.info.mutable_expires_at() = ToTimestamp(lease.holder.expires());
    info = lease.info;
    ++generation_;
  }
  (void)Persist();  // a restart keeps the new expiry
  AfterEnding(ended);
  return info;
}

void LeaseTable::SetWaiters(std::vector<state::Waiter> waiters) {
  {
    absl::MutexLock lock(&mu_);
    waiters_ = std::move(waiters);
    ++generation_;
  }
  (void)Persist();
}

void LeaseTable::CloseFile() {
  absl::MutexLock write(&write_mu_);
  file_.reset();
}

size_t LeaseTable::DevicesOf(uid_t uid) const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, lease] : leases_) {
    if (lease.info.has_uid() && lease.info.uid() == uid) n += lease.info.devices_size();
  }
  return n;
}

std::vector<v1::LeaseInfo> LeaseTable::List() {
  std::vector<v1::LeaseInfo> out;
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    ended = SweepLocked(absl::Now());
    std::vector<const Lease*> ordered;
    for (const auto& [id, lease] : leases_) ordered.push_back(&lease);
    std::sort(ordered.begin(), ordered.end(), [](const Lease* a, const Lease* b) { return a->order < b->order; });
    for (const Lease* l : ordered) out.push_back(l->info);
  }
  if (ended > 0) {  // as Sweep: on disk, and waiting picks and the trail are told
    (void)Persist();
    AfterEnding(ended);
  }
  return out;
}

size_t LeaseTable::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

uint64_t LeaseTable::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

uint64_t LeaseTable::granted() const {
  absl::MutexLock lock(&mu_);
  return granted_;
}

int LeaseTable::SweepLocked(absl::Time now, bool wake_for_groups, LeaseHolder::Check check) {
  int ended = 0;
  bool group_to_find = false;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.holder.Ended(now, check)) {
      if (options_.on_end) just_ended_.emplace_back(std::move(it->second.info), !it->second.holder.is_process());
      it = leases_.erase(it);  // closes its pidfd
      ++ended;
      ++generation_;
      ++ended_;
    } else {
      group_to_find = group_to_find || it->second.holder.GroupToFind().has_value();
      ++it;
    }
  }
  if (group_to_find && wake_for_groups) watcher_.Wake();  // its thread looks for the group outside this lock
  return ended;
}

void LeaseTable::AfterEnding(int ended) {
  std::vector<std::pair<v1::LeaseInfo, bool>> told;
  {
    absl::MutexLock lock(&mu_);
    told.swap(just_ended_);
  }
  for (const auto& [lease, expired] : told) options_.on_end(lease, expired);
  if (ended > 0 && options_.on_release) options_.on_release();
}

int LeaseTable::Sweep() {
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    ended = SweepLocked(absl::Now(), /*wake_for_groups=*/false, LeaseHolder::Check::kFull);  // looked for right below
  }
  if (FindGroups() > 0) {
    // A member that ended before it was watched leaves its group to the next sweep (within a
    // second, or at the next pidfd event): a group whose processes churn costs one pass a second.
    absl::MutexLock lock(&mu_);
    ended += SweepLocked(absl::Now(), /*wake_for_groups=*/false, LeaseHolder::Check::kFull);
  }
  if (ended > 0) (void)Persist();
  AfterEnding(ended);
  return ended;
}

int LeaseTable::FindGroups() {
  std::map<std::string, pid_t> wanted;  // lease id -> its group
  std::set<pid_t> pgids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) {
      if (const std::optional<pid_t> pgid = lease.holder.GroupToFind()) {
        wanted.emplace(id, *pgid);
        pgids.insert(*pgid);
      }
    }
  }
  if (wanted.empty()) return 0;
  // Outside the lock: one pass over /proc costs one read per process of the host.
  const std::map<pid_t, ProcessIdentity> members = FindGroupMembers(pgids);
  absl::MutexLock lock(&mu_);
  for (const auto& [id, pgid] : wanted) {
    auto it = leases_.find(id);
    if (it == leases_.end()) continue;  // released meanwhile
    auto member = members.find(pgid);
    it->second.holder.TakeGroupMember(member == members.end() ? std::nullopt
                                                              : std::optional<ProcessIdentity>(member->second));
  }
  return static_cast<int>(wanted.size());
}

absl::Status LeaseTable::Persist() {
  absl::MutexLock write(&write_mu_);
  if (!file_) return absl::OkStatus();
  std::vector<state::HeldLease> held;
  std::vector<state::Waiter> waiters;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = generation_;
    if (generation == written_generation_) return absl::OkStatus();  // a later writer already wrote this table
    held.reserve(leases_.size());
    for (const auto& [id, lease] : leases_) {
      state::HeldLease& h = held.emplace_back();
      *h.mutable_info() = lease.info;
      h.set_start_time(lease.holder.process().start_time);
      h.set_process_uid(lease.holder.process().uid);
    }
    waiters = waiters_;
  }
  const absl::Status written = file_->Write(std::move(held), std::move(waiters));
  if (written.ok()) {
    written_generation_ = generation;
  } else if (options_.on_write_error) {
    options_.on_write_error(written);
  }
  return written;
}

RestoreReport LeaseTable::Restore(const std::string& path) {
  LeaseFileContents file = ReadLeaseFile(path);
  RestoreReport& report = file.report;
  report.temporary_removed = RemoveLeaseTemporaryFiles(path);
  const absl::Time now = absl::Now();
  const std::string boot = CurrentBootId();
  // Process holders are named by pid and start time, which count from boot.
  const bool other_boot = !file.boot_id.empty() && !boot.empty() && file.boot_id != boot;
  // Waiters are processes that lived in this boot only.
  if (other_boot) report.waiters.clear();
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    waiters_ = report.waiters;
    for (const state::HeldLease& held : file.leases) {  // oldest first, as List() gives them
      const v1::LeaseInfo& info = held.info();
      const std::string name = absl::StrCat("lease ", info.lease_id());
      if (info.lease_id().empty() || leases_.count(info.lease_id()) > 0 || info.devices_size() == 0 ||
          leases_.size() >= kMaxLeases) {
        report.dropped.push_back(absl::StrCat(name, ": malformed, repeated or past the limit of ", kMaxLeases));
        continue;
      }
      if (other_boot && info.holder() != v1::LEASE_HOLDER_TTL) {
        report.dropped.push_back(absl::StrCat(name, ": the host has restarted since it was granted (boot id ",
                                              file.boot_id, ", now ", boot, "): its holder, pid ", info.pid(),
                                              ", ended with it"));
        continue;
      }
      absl::StatusOr<LeaseHolder> holder =
          LeaseHolder::ForRestoredLease(info, held.start_time(), held.process_uid(), now);
      if (!holder.ok()) {
        report.dropped.push_back(absl::StrCat(name, ": ", holder.status().message()));
        continue;
      }
      leases_.emplace(info.lease_id(), Lease{info, *std::move(holder), next_order_++});
      ++report.kept;
    }
  }
  FindGroups();
  {
    absl::MutexLock lock(&mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
      const bool group = it->second.info.holder() == v1::LEASE_HOLDER_PROCESS_GROUP;
      if (!group || it->second.holder.GroupToFind() || !it->second.holder.Ended(now)) {
        ++it;
        continue;
      }
      report.dropped.push_back(absl::StrCat("lease ", it->first, ": its holder, pid ", it->second.info.pid(),
                                            ", has exited, and no process of its group is left"));
      --report.kept;
      it = leases_.erase(it);
    }
    ++generation_;  // the file is rewritten with what was kept (or created empty)
    ended = static_cast<int>(report.dropped.size());
  }
  {
    absl::MutexLock write(&write_mu_);
    file_.emplace(path);
  }
  (void)Persist();
  watcher_.Wake();  // the watcher polls the restored pidfds
  AfterEnding(ended);
  if (ended == 0 && options_.on_release) options_.on_release();  // the count of leases held starts from those kept
  return report;
}

}  // namespace devplace::service
