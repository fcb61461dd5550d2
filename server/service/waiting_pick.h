// What a waiting PickDevices call keeps (shared hosts; rule P-PICK): a pick that found too few
// devices free and asked to wait (wait_ms) is tried again whenever a lease ends, so it must keep
// its request, but only what the rules read of it. A request within every limit may be about a
// megabyte (256 env entries of 4 KiB, or 1,024 DRA devices of 64 attributes); what the rules read
// of it is a few hundred bytes to a few hundred KiB. No gRPC here.
#ifndef DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_
#define DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_

#include "devplace/v1/devplace.pb.h"

namespace devplace::service {

// `request` without what no rule reads: of job.env only the variables the resolver reads
// (placement::ReadEnvironmentVariables) and their near misses (rule E-TYPO warns about those),
// of each job.device_allocation device only the attributes rule P-DRA matches on
// (placement::IdentifyingAttribute). placement::Pick answers it exactly as it answers `request`.
v1::PickDevicesRequest KeptForWaiting(const v1::PickDevicesRequest& request);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_WAITING_PICK_H_
