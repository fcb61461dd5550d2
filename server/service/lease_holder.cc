#include "server/service/lease_holder.h"

#include <dirent.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <set>
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

// /proc/<pid>/stat's fields as ProcessIdentity holds them (uid 0), or nullopt.
std::optional<ProcessIdentity> ReadProcessStat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');  // the command may hold spaces and parentheses
  if (paren == std::string::npos) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // After the command: state (3), ppid (4), pgrp (5), ..., starttime (22).
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
  return id;
}

// Whether `p` still runs: its pidfd (when open) not readable, and its pid running with its start
// time, not a zombie (a zombie has ended: it runs on no device), in group `pgid` when given. With
// `pidfd_only` and an open pidfd, the poll alone answers: a pidfd names one process for its whole
// life (a reused pid is another process, whose end it never shows) and is readable from its exit
// on, zombie included; only the group it is in needs /proc.
bool StillRuns(const ProcessIdentity& p, int pidfd, std::optional<pid_t> pgid = std::nullopt,
               bool pidfd_only = false) {
  if (pidfd >= 0) {
    pollfd fd{pidfd, POLLIN, 0};
    if (poll(&fd, 1, 0) > 0) return false;
    if (pidfd_only) return true;
  }
  const std::optional<ProcessIdentity> now = ReadProcessStat(p.pid);
  return now.has_value() && now->start_time == p.start_time && now->state != 'Z' && (!pgid || now->pgid == *pgid);
}

bool IsProcessKind(v1::LeaseHolder kind) {
  return kind == v1::LEASE_HOLDER_PROCESS || kind == v1::LEASE_HOLDER_PARENT || kind == v1::LEASE_HOLDER_PROCESS_GROUP;
}

}  // namespace

std::optional<ProcessIdentity> ReadProcess(pid_t pid) {
  std::optional<ProcessIdentity> id = ReadProcessStat(pid);
  if (!id) return std::nullopt;
  const std::string status = ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    const std::vector<absl::string_view> ids = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid = 0;
    if (ids.size() < 2 || !absl::SimpleAtoi(ids[1], &uid)) return std::nullopt;
    id->uid = uid;
    return id;
  }
  return std::nullopt;
}

std::map<pid_t, ProcessIdentity> FindGroupMembers(const std::set<pid_t>& pgids) {
  std::map<pid_t, ProcessIdentity> found;
  if (pgids.empty()) return found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    const std::optional<ProcessIdentity> p = ReadProcessStat(pid);
    if (!p || p->state == 'Z' || pgids.count(p->pgid) == 0) continue;
    auto [it, added] = found.emplace(p->pgid, *p);
    if (!added && p->start_time < it->second.start_time) it->second = *p;  // the oldest: likely the job itself
  }
  closedir(proc);
  return found;
}

