#include "server/service/leases.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "server/common/atomic_file.h"
#include "server/common/host_file.h"
#include "server/service/lease_state.pb.h"

namespace devplace::service {
namespace {

// LeaseState.version this daemon writes and reads.
constexpr uint32_t kLeaseStateVersion = 1;

// How often process leases are re-checked by their /proc start time (the pidfds answer at once).
constexpr absl::Duration kCheckEvery = absl::Seconds(1);

// At most 64 KiB of a /proc file ("" when it cannot be read, e.g. the process has ended).
std::string ReadSmallFile(const std::string& path) {
  return ReadHostFile(path, 64 << 10, HostFileLimit::kTruncate).value_or("");
}

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

int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

// Whether the process `holder` names still runs (same pid, same start time).
bool Alive(const ProcessIdentity& holder) {
  const std::optional<ProcessIdentity> now = ReadProcess(holder.pid);
  return now.has_value() && now->start_time == holder.start_time;
}

// Whether any running process of process group `pgid` is left (Linux does not give a new process the id of
// a group that still has members, so a member found is one of that group).
bool GroupAlive(pid_t pgid) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return true;  // cannot tell: keep the lease
  bool alive = false;
  while (const dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    const std::optional<ProcessIdentity> p = ReadProcess(pid);
    if (p && p->pgid == pgid && p->state != 'Z') {  // a zombie has ended: it runs on no device
      alive = true;
      break;
    }
  }
  closedir(proc);
  return alive;
}

std::string HolderText(const v1::LeaseInfo& lease, absl::Time expires) {
  switch (lease.holder()) {
    // No pid: the text reaches every caller's refusal, and pids are only for privileged callers.
    case v1::LEASE_HOLDER_PROCESS:
      return "a process's lease";
    case v1::LEASE_HOLDER_PARENT:
      return "a shell's lease";
    case v1::LEASE_HOLDER_PROCESS_GROUP:
      return "a process group's lease (devplace run)";
    default:
      return absl::StrCat("a lease until ", absl::FormatTime("%Y-%m-%d %H:%M:%SZ", expires, absl::UTCTimeZone()));
  }
}

}  // namespace

std::optional<ProcessIdentity> ReadProcess(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');  // the command may hold spaces and parentheses
  if (paren == std::string::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // After the command: state (3), ppid (4), ..., starttime (22).
  ProcessIdentity id;
  id.pid = pid;
  int ppid = 0;
  int pgid = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[1], &ppid) || !absl::SimpleAtoi(fields[2], &pgid) ||
      !absl::SimpleAtoi(fields[19], &id.start_time)) {
    return std::nullopt;
  }
  id.ppid = ppid;
  id.pgid = pgid;
  if (!fields[0].empty()) id.state = fields[0][0];
  const std::string status = ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    const std::vector<absl::string_view> ids = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid = 0;
    if (ids.size() < 2 || !absl::SimpleAtoi(ids[1], &uid)) return std::nullopt;
    id.uid = uid;
    return id;
  }
  return std::nullopt;
}

LeaseTable::LeaseTable(std::function<void()> on_release) : LeaseTable([&on_release] {
  LeaseTableOptions options;
  options.on_release = std::move(on_release);
  return options;
}()) {}

LeaseTable::LeaseTable(LeaseTableOptions options) : options_(std::move(options)) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  watcher_ = std::thread([this] { Watch(); });
}

LeaseTable::~LeaseTable() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  watcher_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [id, lease] : leases_) Close(lease);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void LeaseTable::Close(Lease& lease) {
  if (lease.pidfd >= 0) close(lease.pidfd);
  lease.pidfd = -1;
}

