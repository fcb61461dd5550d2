#include "server/probe/probers.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/common/host_file.h"

namespace devplace::probe {
namespace {

// This process's address space now (VmSize), in bytes; 0 when /proc/self/statm cannot be read.
uint64_t AddressSpaceBytes() {
  // statm: "size resident shared text lib data dt" in pages, one short line.
  const absl::StatusOr<std::string> statm = ReadHostFile("/proc/self/statm", 4096, HostFileLimit::kTruncate);
  uint64_t pages = 0;
  if (!statm.ok() || !absl::SimpleAtoi(absl::string_view(*statm).substr(0, statm->find(' ')), &pages)) return 0;
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Lowers the soft RLIMIT_AS to the address space now plus kHostProbeAddressSpaceBytes for its
// lifetime, then puts the old limit back (the vendor probers' children, forked later, load vendor
// libraries such as libcuda that reserve large address ranges, so they run without it).
class AddressSpaceCap {
 public:
  AddressSpaceCap() {
    const uint64_t now = AddressSpaceBytes();
    if (now == 0 || getrlimit(RLIMIT_AS, &old_) != 0) return;
    rlimit capped = old_;
    const uint64_t cap = now + kHostProbeAddressSpaceBytes;
    if (old_.rlim_cur != RLIM_INFINITY && old_.rlim_cur <= cap) return;  // already tighter
    capped.rlim_cur = old_.rlim_max == RLIM_INFINITY ? cap : std::min<uint64_t>(cap, old_.rlim_max);
    set_ = setrlimit(RLIMIT_AS, &capped) == 0;
  }
  ~AddressSpaceCap() {
    if (set_) setrlimit(RLIMIT_AS, &old_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit old_{};
  bool set_ = false;
};

// The real uid of `pid`, from the "Uid:" line of the host's /proc/<pid>/status.
std::optional<uint32_t> ProcessUid(const HostRoot& root, uint32_t pid) {
  absl::StatusOr<std::string> status = root.ReadFile(absl::StrCat("/proc/", pid, "/status"), 64 << 10);
  if (!status.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    std::vector<absl::string_view> ids = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid = 0;
    if (!ids.empty() && absl::SimpleAtoi(ids[0], &uid)) return uid;
  }
  return std::nullopt;
}

void SetOwners(const HostRoot& root, v1::DeviceUsage& usage, std::map<uint32_t, std::optional<uint32_t>>& seen) {
  for (v1::DeviceUsageProcess& p : *usage.mutable_processes()) {
    if (p.pid() == 0) continue;
    auto it = seen.find(p.pid());
    if (it == seen.end()) it = seen.emplace(p.pid(), ProcessUid(root, p.pid())).first;
    if (it->second) p.set_uid(*it->second);
  }
}

}  // namespace

void ReadProcessOwners(const HostRoot& root, HostFacts& facts) {
  std::map<uint32_t, std::optional<uint32_t>> seen;
  for (auto& [bus_id, fn] : facts.pci) {
    if (fn.device.has_usage()) SetOwners(root, *fn.device.mutable_usage(), seen);
    for (v1::Partition& p : *fn.device.mutable_partitions()) {
      if (p.has_usage()) SetOwners(root, *p.mutable_usage(), seen);
    }
  }
}

ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ProbeRun run;
  {
    const AddressSpaceCap cap;
    run = options.usage_only ? RunProbers(root, UsageProbers()) : RunProbers(root);
  }
  // The vendor probers get what is left of the whole probe's deadline (none: each is reported
  // timed out at once).
  std::vector<VendorProber> probers = VendorProbers(options);
  if (options.usage_only) {  // no process for a library whose row the PCI scan did not find
    probers.erase(std::remove_if(probers.begin(), probers.end(),
                                 [&](const VendorProber& p) {
                                   return p.row != v1::ROW_UNSPECIFIED && !run.facts.HasRow(p.row);
                                 }),
                  probers.end());
  }
  RunVendorProbers(probers, options.vendor_timeout, run, start + options.vendor_timeout);
  ReadProcessOwners(root, run.facts);
  return run;
}

void ExitWhenOverdue(std::chrono::milliseconds timeout, std::string program) {
  std::thread([timeout, program = std::move(program)] {
    std::this_thread::sleep_for(timeout + kOverdueGrace);
    const absl::string_view prober = RunningHostProber();
    const std::string line =
        absl::StrCat(program, ": gave up: the probe did not finish within --probe_timeout=", timeout.count(), "ms",
                     prober.empty() ? "" : absl::StrCat(" (the ", prober, " prober's read never returned)"), "\n");
    // write(2) and _exit(2) only: the main thread may hold any lock.
    ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    _exit(kOverdueExitCode);
  }).detach();
}

}  // namespace devplace::probe
