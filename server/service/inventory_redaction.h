// What a caller who may not see other users' processes gets of the inventory and the leases: the
// RefreshInventory access policy (service.h) decides who is privileged; these functions remove
// what only privileged callers see. Pure functions of the proto; no gRPC, no lock.
#ifndef DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_
#define DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_

#include "devplace/v1/devplace.pb.h"

namespace devplace::service {

// The lease as a caller who may not see it gets it: lease_id empty, pid 0.
void RedactLease(v1::LeaseInfo& lease);
// Removes what only privileged callers see from an inventory: every DeviceUsageProcess's pid and
// uid (devices and MIG instances) and the leases' ids and pids.
void RedactInventory(v1::Inventory& inventory);
// Whether `inventory` holds anything RedactInventory would remove: a lease, or a process in any
// device's or partition's usage.
bool HasPrivateUsage(const v1::Inventory& inventory);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_INVENTORY_REDACTION_H_