placement::PickOutcome LeaseTable::PickAndHold(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                                               const LeaseHolderSpec& holder, std::optional<uint64_t> only_if_ended) {
  placement::PickOutcome outcome;
  const bool process = holder.kind == v1::LEASE_HOLDER_PROCESS || holder.kind == v1::LEASE_HOLDER_PARENT ||
                       holder.kind == v1::LEASE_HOLDER_PROCESS_GROUP;
  int pidfd = -1;
  if (process) {
    pidfd = OpenPidfd(holder.process.pid);
    // After the pidfd: if the pid was reused in between, the start time says so.
    if (!Alive(holder.process)) {
      if (pidfd >= 0) close(pidfd);
      outcome.status = absl::FailedPreconditionError(
          absl::StrCat("the process that would hold the lease (pid ", holder.process.pid, ") has exited"));
      return outcome;
    }
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
          leased.push_back({d.row(), d.pci_bus_id(), d.sub_device(), d.partition_uuid(),
                            HolderText(lease.info, lease.expires)});
        }
      }
      outcome = placement::Pick(inventory, request, leased);
      if (outcome.status.ok() && options_.max_devices_per_user > 0 && holder.caller_uid && *holder.caller_uid != 0) {
        size_t held = 0;
        for (const auto& [id, lease] : leases_) {
          if (lease.info.has_uid() && lease.info.uid() == *holder.caller_uid) held += lease.info.devices_size();
        }
        const size_t wanted = static_cast<size_t>(outcome.response.lease().devices_size());
        if (held + wanted > static_cast<size_t>(options_.max_devices_per_user)) {
          outcome = placement::PickOutcome();
          outcome.status = absl::ResourceExhaustedError(absl::StrCat(
              "uid ", *holder.caller_uid, " holds ", held, " leased device(s) and asked for ", wanted, " more; each "
              "user may hold at most ", options_.max_devices_per_user, " at once (devplaced "
              "--max_leased_devices_per_user); release one (`devplace release --lease_id=ID`) or wait for a job to end"));
          outcome.status.SetPayload(kOverUserCapPayload, absl::Cord("1"));
        }
      }
      if (outcome.status.ok()) {
        Lease lease;
        lease.holder = holder;
        lease.order = next_order_++;
        v1::LeaseInfo& info = lease.info;
        info = outcome.response.lease();  // the devices
        std::string id = NewLeaseId();
        while (leases_.count(id) > 0) id = NewLeaseId();
        info.set_lease_id(id);
        info.set_holder(holder.kind);
        if (process) info.set_pid(static_cast<uint32_t>(holder.process.pid));
        if (holder.caller_uid) info.set_uid(*holder.caller_uid);
        *info.mutable_created_at() = ToTimestamp(now);
        if (!process) {
          lease.expires = now + holder.ttl;
          *info.mutable_expires_at() = ToTimestamp(lease.expires);
        }
        lease.pidfd = pidfd;
        pidfd = -1;
        *outcome.response.mutable_lease() = info;
        leases_.emplace(id, std::move(lease));
        ++granted_;
        ++generation_;
      }
    }
  }
  if (pidfd >= 0) close(pidfd);
  Persist();  // the lease is on disk before the pick is answered
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);  // the watcher polls the new pidfd
  if (ended > 0 && options_.on_release) options_.on_release();
  return outcome;
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
    Close(it->second);
    leases_.erase(it);
    ++generation_;
    ++ended_;
  }
  Persist();
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
    lease.expires = now + ttl;
    *lease.info.mutable_expires_at() = ToTimestamp(lease.expires);
    info = lease.info;
    ++generation_;
  }
  Persist();  // a restart keeps the new expiry
  if (ended > 0 && options_.on_release) options_.on_release();
  return info;
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
  absl::MutexLock lock(&mu_);
  SweepLocked(absl::Now());
  std::vector<const Lease*> ordered;
  for (const auto& [id, lease] : leases_) ordered.push_back(&lease);
  std::sort(ordered.begin(), ordered.end(), [](const Lease* a, const Lease* b) { return a->order < b->order; });
  std::vector<v1::LeaseInfo> out;
  for (const Lease* l : ordered) out.push_back(l->info);
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

