// Slurm: a node's gres.conf from its Inventory (`devplace slurm gres`), and what a TaskProlog
// exports for a step (`devplace slurm task-prolog`). Pure functions of an Inventory and a job's
// environment; the hardware facts (mask variables, device nodes, control nodes) come from the
// hardware table (placement/backends.h) and the visibility rules (placement/visibility.h).
//
// gres.conf rules used (Slurm 22.05, Debian 12's slurmd; current releases accept the same lines):
//  - one line per device: Name, Type, File (one node) or MultipleFiles (several nodes of one
//    device, e.g. /dev/mtgpu.0 and /dev/dri/renderD128), Cores, Flags;
//  - Flags: nvidia_gpu_env / amd_gpu_env / intel_gpu_env when every `gpu` device of the node is
//    that row's (Slurm ORs the env flags of a node's records and applies them to every allocated
//    gpu, so a mixed node gets no_gpu_env everywhere and the prolog sets each row's variable);
//    no_gpu_env for rows Slurm has no variable for. Only Name=gpu has a plugin that sets
//    SLURM_STEP_GPUS / SLURM_JOB_GPUS; other names (GresNaming::kPerRow) are counted, not
//    announced to the step.
//  - Cores are logical core indices; they are written only when the host has no SMT (threads ==
//    cores), where the NUMA node's CPU list is its core list; otherwise a comment says why not.
#ifndef DEVPLACE_SERVER_EXPORT_SLURM_H_
#define DEVPLACE_SERVER_EXPORT_SLURM_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::slurm {

// Name= of each row's records: every row "gpu" (Slurm's gpu plugin: SLURM_STEP_GPUS, --gpus,
// the env flags), or each row its own runtime token ("cuda", "rocm", "npu", "hpu", ...).
enum class GresNaming { kGpu, kPerRow };

// Parses --name: "gpu" or "per-row". Error: INVALID_ARGUMENT naming --name and both forms.
absl::StatusOr<GresNaming> ParseGresNaming(absl::string_view text);

// One gres.conf record: one device.
struct GresDevice {
  const v1::Backend* backend = nullptr;
  const v1::Device* device = nullptr;
  std::string name;                // "gpu", or the row's token with kPerRow
  std::string type;                // the model, sanitised (SanitizeGresType), e.g. "nvidia_h100_80gb_hbm3"
  std::vector<std::string> files;  // Device.device_nodes, in the inventory's order
  std::string cores;               // "0-1", or "" (not written)
  std::string flags;               // "nvidia_gpu_env", "no_gpu_env", ... ("" for names other than gpu)
  // The number Slurm 22.05 parses from the end of the (last) file's name (nvidia1 -> 1,
  // renderD129 -> 129, MultipleFiles=card0,renderD128 -> 128; -1 when it ends in no digit): the
  // Index `slurmd -G` prints and the number SLURM_STEP_GPUS lists there.
  int dev_num = -1;
};

// The records for every row with devices (cpu aside), rows in table order, each row's devices in
// the order its runtime numbers them (placement::ComputeVisibility with no mask), so Slurm's
// position index and the runtime's ordinal agree. Left out: devices the runtime does not number
// (placement::RuntimeEnumerates: driver not loaded, unhealthy, ...) and devices without nodes.
std::vector<GresDevice> GresDevices(const v1::Inventory& inventory, GresNaming naming);

// The gres.conf text: a header comment, the slurm.conf lines as comments ("# slurm.conf:
// GresTypes=..." and "# slurm.conf: NodeName=<host> Gres=..."), then per row a comment naming it,
// its mask variable and what Slurm cannot express (control nodes, skipped devices, Cores), and
// its records. Every line ends in '\n'.
std::string GresConfText(const v1::Inventory& inventory, GresNaming naming);

// slurm.conf's pieces: "gpu,npu" for GresTypes, and "gpu:nvidia_h100_80gb_hbm3:2,..." for the
// node's Gres= (one entry per name and type, counts summed, in record order).
std::string GresTypes(const std::vector<GresDevice>& devices);
std::string NodeGres(const std::vector<GresDevice>& devices);

// A Type value from a model name: lower case, each run of characters outside [a-z0-9] becomes
// one '_', leading/trailing '_' removed, cut to 64 characters. "" stays "".
std::string SanitizeGresType(absl::string_view text);

