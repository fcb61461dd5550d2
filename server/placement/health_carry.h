// The daemon's rule for a health counter that turns unknown (docs/PROBE.md "Device health", "A
// reading that turns unknown"): a counter whose last known reading made its device FAULT or LOST
// keeps that reading while later probes cannot read it, so one failed read never shows a failing
// device as OK (and a pick never leases it on that read). Pure function of two inventories.
#ifndef DEVPLACE_SERVER_PLACEMENT_HEALTH_CARRY_H_
#define DEVPLACE_SERVER_PLACEMENT_HEALTH_CARRY_H_

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// How a kept counter's rule begins: "kept from the probe at <RFC 3339 UTC time>: <the rule then>;
// unknown now: <why it cannot be read now>".
inline constexpr absl::string_view kKeptReadingPrefix = "kept from the probe at ";

// Applies the rule to `fresh` (a new probe's inventory) against `previous` (the snapshot it
// replaces). A device of `fresh` is matched to one of `previous` in the same row by pci_bus_id
// (non-empty), and when both have a uuid, the uuids must be equal (a different uuid is another
// device: nothing is kept). For each of the device's counters that is unknown now
// (effect HEALTH_UNSPECIFIED) and whose counter of the same name and source in `previous` has
// effect HEALTH_FAULT or HEALTH_LOST (read then, or itself kept), the counter takes the earlier
// value and effect, its rule saying from which probe's time (`previous.probed_at`, or the time a
// kept counter already names) and why it is unknown now. DEGRADED readings are not kept (they only
// reorder picks, and the clocks-event reasons are readings of the moment). Then the device's
// health, health_reason, usable and unusable_reason, and its backend's state, follow. A counter
// read again (effect not UNSPECIFIED) is never touched: the new reading decides; a counter that is
// gone (the host no longer offers it) is not kept.
void KeepFaultReadings(const v1::Inventory& previous, v1::Inventory& fresh);

// Whether `name` is a count of corrected errors that restarts with the driver or the host (NVML's
// and MTML's "ecc.errors.corrected.volatile.total", NVML's "remapped_rows.correctable", DCMI's
// "hbm_ecc.single_bit_error_cnt", amdgpu's "ras/<block>_err_count ce", sysfs "aer_dev_correctable"):
// the counters MarkRisingCorrectedErrors watches. Lifetime totals are not (they rise with these).
bool IsCorrectedErrorCount(absl::string_view name);

// Corrected errors rising (docs/PROBE.md "Device health", "Corrected errors rising"): a device of
// `fresh` matched to one of `previous` as KeepFaultReadings matches them, whose corrected-error
// count (IsCorrectedErrorCount, effect HEALTH_OK now, a whole number now and then, same name and
// source) is higher than in `previous`, gets that counter's effect HEALTH_DEGRADED and the rule
// "rising since the probe at <previous probe time> (<earlier count> then): ...", and the device's
// health and health_reason follow (usable
// stays: a DEGRADED device is picked after the OK ones). A count that fell (the driver reloaded)
// or stayed is left as read; the next probe that sees no rise makes the device OK again.
void MarkRisingCorrectedErrors(const v1::Inventory& previous, v1::Inventory& fresh);

// What devplaced's store runs on each full probe's result: KeepFaultReadings, then
// MarkRisingCorrectedErrors.
void CarryHealth(const v1::Inventory& previous, v1::Inventory& fresh);

// What KeepFaultReadings would keep from `snapshot`, for devplaced's health file (docs/PROBE.md
// "A reading that survives a restart"): an inventory of only the rows whose devices have a FAULT or
// LOST health counter (read by the latest probe, or itself kept), each such device with only its
// pci_bus_id, uuid and those counters (name, value, source, effect, rule), and `probed_at`. XID
// counters (source kXidSource, xid_health.h) are left out: they count since devplaced started.
// A kept counter's rule loses its "; unknown now: <why>" part, so the result changes only when a
// reading does, not at every probe that still cannot read it. Devices without a pci_bus_id are
// left out (KeepFaultReadings matches by it). As `previous` of KeepFaultReadings it keeps those
// readings where the counters are unknown now, naming the probe that read them.
v1::Inventory FaultReadings(const v1::Inventory& snapshot);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_HEALTH_CARRY_H_
