// The NVML prober (DETECTION.md sections 2, 12.4-12.6): loads libnvidia-ml.so.1 with dlopen at
// run time (no build-time NVIDIA dependency; declarations in nvml_api.h) and adds what only the
// library knows to the NVIDIA row, matched by PCI bus id: names, UUIDs, total and free memory,
// MIG mode and instances with their MIG- UUIDs, the driver and CUDA driver versions, and which
// GPUs are lost (NVML_ERROR_GPU_IS_LOST) or refused to this process (NVML_ERROR_NO_PERMISSION).
//
// Reading (ReadNvml) and merging (MergeNvml) are separate: both run in the vendor prober's own
// child process under a deadline (vendor_prober.h, VendorProber); the reading collects into a private
// NvmlSnapshot and only a finished snapshot is merged.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_PROBER_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_PROBER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// One MIG device (a GPU instance / compute instance pair) as NVML reports it.
struct NvmlMigDevice {
  std::string uuid;  // "MIG-..."
  std::string name;  // "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
  std::optional<uint32_t> gpu_instance_id;
  std::optional<uint32_t> compute_instance_id;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_free_bytes;
};

// One process on a GPU, from nvmlDeviceGetComputeRunningProcesses_v3 and / or
// nvmlDeviceGetGraphicsRunningProcesses_v3 (merged by pid).
struct NvmlProcess {
  unsigned int pid = 0;
  std::optional<uint64_t> used_memory_bytes;  // absent: NVML_VALUE_NOT_AVAILABLE
  bool compute = false;
  bool graphics = false;
  std::optional<uint32_t> gpu_instance_id;      // MIG only
  std::optional<uint32_t> compute_instance_id;  // MIG only
};

// One GPU as NVML reports it. Optional fields stay empty when the call is missing from the
// library, NOT_SUPPORTED, or failed.
struct NvmlGpu {
  int index = -1;          // NVML index; -1 when found by bus id only
  std::string bus_id;      // canonical "dddd:bb:dd.f"
  std::string name;
  std::string uuid;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_free_bytes;
  std::optional<bool> mig_enabled;  // current MIG mode
  std::vector<NvmlMigDevice> mig_devices;
  // nvmlDeviceGetComputeMode (NVML_COMPUTEMODE_*); absent when unknown.
  std::optional<int> compute_mode;
  // The processes of both lists (at most kMaxNvmlProcesses per list); absent when the library
  // lacks the calls or they failed.
  std::optional<std::vector<NvmlProcess>> processes;
  // "NVML nvmlDeviceGetMemoryInfo: NVML_ERROR_GPU_IS_LOST (15)" when a call said the GPU is lost
  // (no later call is made on it); empty otherwise.
  std::string lost;
  // Likewise for NVML_ERROR_NO_PERMISSION.
  std::string no_permission;
  // The health counters (nvml_health.h), read on a full probe only; appended to the device's.
  std::vector<v1::HealthCounter> health_counters;
};

// Everything one NVML session read, before merging.
struct NvmlSnapshot {
  // Set when NVML could not be used at all: the prober is skipped (`skipped`) or failed.
  std::optional<std::string> unusable;
  bool skipped = false;
  std::string driver_version;       // nvmlSystemGetDriverVersion, e.g. "550.54.15"
  std::string cuda_driver_version;  // nvmlSystemGetCudaDriverVersion_v2 as "12.4"
  unsigned int count = 0;           // nvmlDeviceGetCount_v2
  std::vector<NvmlGpu> gpus;        // the GPUs whose bus id is known
  // Findings worth reporting that are not failures (a device NVML counts but will not open, a
  // PCI GPU NVML does not list, a library without the MIG calls).
  std::vector<std::string> notes;
  // Unexpected NVML errors: they make the report PROBE_STATUS_ERROR (what was read is merged).
  std::vector<std::string> problems;
};

// The most processes read from each of a GPU's two process lists (a host has far fewer).
inline constexpr unsigned int kMaxNvmlProcesses = 4096;

// Loads `library` (dlopen, RTLD_NOW | RTLD_LOCAL), initialises NVML and reads every GPU, then
// shuts NVML down and unloads the library. `nvidia_bus_ids` are the NVIDIA GPUs of the PCI scan
// (canonical ids): one that no NVML index yields is looked up by bus id, so that a lost or
// refused GPU is attributed to its bus id. Every library call is announced on `call` first.
// `usage_only` (devplaced's usage refresh) skips the system-wide calls (driver and CUDA driver
// versions: the latter loads libcuda) and the health counters (the daemon keeps the full probe's).
NvmlSnapshot ReadNvml(const std::string& library, const std::vector<std::string>& nvidia_bus_ids,
                      VendorCall& call, bool usage_only = false);

// Merges `snapshot` into the NVIDIA row of `facts` by bus id: NVML's name replaces the /proc
// one; uuid, memory total and free; MIG devices become Device.partitions (matched to the
// capability-file partitions by GPU and compute instance id, else appended) with uuid, profile
// (from the MIG device name) and memory; attribute "memory_source" = "nvml" when NVML gave the
// total memory; attribute "mig_mode" = "enabled" / "disabled";
// the driver version when no kernel source gave one; Backend attribute "cuda_driver_version";
// Device.usage (source "nvml"): the compute mode, the processes of both lists by pid (busy when
// EXCLUSIVE_PROCESS has one, or PROHIBITED), and each MIG instance's own processes (matched by GPU
// and compute instance id) in its Partition.usage.
// The GPU's health counters (nvml_health.h) are appended to Device.health_counters
// (BuildInventory makes the health from them). A lost GPU gets HEALTH_LOST with the call in
// health_reason; a refused one an inaccessible_reason. A GPU NVML lists that the PCI scan did not see is only named in the
// message. Skipped / error when NVML was unusable; error (after merging) on unexpected errors.
absl::StatusOr<ProbeOutcome> MergeNvml(const NvmlSnapshot& snapshot, HostFacts& facts);

// The vendor prober "nvml": ReadNvml on the facts' NVIDIA bus ids, then MergeNvml.
VendorProber NvmlProber(std::string library, bool usage_only = false);

// "NVML_ERROR_GPU_IS_LOST (15)" for the named codes, else "NVML error 42".
std::string NvmlReturnName(int code);

// The MIG profile in a MIG device's name: "3g.40gb" in "NVIDIA A100-SXM4-80GB MIG 3g.40gb";
// empty when the name has no " MIG " part.
std::string MigProfile(absl::string_view mig_device_name);

// NVML's CUDA driver version number as "major.minor" (12040 -> "12.4").
std::string CudaVersionString(int version);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_PROBER_H_