int LeaseTable::SweepLocked(absl::Time now) {
  int ended = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    Lease& lease = it->second;
    bool gone = false;
    if (lease.info.holder() == v1::LEASE_HOLDER_TTL) {
      gone = now >= lease.expires;
    } else if (lease.pidfd >= 0) {
      pollfd p{lease.pidfd, POLLIN, 0};
      gone = poll(&p, 1, 0) > 0 || !Alive(lease.holder.process);
    } else {
      gone = !Alive(lease.holder.process);
    }
    if (gone && lease.info.holder() == v1::LEASE_HOLDER_PROCESS_GROUP && GroupAlive(lease.holder.process.pid)) {
      Close(lease);  // the leader's pidfd stays readable: the group is checked every second instead
      gone = false;
    }
    if (gone) {
      Close(lease);
      it = leases_.erase(it);
      ++ended;
      ++generation_;
      ++ended_;
    } else {
      ++it;
    }
  }
  return ended;
}

int LeaseTable::Sweep() {
  int ended = 0;
  {
    absl::MutexLock lock(&mu_);
    ended = SweepLocked(absl::Now());
  }
  if (ended > 0) Persist();
  if (ended > 0 && options_.on_release) options_.on_release();
  return ended;
}

void LeaseTable::Persist() {
  absl::MutexLock write(&write_mu_);
  if (path_.empty()) return;
  state::LeaseState file;
  file.set_version(kLeaseStateVersion);
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = generation_;
    if (generation == written_generation_) return;  // a later writer already wrote this table
    for (const auto& [id, lease] : leases_) {
      state::HeldLease& held = *file.add_leases();
      *held.mutable_info() = lease.info;
      held.set_start_time(lease.holder.process.start_time);
      held.set_process_uid(lease.holder.process.uid);
    }
  }
  const absl::Status written = WriteFileAtomically(path_, file.SerializeAsString(), 0600);
  if (written.ok()) {
    written_generation_ = generation;
  } else if (options_.on_write_error) {
    options_.on_write_error(written);
  }
}

namespace {

// The lease file's content when it is the daemon's own, else why not.
absl::StatusOr<std::string> ReadLeaseFile(const std::string& path, bool& found) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::string();
    return HostErrnoStatus(errno, "cannot stat", path);
  }
  found = true;
  if (S_ISLNK(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is a symbolic link"));
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is owned by uid ", st.st_uid, ", not by devplaced's uid ", geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is writable by group or others (mode %04o)", path, st.st_mode & 07777));
  }
  return ReadHostFile(path, kMaxLeaseFileBytes, HostFileLimit::kError);
}

}  // namespace

