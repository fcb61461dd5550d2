// The whole probe: the host probers (server/probe/host/), then the vendor-library probers
// (server/probe/vendor_libs/) that ProbeOptions enables. build_inventory.h turns the run into a
// v1::Inventory; devplace-probe (main.cc) prints it.
#ifndef DEVPLACE_SERVER_PROBE_PROBERS_H_
#define DEVPLACE_SERVER_PROBE_PROBERS_H_

#include "server/probe/host/host_root.h"
#include "server/probe/host/prober.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// RunProbers(root), then the vendor probers that `options` enables (in order: nvml, cuda, amd_smi,
// level_zero, hlml, dcmi, cndev, mtml), all at once, each in its own process under
// options.vendor_timeout (RunVendorProbers).
ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_PROBERS_H_
