// The steps of rule P-PICK (docs/SEMANTICS.md section 14), shared by its files: pick.h is the
// interface, and nothing outside server/placement includes this header but the steps' own tests
// (tests/placement/pick_steps_test.cc). Pick() (pick.cc) runs them in the order of the rule:
//   pick.cc             the request's bounds, step 1 (the row) and the sequence of steps
//   pick_candidates.cc  step 2 (the job's units of the row) and step 3 (each judged, set aside or not)
//   pick_rank.cc        step 4 (the least used first: Better), the explanation's lines, the refusal
//   pick_mask.cc        step 5 (the row's variable naming the pick, checked) and step 6 (the job's answer)
#ifndef DEVPLACE_SERVER_PLACEMENT_PICK_INTERNAL_H_
#define DEVPLACE_SERVER_PLACEMENT_PICK_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/allocation.h"
#include "server/placement/pick.h"
#include "server/placement/visibility.h"

namespace devplace::placement::pick_internal {

// "12.0 GiB": bytes in GiB (2^30), one decimal.
std::string Gib(uint64_t bytes);

// ---- step 1: the row (pick.cc) ----

// How a row's pick is written: the list variable set, and the row's other variables that would
// narrow it again (removed from the job's environment).
struct MaskForm {
  const char* variable;
  std::vector<const char*> unset;
};

// The form of each row a pick can mask (every accelerator row but mps); nullopt for cpu, mps and
// ROW_UNSPECIFIED.
std::optional<MaskForm> MaskFormOf(v1::Row row);

// The row the pick takes from: `named` when set, else the row of `job`'s own ResolveDevice answer
// (adding "P-PICK the job's answer is ..." to `out`'s explanation). Sets `out.backend`. Errors: the
// job's own ResolveDevice error; FAILED_PRECONDITION when the job's answer is cpu, the row is cpu
// or mps, or the host has no hardware of the row (naming the rows it has).
absl::StatusOr<const v1::Backend*> PickRow(const v1::Inventory& inventory, v1::Row named,
                                           const v1::ResolveDeviceRequest& job, v1::PickDevicesResponse& out);

// ---- step 2: the job's units of the row (pick_candidates.cc) ----

// The job's view of the row, as the resolver computes it, and the units the pick chooses from.
struct JobView {
  const v1::JobDevices* job_devices = nullptr;  // the job's device nodes (P1); null when absent
  std::optional<JobAllocation> allocation;      // its DRA allocation matched (P-DRA); nullopt when absent
  // The units the pick chooses from, in the job's order: the job's visible units; where CUDA
  // itself would pick one MIG instance (E-MIG, no MIG- UUID named), every instance with a UUID of
  // the GPUs the job may name and every GPU without MIG, since the pick names one by UUID.
  std::vector<VisibleUnit> pool;

