// Pure parsers for the text formats the probers read (sysfs attributes, /proc files). No I/O:
// each takes the file's content, so each is unit-tested on literal strings.
#ifndef DEVPLACE_SERVER_PROBE_HOST_PARSERS_H_
#define DEVPLACE_SERVER_PROBE_HOST_PARSERS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/common/pci_bus_id.h"

namespace devplace::probe {

// Canonical PCI address "dddd:bb:dd.f" (server/common/pci_bus_id.h, shared with the resolver).
using ::devplace::NormalizePciBusId;

// A hex number with or without "0x" (sysfs ids: "0x10de\n"). InvalidArgument when malformed.
absl::StatusOr<uint32_t> ParseHex(absl::string_view text);

// A signed decimal number (sysfs numa_node: "-1\n"). InvalidArgument when malformed.
absl::StatusOr<int64_t> ParseDecimal(absl::string_view text);

// The most CPUs a cpulist may name: far above any Linux host (the kernel's NR_CPUS is at most
// 8192 on x86_64), low enough that walking them stays cheap.
inline constexpr uint64_t kMaxCpus = 65536;

// A kernel cpulist as ascending, disjoint, non-adjacent ranges [first, last] and the number of
// CPUs they hold, without materialising each CPU: a hostile 1 MiB list costs one pair per range.
struct CpuRanges {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint64_t count = 0;
};
// InvalidArgument when malformed (e.g. "3-1", "a", a range of 2^20 CPUs or more).
absl::StatusOr<CpuRanges> ParseCpuRanges(absl::string_view text);

// The CPUs of a kernel cpulist ("0-1,4-5", "0,2", "" = none), ascending, without duplicates.
// InvalidArgument when malformed (e.g. "3-1", "a") or when it names more than kMaxCpus CPUs.
absl::StatusOr<std::vector<uint32_t>> ParseCpuList(absl::string_view text);

// "Key: value" lines (NVIDIA and Cambricon `information` files): key and value trimmed of
// whitespace (tabs included); lines without ':' are ignored; the first occurrence of a key wins.
std::map<std::string, std::string> ParseColonFields(absl::string_view text);

// "key value" lines (KFD topology `properties` files); the first occurrence of a key wins.
std::map<std::string, std::string> ParseSpaceFields(absl::string_view text);

// /proc/meminfo or /sys/devices/system/node/nodeN/meminfo: the last word before ':' ("MemTotal"
// in "Node 0 MemTotal:   65536000 kB") mapped to bytes (values in kB are multiplied by 1024;
// values without a unit are taken as they are). Lines that do not parse are ignored.
std::map<std::string, uint64_t> ParseMeminfoBytes(absl::string_view text);

// /proc/driver/nvidia-caps/mig-minors: lines "<capability path> <minor>", e.g.
// "gpu0/gi1/ci0/access 13", "config 1". InvalidArgument when a line is malformed.
absl::StatusOr<std::map<std::string, uint32_t>> ParseMigMinors(absl::string_view text);

// The driver version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel
// Module for x86_64  550.54.15  Release Build ..."): the first token of the NVRM line made of
// digits and dots with at least one dot. NotFound when there is none.
absl::StatusOr<std::string> ParseNvidiaDriverVersion(absl::string_view text);

// KFD `gfx_target_version` (decimal, e.g. 90010) as the gfx name ROCm uses ("gfx90a"):
// major = v / 10000, minor = v / 100 % 100, stepping = v % 100, minor and stepping in hex.
std::string GfxTargetName(uint32_t gfx_target_version);

// What /proc/cpuinfo says, for x86 ("vendor_id", "model name", "flags") and arm64
// ("CPU implementer", "Features", no model name).
struct CpuInfo {
  std::string architecture;  // "x86_64" or "aarch64"; empty when neither is recognisable
  std::string vendor;        // vendor_id, or the arm64 implementer ("0x41")
  std::string model_name;    // empty on arm64
  std::set<std::string> features;  // x86 flags or arm64 Features, of the first processor
  uint32_t processors = 0;         // "processor" entries
};

// Parses /proc/cpuinfo. InvalidArgument when there is no "processor" entry.
absl::StatusOr<CpuInfo> ParseCpuInfo(absl::string_view text);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_PARSERS_H_