absl::StatusOr<LeaseHolder> LeaseHolder::ForNewLease(const LeaseHolderSpec& spec) {
  LeaseHolder holder(spec);
  if (holder.is_process()) {
    holder.pidfd_ = OpenPidfd(spec.process.pid);
    // After the pidfd: if the pid was reused in between, the start time says so.
    if (!StillRuns(spec.process, -1)) {
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
    // Matched on what the kernel keeps for a process's life (pid and start time), not its uid: a
    // holder that changed uid by exec is still the holder.
    const std::optional<ProcessIdentity> now_running = ReadProcess(spec.process.pid);
    if (now_running && now_running->start_time != start_time) {
      // Also for a group: the kernel gave its leader's pid to another process only once no
      // process of the group was left.
      return absl::FailedPreconditionError(absl::StrCat("pid ", info.pid(), " is another process now (started at tick ",
                                                        now_running->start_time, ", the holder at ", start_time, ")"));
    }
    if (now_running && now_running->state != 'Z') return holder;
    if (group && info.pid() > 1) {
      // The leader ended while the daemon was down; its group may live on: the table looks for it.
      holder.LeaderEnded();
      return holder;
    }
    return absl::FailedPreconditionError(absl::StrCat("its holder, pid ", info.pid(), ", has exited"));
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
    : spec_(std::move(other.spec_)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      expires_(other.expires_),
      leader_ended_(other.leader_ended_),
      group_to_find_(other.group_to_find_),
      group_ended_(other.group_ended_),
      witness_(other.witness_) {}

LeaseHolder& LeaseHolder::operator=(LeaseHolder&& other) noexcept {
  if (this != &other) {
    ClosePidfd();
    spec_ = std::move(other.spec_);
    pidfd_ = std::exchange(other.pidfd_, -1);
    expires_ = other.expires_;
    leader_ended_ = other.leader_ended_;
    group_to_find_ = other.group_to_find_;
    group_ended_ = other.group_ended_;
    witness_ = other.witness_;
  }
  return *this;
}

LeaseHolder::~LeaseHolder() { ClosePidfd(); }

void LeaseHolder::ClosePidfd() {
  if (pidfd_ >= 0) close(pidfd_);
  pidfd_ = -1;
}

bool LeaseHolder::is_process() const { return IsProcessKind(spec_.kind); }

bool LeaseHolder::Ended(absl::Time now, Check check) {
  if (spec_.kind == v1::LEASE_HOLDER_TTL) return now >= expires_;
  const bool pidfd_only = check == Check::kPidfd;
  if (!leader_ended_) {
    if (StillRuns(spec_.process, pidfd_, std::nullopt, pidfd_only)) return false;
    if (spec_.kind != v1::LEASE_HOLDER_PROCESS_GROUP) return true;
    LeaderEnded();
  }
  if (group_ended_ || (!pidfd_only && LeaderPidReused())) return true;
  if (group_to_find_) return false;  // kept until the table's FindGroupMembers
  if (StillRuns(witness_, pidfd_, spec_.process.pid, pidfd_only)) return false;
  ClosePidfd();
  group_to_find_ = true;  // the witness ended or left the group: another is looked for
  return false;
}

void LeaseHolder::LeaderEnded() {
  ClosePidfd();  // the leader's pidfd stays readable from now on
  leader_ended_ = true;
  group_to_find_ = true;
}

bool LeaseHolder::LeaderPidReused() const {
  const std::optional<ProcessIdentity> at_pid = ReadProcessStat(spec_.process.pid);
  return at_pid.has_value() && at_pid->start_time != spec_.process.start_time;
}

std::optional<pid_t> LeaseHolder::GroupToFind() const {
  if (!group_to_find_ || group_ended_) return std::nullopt;
  return spec_.process.pid;
}

void LeaseHolder::TakeGroupMember(const std::optional<ProcessIdentity>& member) {
  if (!group_to_find_ || group_ended_) return;
  if (!member) {
    group_ended_ = true;  // an empty group gains no process: it has ended for good
    return;
  }
  ClosePidfd();
  pidfd_ = OpenPidfd(member->pid);
  // After the pidfd: a member that ended or left the group meanwhile leaves it to be found again.
  if (!StillRuns(*member, -1, spec_.process.pid)) {
    ClosePidfd();
    return;
  }
  witness_ = *member;
  group_to_find_ = false;
}

std::string LeaseHolder::Description() const {
  switch (spec_.kind) {
    // No pid: the text reaches every caller's refusal, and pids are only for privileged callers.
    case v1::LEASE_HOLDER_PROCESS:
      return "a process's lease";
    case v1::LEASE_HOLDER_PARENT:
      return "a shell's lease";
    case v1::LEASE_HOLDER_PROCESS_GROUP:
      return "a process group's lease (devplace run, or a job's pick)";
    default:
      return absl::StrCat("a lease until ", absl::FormatTime("%Y-%m-%d %H:%M:%SZ", expires_, absl::UTCTimeZone()));
  }
}

}  // namespace devplace::service