// Which number SLURM_STEP_GPUS / SLURM_JOB_GPUS lists for a device: Slurm 22.05 the number at the
// end of its file name (kDevNum); later releases number GPUs by their position in the node's gpu
// records (kIndex).
enum class StepNumbering { kDevNum, kIndex };
absl::StatusOr<StepNumbering> ParseStepNumbering(absl::string_view text);  // "dev_num" | "index"

// The `export NAME=value` pairs a TaskProlog prints for a step, in order.
//  - Allocation: SLURM_STEP_GPUS, else SLURM_JOB_GPUS (comma lists of numbers as `numbering`
//    says). Neither set: no mask is exported (the step has no gpu GRES Slurm announced).
//  - For each row with records: the row's first mask variable (placement::BackendSpec
//    mask_variables: CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, NEURON_RT_VISIBLE_CORES,
//    TPU_VISIBLE_CHIPS, ZE_AFFINITY_MASK, HABANA_VISIBLE_MODULES, ASCEND_RT_VISIBLE_DEVICES,
//    CN_VISIBLE_DEVICES, MUSA_VISIBLE_DEVICES) set to the ids that select exactly the row's
//    allocated devices in the job's numbering (`job_devices` as in ComputeVisibility), checked
//    by ComputeVisibility; a row with nothing allocated gets the value that hides it. Never
//    wider than the allocation: when no value selects exactly the allocation, an error.
//  - LOCAL_RANK from SLURM_LOCALID and WORLD_SIZE from SLURM_NTASKS, each only when unset, and
//    only as checked here: decimal digits (no sign, space or newline), SLURM_LOCALID 0..2^31-2,
//    SLURM_NTASKS 1..2^31-1, the one below the other (the daemon's bounds for local_rank and
//    world_size, server/placement/request.cc).
// What it returns can be printed as `export NAME=value` lines that no line can override: each
// name once, names of [A-Z0-9_], values of digits and commas only (INTERNAL otherwise).
// Errors (nothing is to be printed on any):
//  - INVALID_ARGUMENT naming the variable (its value C-escaped, cut to 64 bytes) for an allocation
//    entry that is not a decimal number or names no record (or names two: 22.05 numbering with
//    equal file numbers in two rows), or a SLURM_LOCALID / SLURM_NTASKS outside the forms above;
//  - FAILED_PRECONDITION when no value selects exactly a row's allocation, naming the cause: the
//    allocated devices whose nodes the task cannot open (not in `job_devices`), a mask that no
//    value makes exact in the job's numbering (with the closest value and what it shows), or
//    both; or when one row's export changes what another row sees.
using Exports = std::vector<std::pair<std::string, std::string>>;
absl::StatusOr<Exports> TaskPrologExports(const v1::Inventory& inventory, const std::map<std::string, std::string>& env,
                                          const v1::JobDevices* job_devices, StepNumbering numbering);

// Slurm node health check (`devplace slurm health-check`, for slurm.conf's HealthCheckProgram):
// one failure per device that is not to be used (HEALTH_FAULT or HEALTH_LOST, docs/PROBE.md
// "Device health"), in the inventory's order. `message` names the row, the host device and its bus
// id, the health, and each counter behind it with its value and source ("cuda/amd device 0
// (0000:63:00.0) FAULT: ras/umc_err_count ue 2 (sysfs /sys/.../ras/umc_err_count)"), or the vendor
// library's verdict (health_reason) when no counter is. DEGRADED devices are usable: no failure.
struct HealthFailure {
  const v1::Device* device = nullptr;
  std::string message;
};
std::vector<HealthFailure> HealthFailures(const v1::Inventory& inventory);

// The line LBNL NHC prints for a failed check ("ERROR:  nhc:  Health check failed:  <message>"),
// with devplace in nhc's place.
std::string NhcFailureLine(const HealthFailure& failure);

// What a drained node's Reason= starts with, so a later healthy check resumes only the nodes
// devplace drained (as NHC does with its "NHC: " prefix).
inline constexpr absl::string_view kDrainReasonPrefix = "devplace: ";
// At most this many bytes of reason (longer ones are cut at a UTF-8 character boundary and end in "...").
inline constexpr size_t kMaxDrainReasonBytes = 255;

// The Reason= for `scontrol update NodeName=.. State=DRAIN`: kDrainReasonPrefix and the failures'
// messages joined by "; ", at most kMaxDrainReasonBytes, with no character Slurm's parser or a
// shell would split on other than spaces (quotes, newlines and control characters become '_').
std::string DrainReason(const std::vector<HealthFailure>& failures);

}  // namespace devplace::slurm

#endif  // DEVPLACE_SERVER_EXPORT_SLURM_H_