  const JobAllocation* alloc() const { return allocation ? &*allocation : nullptr; }
};

// The job's view of `backend`'s row: its masks, device nodes (P1) and DRA allocation (P-DRA)
// through ComputeVisibility, whose steps (and, under E-MIG, the pool's) go to `out`'s explanation.
// Errors: MatchAllocation's and ComputeVisibility's; FAILED_PRECONDITION "P-PICK the job sees no
// <row> device: <why>" when the pool is empty. `job_devices` points into `job`, which must outlive
// the view.
absl::StatusOr<JobView> ViewOf(const v1::Inventory& inventory, const v1::Backend& backend,
                               const v1::ResolveDeviceRequest& job, v1::PickDevicesResponse& out);

// ---- step 3: each unit judged (pick_candidates.cc) ----

// `u` of `row` as a LeasedUnit (no holder): what a lease on it, or a wait for it, names.
LeasedUnit AsLeased(v1::Row row, const VisibleUnit& u);

// One unit the job may use, judged.
struct Candidate {
  VisibleUnit unit;
  int job_index = 0;      // position in the pool (the job's order)
  bool eligible = false;
  bool taken = false;     // leased, busy or in use: a wait may free it
  std::string why;        // why not eligible, or what makes it a good choice
  uint32_t processes = 0;      // DeviceUsage.process_count; 0 when the library does not list them
  uint64_t used = 0;           // DeviceUsage.memory_used_bytes; 0 when unknown
  bool usage_unknown = false;  // no vendor library read its usage: it may be in use outside leases
  bool free_unknown = false;   // its free memory is unknown
  bool unusable = false;       // the job sees it but cannot use it (P4: e.g. an iGPU PyTorch's xpu lacks)
  bool degraded = false;       // Device.health DEGRADED: usable, taken after the OK ones (step 4)
  bool picked = false;         // among the first `count` by Better (step 4)
};

// Judges `unit` (position `job_index` in the pool) for a pick of `count` units of `row`. Set
// aside, in this order, each with its reason in `why` ("not picked: ..."): not usable (P4), a unit
// some lease in `leased` overlaps (or that an older waiting pick keeps free: LeasedUnit::held_back),
// busy (DeviceUsage.busy), a MIG instance when count > 1, in use by processes unless
// request.allow_shared, free memory unknown or below request.min_free_bytes.
// Otherwise eligible, `why` its usage (DescribeUsage).
Candidate Judge(const VisibleUnit& unit, int job_index, v1::Row row, const v1::PickDevicesRequest& request,
                uint32_t count, const std::vector<LeasedUnit>& leased);

// ---- step 4: the least used first (pick_rank.cc) ----

// Whether eligible candidate `a` is handed out before `b`: a strict weak ordering whose keys, in
// order, each decide only where the ones before it tie (P-PICK step 4).
bool Better(const Candidate& a, const Candidate& b);

// Marks `picked` the first `count` eligible candidates by Better; returns how many it marked
// (fewer than `count` when fewer are eligible).
size_t PickLeastUsed(std::vector<Candidate>& candidates, uint32_t count);

// Adds to `out`'s explanation one "P-PICK <unit>: ..." line per candidate (picked, free, or why
// not picked) and one per device of `backend` outside `pool` (not the job's), at most
// kMaxPickDeviceLines in all, then "... and N more unit(s)" for the candidates past them. Returns
// the first kMaxRefusalDeviceLines candidates' lines, for a refusal. `picked`: how many are picked.
std::vector<std::string> ExplainCandidates(const std::vector<Candidate>& candidates, size_t picked, uint32_t count,
                                           const v1::Backend& backend, const std::vector<VisibleUnit>& pool,
                                           v1::PickDevicesResponse& out);

// The refusal when only `picked` of `count` are free (FAILED_PRECONDITION, listing `refusal` and
// how many candidates it leaves out): more than the job may ever use, or min_free_bytes where no
// usable candidate's free memory is known, can never be met (`no_free_device` stays false);
// otherwise `no_free_device` is set and the advice fits: waiting when some are taken, sharing when
// some are in use, less free memory when min_free_bytes is set, fewer.
absl::Status TooFewFree(const std::vector<Candidate>& candidates, const std::vector<std::string>& refusal,
                        size_t picked, uint32_t count, const v1::PickDevicesRequest& request,
                        const v1::Backend& backend, bool& no_free_device);

// ---- step 5: the row's variable naming the pick (pick_mask.cc) ----

// The picked units (candidates with `picked`), in the job's order.
std::vector<VisibleUnit> Chosen(const std::vector<Candidate>& candidates);

// The environment that hands the job `chosen`.
struct PickMask {
  std::string value;  // form.variable's value
  Env set;            // the variables the job sets (form.variable; CUDA_DEVICE_ORDER when by index)
  Env applied;        // the job's whole environment with them, less form.unset
};

// Writes `chosen` in form.variable: cuda/nvidia by UUID (GPU-/MIG-) when every unit has one, else
// (and every other row) by position in the job's numbering without the row's list variables (with
// CUDA_DEVICE_ORDER=PCI_BUS_ID for cuda/nvidia), Gaudi by module id. Adds to `out.unset` each of
// form.unset the job's environment sets. FAILED_PRECONDITION when a unit has no index there.
absl::StatusOr<PickMask> MaskFor(const std::vector<VisibleUnit>& chosen, const MaskForm& form,
                                 const v1::Backend& backend, const v1::ResolveDeviceRequest& job, const JobView& view,
                                 v1::PickDevicesResponse& out);

// Whether the job with `mask.applied` sees exactly `chosen`, in this order (ComputeVisibility);
// else FAILED_PRECONDITION "P-PICK cannot hand the job <units> through VAR=value: the job would
// see <units, its error, or nothing>".
absl::Status CheckMask(const std::vector<VisibleUnit>& chosen, const MaskForm& form, const PickMask& mask,
                       const v1::Backend& backend, const JobView& view);

// Fills `out` for the checked pick: env, devices (<type>:0 ...), placed, lease.devices, and the
// explanation line "P-PICK the job gets VAR=value (and unsets ...): it sees ...".
void HandOut(const std::vector<VisibleUnit>& chosen, const MaskForm& form, const PickMask& mask,
             const v1::Backend& backend, v1::PickDevicesResponse& out);

// ---- step 6: the job's answer (pick_mask.cc) ----

// `job`'s ResolveDevice answer with `mask.applied`: out.device, a warning naming the picked units
// whose usage is unknown, the answer's warnings, and "P-PICK with it the job's answer is ...".
// Errors: the answer's.
absl::Status AnswerWith(const v1::Inventory& inventory, const v1::ResolveDeviceRequest& job, const PickMask& mask,
                        const std::vector<Candidate>& candidates, v1::PickDevicesResponse& out);

}  // namespace devplace::placement::pick_internal

#endif  // DEVPLACE_SERVER_PLACEMENT_PICK_INTERNAL_H_
