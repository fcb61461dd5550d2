// What a caller who may not see other users' processes gets of the inventory and the leases: the
// RefreshInventory access policy (service.h) decides who is privileged; these functions remove
// what only privileged callers see. Pure functions of the proto; no gRPC, no lock.
#ifndef DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_
#define DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_

#include <cstdint>
#include <optional>

#include "devplace/v1/devplace.pb.h"

namespace devplace::service {

// Who reads the inventory. A privileged caller (root, the daemon's user, the socket's group, a
// verified mTLS client) sees every lease and process; another sees its own leases whole (`uid`:
// the caller's, known over the unix socket; a lease whose LeaseInfo.uid is that uid) and the
// others' without id or pid.
struct Viewer {
  bool privileged = false;
  std::optional<uint32_t> uid;
};

// The lease as `viewer` gets it: unchanged for a privileged viewer or its owner, else lease_id
// empty and pid 0.
void RedactLease(v1::LeaseInfo& lease, const Viewer& viewer);
// Removes what only privileged callers see from an inventory: every DeviceUsageProcess's pid and
// uid (devices and MIG instances) and the leases' ids and pids (all of them: the leases a caller
// owns are added back by the service with RedactLease).
void RedactInventory(v1::Inventory& inventory);
// Whether `inventory` holds anything RedactInventory would remove: a lease, or a process in any
// device's or partition's usage.
bool HasPrivateUsage(const v1::Inventory& inventory);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_
