// The whole probe: the host probers (server/probe/host/), then the vendor-library probers
// (server/probe/vendor_libs/) that ProbeOptions enables. build_inventory.h turns the run into a
// v1::Inventory; devplace-probe (main.cc) prints it.
#ifndef DEVPLACE_SERVER_PROBE_PROBERS_H_
#define DEVPLACE_SERVER_PROBE_PROBERS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "server/probe/host/host_root.h"
#include "server/probe/host/prober.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// How much address space the host probers may add to the process: they read text files of at
// most 1 MiB each, so a prober that needs more is parsing something hostile.
inline constexpr uint64_t kHostProbeAddressSpaceBytes = uint64_t{512} << 20;

// Sets DeviceUsageProcess.uid of every process the vendor probers listed (devices and MIG
// instances) from the "Uid:" line of <root>/proc/<pid>/status (the host's pid namespace, as the
// libraries report pids); left unset when the file cannot be read (the process ended).
void ReadProcessOwners(const HostRoot& root, HostFacts& facts);

// RunProbers(root) under an address-space cap (the soft RLIMIT_AS lowered to the current size plus
// kHostProbeAddressSpaceBytes, and put back after: a prober past it is reported RESOURCE_EXHAUSTED),
// then the vendor probers that `options` enables (VendorProbers: in the registry's order), all at
// once, each in its own process, under what is left of
// options.vendor_timeout (RunVendorProbers): the timeout covers the whole probe; then
// ReadProcessOwners. With options.usage_only the host probers are UsageProbers() (the pci scan and
// the sysfs readers of memory in use), and no vendor prober runs whose row (VendorProber::row) the
// scan did not find.
ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options);

// What ExitWhenOverdue allows past the timeout (the vendor runner's own kill and report), and the
// exit status it ends the process with.
inline constexpr std::chrono::milliseconds kOverdueGrace{1000};
inline constexpr int kOverdueExitCode = 3;

// Starts a thread that, `timeout` + kOverdueGrace from now, writes "<program>: gave up: the probe
// did not finish within --probe_timeout=..." (naming the host prober whose read never returned)
// to stderr and ends the process with kOverdueExitCode. For devplace-probe and `devplace probe`,
// which must not hang on a read the kernel never completes.
void ExitWhenOverdue(std::chrono::milliseconds timeout, std::string program);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_PROBERS_H_
