// Rule P-PICK (docs/SEMANTICS.md section 14): on a host that several jobs share, which devices of
// the job's row a pick hands it, and the environment that makes the job see exactly them. A pure
// function of the inventory (with its usage), the request and the devices already leased: the
// lease table itself (who holds what, for how long) is the service's (server/service/lease_table.h).
#ifndef DEVPLACE_SERVER_PLACEMENT_PICK_H_
#define DEVPLACE_SERVER_PLACEMENT_PICK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// Bounds of PickDevicesRequest (devplace.proto).
inline constexpr uint32_t kMaxPickCount = 64;
inline constexpr uint32_t kDefaultLeaseTtlMs = 300'000;
inline constexpr uint32_t kMinLeaseTtlMs = 1'000;
inline constexpr uint32_t kMaxLeaseTtlMs = 86'400'000;
inline constexpr uint32_t kMaxPickWaitMs = 3'600'000;
// Device lines of a pick's explanation and of its refusal, before "... and N more".
inline constexpr int kMaxPickDeviceLines = 64;
inline constexpr int kMaxRefusalDeviceLines = 16;
// A refusal's device line is cut after kMaxRefusalLineChars (a FAULT GPU's reason lists every
// critical XID and counter; `devplace inventory` shows it whole), so that one device cannot push
// the advice at the refusal's end out of what a client prints.
inline constexpr size_t kMaxRefusalLineChars = 200;
// The command lines a refusal that a wait may help suggests; the devplace CLI replaces them with the
// caller's own command line and --wait=D.
inline constexpr char kWaitCommands[] = "devplace pick --wait=D ... or devplace run --wait=D -- CMD";

// A unit some lease already holds: a whole device (sub_device -1, partition_uuid empty), one MIG
// instance or one sub-device. A lease on a whole device also holds its instances and sub-devices,
// and the other way round.
struct LeasedUnit {
  v1::Row row = v1::ROW_UNSPECIFIED;
  std::string pci_bus_id;
  int sub_device = -1;
  std::string partition_uuid;
  // Who holds it, for the explanation: "pid 1234's lease", "a TTL lease until 12:00:00Z".
  std::string holder;
  // No lease holds it: an older waiting pick keeps it free (the service's no-starvation rule,
  // docs/SEMANTICS.md section 14); set aside all the same, `holder` saying what that pick waits for.
  bool held_back = false;
};

// The outcome of one pick.
struct PickOutcome {
  // OK, or: INVALID_ARGUMENT (a request field out of range, or the job's ResolveDevice error);
  // FAILED_PRECONDITION (too few devices free, see no_free_device; the row is cpu, mps or absent;
  // the pick cannot be expressed in the row's variables); the job's other ResolveDevice errors.
  absl::Status status;
  // Set when status is FAILED_PRECONDITION only because too few devices are free now: waiting for
  // a lease to end or the usage to change may help.
  bool no_free_device = false;
  // When OK: everything but the lease's id, holder and times (the service's); lease.devices lists
  // the picked units.
  v1::PickDevicesResponse response;
  // When no_free_device: the units free for this request now (fewer than its count), which a
  // waiting pick keeps free from younger ones until enough are free (its holder empty).
  std::vector<LeasedUnit> free_units;
};

// Checks the request's own fields (count, ttl_ms against holder, wait_ms, enums): INVALID_ARGUMENT
// naming the field and its range, else OK.
absl::Status ValidatePickRequest(const v1::PickDevicesRequest& request);

// P-PICK: the job's visible units of the row (ComputeVisibility: its masks, P1 device nodes,
// P-DRA allocation), less those `leased`, busy (DeviceUsage.busy), used by processes (unless
// allow_shared) or with less free memory than min_free_bytes; the least used first (fewest
// processes, then least memory in use, then the job's order); `count` of them, then expressed in
// the row's mask variable and checked with ComputeVisibility to give the job exactly them.
PickOutcome Pick(const v1::Inventory& inventory, const v1::PickDevicesRequest& request,
                 const std::vector<LeasedUnit>& leased);

// Whether two units overlap (same device, and one of them whole or both the same instance or
// sub-device).
bool Overlaps(const LeasedUnit& a, const LeasedUnit& b);

// "3 processes, 12.0 GiB used, 67.2 GiB free of 80.0 GiB" for a device's usage.
std::string DescribeUsage(const v1::DeviceUsage* usage, const v1::Device& device, const v1::Partition* partition);

// P-FAIL-CLOSED (docs/SEMANTICS.md section 14): what a failed `eval "$(devplace pick)"` exports so
// that a job started from that shell sees no device of `row`: each of the row's list variables
// (MaskFormOf's, and the ones it would remove) with a value its runtime reads as "no device". An
// empty value where the rule book's E rule says empty means none (CUDA-style lists, Ascend); a
// device index no host has where empty means something else (Level Zero: every device; torch_xla
// on Neuron: LOCAL_RANK's core) or is not documented (Gaudi, TPU). ROW_UNSPECIFIED (the row is not
// known, e.g. the daemon is unreachable): every row's, each variable once, in table order. cpu and
// mps: none.
std::vector<std::pair<std::string, std::string>> NoDeviceEnvironment(v1::Row row);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_PICK_H_