RestoreReport LeaseTable::Restore(const std::string& path) {
  RestoreReport report;
  absl::StatusOr<std::string> bytes = ReadLeaseFile(path, report.found);
  state::LeaseState file;
  if (!bytes.ok()) {
    report.warning = absl::StrCat(bytes.status().message(), "; starting with no leases");
  } else if (!file.ParseFromString(*bytes)) {
    report.warning = absl::StrCat(path, " is not a lease table (corrupt or another format); starting with no leases");
  } else if (report.found && file.version() != kLeaseStateVersion) {
    report.warning = absl::StrCat(path, " has lease table version ", file.version(), ", this devplaced reads version ",
                                  kLeaseStateVersion, "; starting with no leases");
  }
  if (!report.warning.empty()) file.Clear();
  const absl::Time now = absl::Now();
  int ended = 0;
  // Oldest first, as List() gives them.
  std::vector<const state::HeldLease*> ordered;
  for (const state::HeldLease& held : file.leases()) ordered.push_back(&held);
  std::stable_sort(ordered.begin(), ordered.end(), [](const state::HeldLease* a, const state::HeldLease* b) {
    const google::protobuf::Timestamp &x = a->info().created_at(), &y = b->info().created_at();
    return x.seconds() != y.seconds() ? x.seconds() < y.seconds() : x.nanos() < y.nanos();
  });
  {
    absl::MutexLock lock(&mu_);
    for (const state::HeldLease* entry : ordered) {
      const state::HeldLease& held = *entry;
      const v1::LeaseInfo& info = held.info();
      const std::string name = absl::StrCat("lease ", info.lease_id());
      if (info.lease_id().empty() || leases_.count(info.lease_id()) > 0 || info.devices_size() == 0 ||
          leases_.size() >= kMaxLeases) {
        report.dropped.push_back(absl::StrCat(name, ": malformed, repeated or past the limit of ", kMaxLeases));
        continue;
      }
      Lease lease;
      lease.info = info;
      lease.order = next_order_++;
      lease.holder.kind = info.holder();
      if (info.has_uid()) lease.holder.caller_uid = info.uid();
      const bool group = info.holder() == v1::LEASE_HOLDER_PROCESS_GROUP;
      if (info.holder() == v1::LEASE_HOLDER_PROCESS || info.holder() == v1::LEASE_HOLDER_PARENT || group) {
        lease.holder.process.pid = static_cast<pid_t>(info.pid());
        lease.holder.process.pgid = group ? lease.holder.process.pid : 0;
        lease.holder.process.start_time = held.start_time();
        lease.holder.process.uid = held.process_uid();
        const int pidfd = info.pid() > 0 ? OpenPidfd(lease.holder.process.pid) : -1;
        const std::optional<ProcessIdentity> now_running = ReadProcess(lease.holder.process.pid);
        const bool same = now_running && now_running->start_time == held.start_time() &&
                          now_running->uid == held.process_uid();
        if (group && !same && info.pid() > 1 && GroupAlive(lease.holder.process.pid)) {
          // The leader ended while the daemon was down, but the job's group lives on: kept, and
          // checked by its group every second (as SweepLocked does).
          if (pidfd >= 0) close(pidfd);
          leases_.emplace(info.lease_id(), std::move(lease));
          ++report.kept;
          continue;
        }
        if (!now_running) {
          if (pidfd >= 0) close(pidfd);
          report.dropped.push_back(absl::StrCat(name, ": its holder, pid ", info.pid(), ", has exited"));
          continue;
        }
        if (now_running->start_time != held.start_time() || now_running->uid != held.process_uid()) {
          if (pidfd >= 0) close(pidfd);
          report.dropped.push_back(absl::StrCat(name, ": pid ", info.pid(), " is another process now (started at tick ",
                                                now_running->start_time, ", the holder at ", held.start_time(), ")"));
          continue;
        }
        lease.pidfd = pidfd;
      } else if (info.holder() == v1::LEASE_HOLDER_TTL && info.has_expires_at()) {
        lease.expires = absl::FromUnixNanos(google::protobuf::util::TimeUtil::TimestampToNanoseconds(info.expires_at()));
        if (lease.expires <= now) {
          report.dropped.push_back(absl::StrCat(name, ": its time to live passed at ",
                                                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", lease.expires, absl::UTCTimeZone())));
          continue;
        }
      } else {
        report.dropped.push_back(absl::StrCat(name, ": malformed (holder ", v1::LeaseHolder_Name(info.holder()), ")"));
        continue;
      }
      leases_.emplace(info.lease_id(), std::move(lease));
      ++report.kept;
    }
    ++generation_;  // the file is rewritten with what was kept (or created empty)
    ended = static_cast<int>(report.dropped.size());
  }
  {
    absl::MutexLock write(&write_mu_);
    path_ = path;
  }
  Persist();
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);  // the watcher polls the restored pidfds
  if (ended > 0 && options_.on_release) options_.on_release();
  return report;
}

void LeaseTable::Watch() {
  for (;;) {
    std::vector<pollfd> fds;
    absl::Duration wait = kCheckEvery;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      for (const auto& [id, lease] : leases_) {
        if (lease.pidfd >= 0) fds.push_back({lease.pidfd, POLLIN, 0});
        if (lease.expires < absl::InfiniteFuture()) wait = std::min(wait, std::max(lease.expires - now, absl::ZeroDuration()));
      }
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1;
    if (poll(fds.data(), fds.size(), timeout_ms) > 0 && (fds.back().revents & POLLIN)) {
      uint64_t drained = 0;
      (void)!read(wake_fd_, &drained, sizeof drained);
    }
    Sweep();
  }
}

}  // namespace devplace::service
