// Builds one v1::Inventory from a probe run: the probers' per-bus-id facts become Backends and
// Devices, with everything derived from the facts (host order, driver/node/support/health
// checks, usability with reasons, backend state) decided here and nowhere else.
#ifndef DEVPLACE_SERVER_PROBE_BUILD_INVENTORY_H_
#define DEVPLACE_SERVER_PROBE_BUILD_INVENTORY_H_

#include <cstddef>

#include "devplace/v1/devplace.pb.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"

namespace devplace::probe {

// A probe report's message longer than kMaxReportMessageBytes is cut there, ending
// "... (N bytes in all)".
inline constexpr size_t kMaxReportMessageBytes = 4096;
// DeviceUsage.processes keeps at most this many (the ones using the most memory), by pid.
inline constexpr int kMaxUsageProcesses = 64;

// The inventory of one probe run: host facts, the cpu row first (always present, READY, no
// devices), then one Backend per row with hardware on the PCI bus, sorted by row; devices in PCI
// bus order with host_index 0..n-1; the probe reports in run order. `revision` is 0 and
// `probed_at` unset (the caller stamps them). A row with more than kMaxDevicesPerRow devices
// (host/facts.h; the pci prober already keeps no more, a vendor prober could add some), or
// past kMaxDevices in all (rows in row order), keeps the first ones in PCI bus order, and a last
// probe report "device_bound" (PROBE_STATUS_ERROR) says which rows kept how many of how many.
// Report messages are cut at kMaxReportMessageBytes. Device.usage gets the memory in use from the
// library that gave the memory figures (total - free) and at most kMaxUsageProcesses processes.

v1::Inventory BuildInventory(const probe::ProbeRun& run);

// RunProbers(root), then BuildInventory. Never fails: prober errors are in probe_reports. Runs
// no vendor-library prober (the inventory depends on the tree under `root` only).
v1::Inventory ProbeInventory(const probe::HostRoot& root);
// RunProbers(root, options), then BuildInventory: with the vendor probers `options` enables, each
// in its own child process (a timed-out or crashed one is reported, nothing of it merged).
v1::Inventory ProbeInventory(const probe::HostRoot& root, const probe::ProbeOptions& options);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_BUILD_INVENTORY_H_
