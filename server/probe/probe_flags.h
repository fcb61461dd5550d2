// The ProbeOptions of devplace-probe (main.cc) and `devplace probe` (client/cli/probe.cc), built
// from their flags in one place.
#ifndef DEVPLACE_SERVER_PROBE_PROBE_FLAGS_H_
#define DEVPLACE_SERVER_PROBE_PROBE_FLAGS_H_

#include "absl/time/time.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// Every registered library's path from its --<name>_library flag (server/common/
// vendor_library_flags.h) and `probe_timeout` (the caller's --probe_timeout, positive) as the
// whole probe's deadline.
ProbeOptions ProbeOptionsFromFlags(absl::Duration probe_timeout);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_PROBE_FLAGS_H_
