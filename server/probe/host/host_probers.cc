// Probers for the host itself: identity, memory, CPU and NUMA (DETECTION.md section 13).
#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "server/common/status_macros.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/host/prober.h"

namespace devplace::probe {
namespace {

// ISA extensions PyTorch's CPU kernels dispatch on (torch.cpu.get_capabilities vocabulary in
// /proc/cpuinfo spelling).
constexpr std::array<absl::string_view, 16> kX86TorchFlags = {
    "avx",         "avx2",        "fma",         "avx512f",  "avx512bw", "avx512vl",
    "avx512dq",    "avx512cd",    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile",    "amx_bf16",    "amx_int8",    "amx_fp16"};
constexpr std::array<absl::string_view, 7> kArm64TorchFlags = {"asimd", "sve", "sve2", "bf16",
                                                              "i8mm",  "sme", "sme2"};

bool HasAll(const std::set<std::string>& features, std::initializer_list<const char*> wanted) {
  return std::all_of(wanted.begin(), wanted.end(),
                     [&features](const char* f) { return features.count(f) > 0; });
}

}  // namespace

std::string TorchCpuCapability(absl::string_view architecture, const std::set<std::string>& features) {
  if (architecture == "x86_64") {
    if (HasAll(features, {"avx512f", "avx512bw", "avx512vl", "avx512dq"})) return "AVX512";
    if (HasAll(features, {"avx2", "fma"})) return "AVX2";
    return "NO AVX";
  }
  // torch picks SVE256 only when the SVE vector length is 256 bits, which /proc/cpuinfo does not
  // say; "sve present" is an approximation (a 128-bit SVE core such as Neoverse V2 gets DEFAULT
  // from torch).
  if (architecture == "aarch64" && features.count("sve") > 0) return "SVE256";
  return "DEFAULT";
}

absl::StatusOr<ProbeOutcome> ProbeHostIdentity(const HostRoot& root, HostFacts& facts) {
  Problems problems;
  v1::Host& host = facts.host;
  host.set_os("linux");
  absl::StatusOr<std::string> hostname = root.ReadTrimmed("/proc/sys/kernel/hostname");
  problems.Add(hostname.status());
  if (hostname.ok()) host.set_hostname(*hostname);
  absl::StatusOr<std::string> release = root.ReadTrimmed("/proc/sys/kernel/osrelease");
  problems.Add(release.status());
  if (release.ok()) host.set_kernel_release(*release);
  return problems.Finish(absl::StrCat("hostname ", host.hostname(), ", kernel ", host.kernel_release()));
}

absl::StatusOr<ProbeOutcome> ProbeMemory(const HostRoot& root, HostFacts& facts) {
  ASSIGN_OR_RETURN(const std::string content, root.ReadFile("/proc/meminfo"));
  const std::map<std::string, uint64_t> fields = ParseMeminfoBytes(content);
  const auto total = fields.find("MemTotal");
  if (total == fields.end()) return absl::DataLossError("/proc/meminfo has no MemTotal line");
  facts.host.set_memory_total_bytes(total->second);
  const auto available = fields.find("MemAvailable");
  if (available != fields.end()) facts.host.set_memory_available_bytes(available->second);
  // Only the stable figure: the message is inventory content, and MemAvailable changes constantly.
  return Found(absl::StrCat(total->second, " bytes total",
                            available != fields.end() ? ", MemAvailable read" : ", no MemAvailable line"));
}

absl::StatusOr<ProbeOutcome> ProbeCpu(const HostRoot& root, HostFacts& facts) {
  ASSIGN_OR_RETURN(const std::string content, root.ReadFile("/proc/cpuinfo"));
  ASSIGN_OR_RETURN(const CpuInfo info, ParseCpuInfo(content));
  v1::Cpu& cpu = *facts.host.mutable_cpu();
  cpu.set_architecture(info.architecture);
  cpu.set_vendor(info.vendor);
  cpu.set_model_name(info.model_name);

  // Topology from sysfs; CPUs whose topology files are missing count as their own core.
  CpuRanges online;
  if (std::optional<std::string> list = ReadOptional(root, "/sys/devices/system/cpu/online")) {
    ASSIGN_OR_RETURN(online, ParseCpuRanges(*list));
  } else if (info.processors > 0) {
    online.ranges.emplace_back(0, info.processors - 1);
    online.count = info.processors;
  }
  // Each online CPU costs two reads below: refuse a list no host has rather than walk it.
  if (online.count > kMaxCpus) {
    return absl::InvalidArgumentError(absl::StrCat("/sys/devices/system/cpu/online names ", online.count,
                                                   " CPUs, more than the ", kMaxCpus, " accepted"));
  }
  std::set<int64_t> packages;
  std::set<std::pair<int64_t, int64_t>> cores;
  for (const auto& [first, last] : online.ranges) {
    for (uint64_t n = first; n <= last; ++n) {
      const std::string topo = absl::StrCat("/sys/devices/system/cpu/cpu", n, "/topology/");
      const std::optional<int64_t> package = ReadOptionalDecimal(root, topo + "physical_package_id");
      const std::optional<int64_t> core = ReadOptionalDecimal(root, topo + "core_id");
      packages.insert(package.value_or(-1));
      if (package && core) {
        cores.emplace(*package, *core);
      } else {
        cores.emplace(-1 - static_cast<int64_t>(n), 0);
      }
    }
  }
  cpu.set_sockets(static_cast<uint32_t>(packages.size()));
  cpu.set_cores(static_cast<uint32_t>(cores.size()));
  cpu.set_threads(static_cast<uint32_t>(online.count));

  cpu.clear_isa_flags();
  const absl::Span<const absl::string_view> torch_flags =
      info.architecture == "aarch64" ? absl::MakeConstSpan(kArm64TorchFlags)
                                     : absl::MakeConstSpan(kX86TorchFlags);
  for (absl::string_view flag : torch_flags) {
    if (info.features.count(std::string(flag)) > 0) cpu.add_isa_flags(std::string(flag));
  }
  std::sort(cpu.mutable_isa_flags()->begin(), cpu.mutable_isa_flags()->end());
  cpu.set_torch_cpu_capability(TorchCpuCapability(info.architecture, info.features));
  return Found(absl::StrCat(info.architecture, " ", cpu.sockets(), " sockets, ", cpu.cores(),
                            " cores, ", cpu.threads(), " threads, torch capability ",
                            cpu.torch_cpu_capability()));
}

absl::StatusOr<ProbeOutcome> ProbeNuma(const HostRoot& root, HostFacts& facts) {
  constexpr absl::string_view kNodes = "/sys/devices/system/node";
  if (!root.IsDirectory(kNodes)) return Skipped("no /sys/devices/system/node");
  Problems problems;
  std::vector<std::string> found;
  for (const auto& [id, name] : ListNumbered(root, kNodes, "node")) {
    const std::string dir = absl::StrCat(kNodes, "/", name);
    v1::NumaNode& node = *facts.host.add_numa_nodes();
    node.set_id(id);
    absl::StatusOr<std::string> cpulist = root.ReadTrimmed(dir + "/cpulist");
    problems.Add(cpulist.status());
    if (cpulist.ok()) {
      absl::Status valid = ParseCpuRanges(*cpulist).status();
      problems.Add(valid);
      if (valid.ok()) node.set_cpulist(*cpulist);
    }
    absl::StatusOr<std::string> meminfo = root.ReadFile(dir + "/meminfo");
    problems.Add(meminfo.status());
    if (meminfo.ok()) {
      const std::map<std::string, uint64_t> fields = ParseMeminfoBytes(*meminfo);
      const auto total = fields.find("MemTotal");
      if (total != fields.end()) node.set_memory_total_bytes(total->second);
    }
    found.push_back(absl::StrCat(name, " cpus [", node.cpulist(), "]"));
  }
  if (found.empty()) return Skipped("no NUMA node in /sys/devices/system/node");
  return problems.Finish(absl::StrJoin(found, ", "));
}

}  // namespace devplace::probe
