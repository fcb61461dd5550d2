#include "server/service/leases.h"

#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "server/common/host_file.h"

namespace devplace::service {
namespace {

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

LeaseTable::LeaseTable(std::function<void()> on_release) : on_release_(std::move(on_release)) {
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
                                               const LeaseHolderSpec& holder) {
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
    if (leases_.size() >= kMaxLeases) {
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
      }
    }
  }
  if (pidfd >= 0) close(pidfd);
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);  // the watcher polls the new pidfd
  if (ended > 0 && on_release_) on_release_();
  return outcome;
}

absl::StatusOr<v1::LeaseInfo> LeaseTable::Release(const std::string& lease_id) {
  v1::LeaseInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) {
      return absl::NotFoundError(absl::StrCat("lease_id: no lease ", lease_id, " (unknown, released, or ended with "
                                              "its process or time to live)"));
    }
    info = it->second.info;
    Close(it->second);
    leases_.erase(it);
  }
  if (on_release_) on_release_();
  return info;
}

absl::StatusOr<v1::LeaseInfo> LeaseTable::KeepAlive(const std::string& lease_id, absl::Duration ttl) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  SweepLocked(now);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(absl::StrCat("lease_id: no lease ", lease_id, " (unknown, released, or expired)"));
  }
  Lease& lease = it->second;
  if (lease.info.holder() != v1::LEASE_HOLDER_TTL) {
    return absl::FailedPreconditionError(absl::StrCat("lease ", lease_id, " is held for a process and lasts as long "
                                                      "as it; only a TTL lease is kept alive"));
  }
  lease.expires = now + ttl;
  *lease.info.mutable_expires_at() = ToTimestamp(lease.expires);
  return lease.info;
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
  if (ended > 0 && on_release_) on_release_();
  return ended;
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

void RedactLease(v1::LeaseInfo& lease) {
  lease.clear_lease_id();
  lease.clear_pid();
}

namespace {
template <typename Fn>
void ForEachUsage(v1::Inventory& inventory, Fn fn) {
  for (v1::Backend& b : *inventory.mutable_backends()) {
    for (v1::Device& d : *b.mutable_devices()) {
      if (d.has_usage()) fn(*d.mutable_usage());
      for (v1::Partition& p : *d.mutable_partitions()) {
        if (p.has_usage()) fn(*p.mutable_usage());
      }
    }
  }
}
}  // namespace

void RedactInventory(v1::Inventory& inventory) {
  ForEachUsage(inventory, [](v1::DeviceUsage& usage) {
    for (v1::DeviceUsageProcess& p : *usage.mutable_processes()) {
      p.clear_pid();
      p.clear_uid();
    }
  });
  for (v1::LeaseInfo& lease : *inventory.mutable_leases()) RedactLease(lease);
}

bool HasPrivateUsage(const v1::Inventory& inventory) {
  if (inventory.leases_size() > 0) return true;
  for (const v1::Backend& b : inventory.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (d.usage().processes_size() > 0) return true;
      for (const v1::Partition& p : d.partitions()) {
        if (p.usage().processes_size() > 0) return true;
      }
    }
  }
  return false;
}

}  // namespace devplace::service
