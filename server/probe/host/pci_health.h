// The PCIe link and AER health counters of a PCI function, from sysfs (docs/PROBE.md "Device
// health": each counter, its rule and the rule's source).
#ifndef DEVPLACE_SERVER_PROBE_HOST_PCI_HEALTH_H_
#define DEVPLACE_SERVER_PROBE_HOST_PCI_HEALTH_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/host/host_root.h"

namespace devplace::probe {

// At most this many health counters per device (Device.health_counters' bound).
inline constexpr int kMaxHealthCounters = 64;

// Appends to d.health_counters what `dir` (the function's sysfs directory, a host path such as
// "/sys/bus/pci/devices/0000:18:00.0") offers of current_link_width / max_link_width,
// current_link_speed / max_link_speed, aer_dev_fatal, aer_dev_nonfatal and aer_dev_correctable:
// a file that is absent adds nothing (the kernel or the device does not offer it); one that cannot
// be read or parsed is an unknown counter (effect HEALTH_UNSPECIFIED), never a fault. Each read is
// bounded (4 KiB) and never throws. Does not change d.health: BuildInventory combines the counters.
void ReadPciHealthCounters(const HostRoot& root, absl::string_view dir, v1::Device& d);

// Appends to d.health_counters the amdgpu driver's RAS counters under `dir`/ras (`dir` the GPU's
// PCI function directory; the driver's files, as Linux's amdgpu_ras.c writes them): for each
// `<block>_err_count` file ("ue: N" and "ce: N" lines, UMC on newer kernels also "de: N") one
// counter per line, named "ras/<block>_err_count <kind>" (ue non-zero: FAULT; ce and de: raw
// counts, never a change), and `ras/features` ("feature mask: 0x..", the blocks with RAS on) as a
// note. No ras directory (a GPU or kernel without RAS) adds nothing; a file that cannot be read or
// parsed is an unknown counter. At most 32 block files, each read bounded (4 KiB), never throws.
void ReadAmdgpuRasCounters(const HostRoot& root, absl::string_view dir, v1::Device& d);

// The counts of an amdgpu RAS error count file: each "<kind>: N" line ("ue", "ce", "de") as
// {kind, N}; nullopt when a line is neither that nor empty, or there is no "ue" line.
std::optional<std::vector<std::pair<std::string, uint64_t>>> ParseRasErrorCount(absl::string_view text);

// The mask of `ras/features` ("feature mask: 0x3fff"); nullopt for anything else.
std::optional<uint64_t> ParseRasFeatureMask(absl::string_view text);

// A sysfs link speed ("16.0 GT/s PCIe", older kernels "8 GT/s") in GT/s; nullopt for "Unknown"
// or anything else.
std::optional<double> ParseLinkSpeed(absl::string_view text);

// The total of an AER statistics file: the number on its line "<total_name> N"; nullopt when the
// line is missing or not a number.
std::optional<uint64_t> ParseAerTotal(absl::string_view text, absl::string_view total_name);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_HOST_PCI_HEALTH_H_
