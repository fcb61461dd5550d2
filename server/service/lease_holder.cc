#include "server/service/lease_holder.h"

#include <dirent.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/time_util.h"
#include "server/common/host_file.h"

namespace devplace::service {
namespace {

// At most 64 KiB of a /proc file ("" when it cannot be read, e.g. the process has ended).
std::string ReadSmallFile(const std::string& path) {
  return ReadHostFile(path, 64 << 10, HostFileLimit::kTruncate).value_or("");
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

bool IsProcessKind(v1::LeaseHolder kind) {
  return kind == v1::LEASE_HOLDER_PROCESS || kind == v1::LEASE_HOLDER_PARENT || kind == v1::LEASE_HOLDER_PROCESS_GROUP;
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

absl::StatusOr<LeaseHolder> LeaseHolder::ForNewLease(const LeaseHolderSpec& spec) {
  LeaseHolder holder(spec);
  if (holder.is_process()) {
    holder.pidfd_ = OpenPidfd(spec.process.pid);
    // After the pidfd: if the pid was reused in between, the start time says so.
    if (!Alive(spec.process)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the process that would hold the lease (pid ", spec.process.pid, ") has exited"));
    }
  }
  return holder;
}

absl::StatusOr<LeaseHolder> LeaseHolder::ForRestoredLease(const v1::LeaseInfo& info, uint64_t start_time,
                                                          uint32_t process_uid, absl::Time now) {
  LeaseHolderSpec spec;
  spec.kind = info.holder();
  if (info.has_uid()) spec.caller_uid = info.uid();
  const bool group = info.holder() == v1::LEASE_HOLDER_PROCESS_GROUP;
  if (IsProcessKind(info.holder())) {
    spec.process.pid = static_cast<pid_t>(info.pid());
    spec.process.pgid = group ? spec.process.pid : 0;
    spec.process.start_time = start_time;
    spec.process.uid = process_uid;
    LeaseHolder holder(spec);
    holder.pidfd_ = info.pid() > 0 ? OpenPidfd(spec.process.pid) : -1;
    const std::optional<ProcessIdentity> now_running = ReadProcess(spec.process.pid);
    const bool same = now_running && now_running->start_time == start_time && now_running->uid == process_uid;
    if (group && !same && info.pid() > 1 && GroupAlive(spec.process.pid)) {
      // The leader ended while the daemon was down, but the job's group lives on: kept, and
      // checked by its group every second (as Ended does).
      holder.ClosePidfd();
      return holder;
    }
    if (!now_running) {
      return absl::FailedPreconditionError(absl::StrCat("its holder, pid ", info.pid(), ", has exited"));
    }
    if (!same) {
      return absl::FailedPreconditionError(absl::StrCat("pid ", info.pid(), " is another process now (started at tick ",
                                                        now_running->start_time, ", the holder at ", start_time, ")"));
    }
    return holder;
  }
  if (info.holder() == v1::LEASE_HOLDER_TTL && info.has_expires_at()) {
    LeaseHolder holder(spec);
    holder.expires_ =
        absl::FromUnixNanos(google::protobuf::util::TimeUtil::TimestampToNanoseconds(info.expires_at()));
    if (holder.expires_ <= now) {
      return absl::FailedPreconditionError(absl::StrCat(
          "its time to live passed at ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", holder.expires_, absl::UTCTimeZone())));
    }
    return holder;
  }
  return absl::FailedPreconditionError(absl::StrCat("malformed (holder ", v1::LeaseHolder_Name(info.holder()), ")"));
}

LeaseHolder::LeaseHolder(LeaseHolder&& other) noexcept
    : spec_(std::move(other.spec_)), pidfd_(std::exchange(other.pidfd_, -1)), expires_(other.expires_) {}

LeaseHolder& LeaseHolder::operator=(LeaseHolder&& other) noexcept {
  if (this != &other) {
    ClosePidfd();
    spec_ = std::move(other.spec_);
    pidfd_ = std::exchange(other.pidfd_, -1);
    expires_ = other.expires_;
  }
  return *this;
}

LeaseHolder::~LeaseHolder() { ClosePidfd(); }

void LeaseHolder::ClosePidfd() {
  if (pidfd_ >= 0) close(pidfd_);
  pidfd_ = -1;
}

bool LeaseHolder::is_process() const { return IsProcessKind(spec_.kind); }

bool LeaseHolder::Ended(absl::Time now) {
  bool gone = false;
  if (spec_.kind == v1::LEASE_HOLDER_TTL) {
    gone = now >= expires_;
  } else if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    gone = poll(&p, 1, 0) > 0 || !Alive(spec_.process);
  } else {
    gone = !Alive(spec_.process);
  }
  if (gone && spec_.kind == v1::LEASE_HOLDER_PROCESS_GROUP && GroupAlive(spec_.process.pid)) {
    ClosePidfd();  // the leader's pidfd stays readable: the group is checked every second instead
    gone = false;
  }
  return gone;
}

std::string LeaseHolder::Description() const {
  switch (spec_.kind) {
    // No pid: the text reaches every caller's refusal, and pids are only for privileged callers.
    case v1::LEASE_HOLDER_PROCESS:
      return "a process's lease";
    case v1::LEASE_HOLDER_PARENT:
      return "a shell's lease";
    case v1::LEASE_HOLDER_PROCESS_GROUP:
      return "a process group's lease (devplace run)";
    default:
      return absl::StrCat("a lease until ", absl::FormatTime("%Y-%m-%d %H:%M:%SZ", expires_, absl::UTCTimeZone()));
  }
}

}  // namespace devplace::service
