// The "cuda" prober (docs/SEMANTICS.md section 3, E-ORDER): learns how the CUDA
// runtime itself numbers this host's NVIDIA GPUs. Without CUDA_DEVICE_ORDER=PCI_BUS_ID the runtime
// numbers the fastest GPU first, so on a host with two different models a job's `cuda:0` need not
// be the first GPU on the PCI bus, and CUDA_VISIBLE_DEVICES ordinals index that order too.
//
// libcuda.so.1 is loaded with dlopen (declarations in cuda_api.h, no build-time CUDA dependency)
// and asked cuInit, cuDeviceGetCount, then cuDeviceGet / cuDeviceGetPCIBusId / cuDeviceGetName per
// ordinal. The runtime reads CUDA_DEVICE_ORDER once, at cuInit, so each order needs its own
// process: the prober forks one child per order (CUDA_DEVICE_ORDER unset, then PCI_BUS_ID; both
// with CUDA_VISIBLE_DEVICES unset so the whole host is enumerated), reads the child's lines from a
// pipe, and kills a child that is still running shortly before the prober's deadline. The result is recorded
// per NVIDIA device (matched by PCI bus id) as Device.runtime_ordinal and runtime_ordinal_pci.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_PROBER_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_PROBER_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// One process's enumeration, in ordinal order.
struct CudaEnumeration {
  // Set when libcuda could not be used: the prober is skipped (`skipped`: library not found, no
  // NVIDIA driver) or failed.
  std::optional<std::string> unusable;
  bool skipped = false;
  struct Gpu {
    std::string bus_id;  // canonical "dddd:bb:dd.f"
    std::string name;
  };
  std::vector<Gpu> gpus;  // gpus[i] is the runtime's ordinal i
  // Unexpected errors (a call that failed, an unreadable bus id, a child killed at the deadline).
  std::vector<std::string> problems;
};

// Both orders.
struct CudaSnapshot {
  CudaEnumeration fastest_first;  // CUDA_DEVICE_ORDER unset (FASTEST_FIRST, the default)
  CudaEnumeration pci_bus_id;     // CUDA_DEVICE_ORDER=PCI_BUS_ID
};

// Enumerates in a forked child with CUDA_DEVICE_ORDER set to `order` (empty: unset) and
// CUDA_VISIBLE_DEVICES unset, loading `library`. A child still running at `deadline` is killed
// (SIGKILL) and reported as a problem naming the call it was in. `call` is told what the parent
// waits for.
CudaEnumeration EnumerateCudaInChild(const std::string& library, const std::string& order,
                                     std::chrono::steady_clock::time_point deadline, VendorCall& call);

// Both children, the second only when the first could use the library.
CudaSnapshot ReadCuda(const std::string& library, std::chrono::steady_clock::time_point deadline, VendorCall& call);

// Records each enumerated GPU's ordinals on the NVIDIA device with its bus id
// (Device.runtime_ordinal from `fastest_first`, runtime_ordinal_pci from `pci_bus_id`). The
// message lists both orders and says where they differ from PCI bus order; a GPU libcuda lists
// that the PCI scan did not see, or an NVIDIA GPU libcuda does not enumerate (MIG, a GPU it cannot
// open), is named. Skipped / error when libcuda was unusable; error (after merging) on problems.
absl::StatusOr<ProbeOutcome> MergeCuda(const CudaSnapshot& snapshot, HostFacts& facts);

// The vendor prober "cuda": skipped without NVIDIA GPUs on the PCI bus, else ReadCuda with its
// children's deadline min(timeout / 4, 500 ms) before `timeout` (so a killed child is reaped and
// reported before the prober's own deadline), then MergeCuda.
VendorProber CudaProber(std::string library, std::chrono::milliseconds timeout);

// "CUDA_ERROR_NO_DEVICE (100)" for the named codes, else "CUDA error 42".
std::string CudaResultName(int code);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_PROBER_H_
