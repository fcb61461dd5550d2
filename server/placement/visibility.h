// Visibility (SEMANTICS.md section 3, rules E-*, P1-P3): which of a row's host devices a job can
// see, renumbered the way the job's runtime numbers them. Every index in an answer is a position
// in a `RowVisibility::units` list, never a host ordinal.
#ifndef DEVPLACE_SERVER_PLACEMENT_VISIBILITY_H_
#define DEVPLACE_SERVER_PLACEMENT_VISIBILITY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devplace/v1/devplace.pb.h"
#include "google/protobuf/map.h"
#include "server/placement/allocation.h"

namespace devplace::placement {

using Env = google::protobuf::Map<std::string, std::string>;

// One device as the job numbers it.
struct VisibleUnit {
  const v1::Device* device = nullptr;        // the host device it lives on
  int sub_device = -1;                       // NeuronCore / Intel tile within `device`; -1 whole
  const v1::Partition* partition = nullptr;  // MIG instance named in CUDA_VISIBLE_DEVICES
};

// Why a row with hardware shows the job no device.
enum class Hidden {
  kNo,            // units is not empty
  kHost,          // no device of the row is usable on the host (driver, nodes, health, support)
  kJobDevices,    // P1: job_devices lists none of the usable devices' nodes
  kMaskEmpty,     // a mask variable was set to the empty string: deliberately none
  kMask,          // a mask variable (or its parse: repeat, invalid entry) left none
  kAllocation,    // P-DRA: the job's DRA claims hold none of the row's devices
};

// E-ORDER-SMI: the same visibility variables read in the numbering the vendor's tools show (PCI
// bus order: nvidia-smi's GPU index, lspci / rocm-smi --showbus bus ids), kept when the job's
// runtime numbers the row's devices in a probed order that differs from it (libcuda's
// FASTEST_FIRST, HIP's KFD topology order).
struct Renumbering {
  std::vector<VisibleUnit> bus_units;  // bus_units[i]: the device a user counting in PCI order means by <type>:i
  // The devices the job could see before any mask, in the runtime's order and in PCI bus order:
  // positions in them are the runtime's ordinals and the tools' indices (within the job's devices,
  // as nvidia-smi inside a container numbers only the GPUs mounted there).
  std::vector<const v1::Device*> runtime_all, bus_all;
  std::string runtime;                 // "CUDA" or "HIP": whose ordinals the job uses
  std::string order;                   // the job's order in words, e.g. "FASTEST_FIRST (CUDA_DEVICE_ORDER unset)"
  std::string masks;                   // the list variables applied, e.g. "CUDA_VISIBLE_DEVICES=1"; empty when none
  bool nvidia = false;                 // names "nvidia-smi GPU <n>" and fixes with CUDA_DEVICE_ORDER=PCI_BUS_ID
};

struct RowVisibility {
  const v1::Backend* backend = nullptr;
  std::vector<VisibleUnit> units;  // units[i] is `<device_type>:i` in the job
  bool masked = false;             // a visibility variable was applied
  std::string mask_variable;       // the last list variable applied (e.g. "CUDA_VISIBLE_DEVICES")
  bool mask_empty = false;         // ... and it was set to the empty string
  Hidden hidden = Hidden::kNo;
  std::string hidden_reason;       // set when units is empty: why, in words, with the fix
  std::vector<std::string> explanation;  // ordered steps, each starting with its rule id
  std::vector<std::string> warnings;     // parse hazards (truncated lists, order caveats)
  // E-MIG: CUDA picked the MIG instance itself (MIG on, no MIG- UUID named): every process of
  // the job gets this same instance as cuda:0.
  bool mig_implicit = false;
  // Every MIG instance on the GPUs the job could name, described ("MIG-<uuid> on host device 0
  // (0000:07:00.0)"), for the fix in MIG warnings.
  std::vector<std::string> mig_instances;
  // E-ORDER-SMI: set when the job's numbering of this row differs from PCI bus order.
  std::optional<Renumbering> renumbering;
};

// Whether the row's runtime numbers this device: usable ones, and also healthy, driven devices
// that PyTorch's backend does not support (Level Zero still enumerates an Intel UHD 770 iGPU, so
// it takes an xpu index; the resolver warns when an answer lands on one), and driven devices in
// HEALTH_FAULT (the runtime does not read health; the resolver warns, H-HEALTH). Not a LOST one.
bool RuntimeEnumerates(const v1::Device& device);

// Computes the job's view of one row, in the job's numbering. cuda/nvidia is ordered as the job's
// CUDA_DEVICE_ORDER selects (E-ORDER: libcuda's probed enumeration when the inventory has
// Device.runtime_ordinal / runtime_ordinal_pci, PCI bus order for PCI_BUS_ID, else PCI order
// with a warning when models differ), then masked, then reduced to the single MIG instance CUDA
// enumerates when MIG is on (E-MIG). `job_devices` null means absent (all host nodes assumed
// visible). `allocation` (P-DRA), when not null and not empty, keeps only the devices Kubernetes
// allocated to the job, after P1 and before the order and the masks. Errors: INVALID_ARGUMENT naming the variable (`env.<NAME>`) and its accepted forms
// for masks that the runtime rejects (HIP_VISIBLE_DEVICES longer than ROCR_VISIBLE_DEVICES or
// pointing past it, a CUDA_DEVICE_ORDER other than FASTEST_FIRST / PCI_BUS_ID, ASCEND_RT_VISIBLE_DEVICES not ascending or naming a missing id, malformed
// ZE_AFFINITY_MASK / NEURON_RT_VISIBLE_CORES / HABANA_VISIBLE_MODULES / TPU_VISIBLE_CHIPS);
// FAILED_PRECONDITION when NEURON_RT_NUM_CORES asks for more cores than are visible, or when
// HABANA_VISIBLE_MODULES / TPU_VISIBLE_CHIPS names a device that exists but the job cannot use.
// CUDA-style lists (CUDA_/MLU_/CN_/MUSA_VISIBLE_DEVICES) follow PyTorch's
// `_parse_visible_devices` and never fail: an invalid entry ends the list, a repeat empties it.
absl::StatusOr<RowVisibility> ComputeVisibility(const v1::Backend& backend, const Env& env,
                                                const v1::JobDevices* job_devices,
                                                const JobAllocation* allocation = nullptr);

// E-ORDER-SMI: one warning when the devices an answer uses (`used`: job indices into
// `vis.units`) are not the devices the same indices name in PCI bus order (nvidia-smi's numbering;
// the bus ids rocm-smi --showbus lists), giving both numberings of each such device, what the
// visibility variables counted in, whether `max_memory` keys (the job's indices) are affected, and
// the fix (CUDA_DEVICE_ORDER=PCI_BUS_ID; for HIP, which has no order switch, the UUIDs for
// ROCR_VISIBLE_DEVICES). Empty when they agree or the row has no renumbering. At most
// kMaxRenumberedListed devices are listed, then a count.
inline constexpr int kMaxRenumberedListed = 8;
std::string RenumberingWarning(const RowVisibility& vis, const std::vector<int>& used, bool max_memory);

// PyTorch's `_parse_visible_devices` for a CUDA-style list (exposed for tests): ordinals, or
// `GPU-`/`MIG-` UUID (prefix) entries. `truncated_at` is the first entry that ended the list
// (empty when none did); `repeated` is true when a repeated entry emptied the list.
struct CudaStyleList {
  std::vector<int> ordinals;
  std::vector<std::string> uuids;  // when the value starts with GPU- or MIG-
  bool is_uuid = false;
  std::string truncated_at;
  bool repeated = false;
};
CudaStyleList ParseCudaStyleList(const std::string& value);

// P2 hints (SEMANTICS.md section 9, H-FOREIGN): one warning for each visibility variable set in
// `env` that does not govern `chosen`, the row of the answer, naming the variable that does
// (CUDA_VISIBLE_DEVICES on an npu answer: ASCEND_RT_VISIBLE_DEVICES). For a cpu answer, only
// variables of rows `inventory` does not have are named (they select nothing on this host). Also
// one for HABANA_VISIBLE_DEVICES, the Gaudi container runtime's variable, whenever it is set.
std::vector<std::string> ForeignMaskWarnings(const v1::Inventory& inventory, v1::Row chosen, const Env& env);

// H-HPU: a Gaudi process owns one module and sees it as its only device, so an explicit `hpu:N`
// with N > 0 (`device`, from `field`, e.g. "device_map"; also pipeline's int N, which becomes
// `hpu:N`) is INVALID_ARGUMENT naming it, saying
// that the module is chosen with HABANA_VISIBLE_MODULES and the device is `hpu` (or `hpu:0`),
// and, when set, that HABANA_VISIBLE_DEVICES is the container runtime's variable. OK otherwise.
absl::Status CheckHpuIndex(absl::string_view device, int index, absl::string_view field, const Env& env);

// Human label for a unit, e.g. "host GPU 3 (0000:9a:00.0)" or "core 1 of host device 0".
std::string DescribeUnit(const VisibleUnit& unit);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_VISIBILITY_H_
