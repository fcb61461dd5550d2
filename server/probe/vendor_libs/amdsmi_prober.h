// The AMD SMI prober: loads libamd_smi.so with dlopen at run time (declarations in
// amdsmi_api.h, no build-time AMD dependency) and adds what the library knows to the AMD row
// (ROW_CUDA_AMD), matched by PCI bus id: marketing name, the library's UUID, VRAM total and used,
// the compute and memory partition modes (SPX/DPX/TPX/QPX/CPX, NPS1/2/4/8) and the driver version.
// It runs in its own child process like every vendor prober (vendor_prober.h, VendorProber).
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_PROBER_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_PROBER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// One GPU as AMD SMI reports it; optional fields stay empty when the call is missing, not
// supported, or failed.
struct AmdSmiGpu {
  int index = -1;      // processor position across sockets, in the library's order
  std::string bus_id;  // canonical "dddd:bb:dd.f"
  std::string name;    // amdsmi_get_gpu_asic_info market_name
  std::string uuid;    // amdsmi_get_gpu_device_uuid
  std::optional<uint64_t> vram_total_bytes;
  std::optional<uint64_t> vram_used_bytes;
  std::string compute_partition;  // "SPX", "CPX", ...
  std::string memory_partition;   // "NPS1", ...
  // "AMD SMI amdsmi_get_gpu_memory_usage: AMDSMI_STATUS_NOT_FOUND (31)" when a call said the
  // processor is gone (no later call is made on it); empty otherwise.
  std::string lost;
};

// Everything one AMD SMI session read, before merging.
struct AmdSmiSnapshot {
  std::optional<std::string> unusable;  // set when AMD SMI could not be used at all
  bool skipped = false;                 // ... because it is not installed or the driver is not loaded
  std::string driver_version;           // amdsmi_get_gpu_driver_info of the first GPU
  std::vector<AmdSmiGpu> gpus;          // the GPUs whose bus id is known
  std::vector<std::string> notes;       // findings that are not failures
  std::vector<std::string> problems;    // unexpected errors: the report is PROBE_STATUS_ERROR
};

// Loads `library`, amdsmi_init(AMDSMI_INIT_AMD_GPUS), reads every GPU processor of every socket,
// amdsmi_shut_down, unloads. Every library call is announced on `call` first.
AmdSmiSnapshot ReadAmdSmi(const std::string& library, VendorCall& call);

// Merges `snapshot` into the AMD row of `facts` by bus id: the name replaces sysfs'; the UUID
// goes to attribute "amd_smi_uuid" (and to uuid only when sysfs/KFD gave none: HIP matches the
// KFD unique id form); memory_total_bytes = VRAM total and memory_free_bytes = total - used,
// with attribute "memory_source" = "amd_smi"; attributes "compute_partition",
// "memory_partition" and "compute_partition_count" (1/2/3/4 for SPX/DPX/TPX/QPX); a lost GPU gets
// HEALTH_LOST with the call in health_reason; the driver version when no kernel source gave
// one. A GPU AMD SMI lists that the PCI scan did not see is only named in the message; a PCI GPU
// it does not list is named too and keeps its sysfs facts.
absl::StatusOr<ProbeOutcome> MergeAmdSmi(const AmdSmiSnapshot& snapshot, HostFacts& facts);

// The vendor prober "amd_smi": skipped without an AMD GPU on the PCI bus; else ReadAmdSmi,
// MergeAmdSmi.
VendorProber AmdSmiProber(std::string library);

// "AMDSMI_STATUS_NOT_FOUND (31)" for the named codes, else "AMD SMI status 99".
std::string AmdSmiStatusName(int code);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_PROBER_H_
