// The device health model's order and what each health level allows (docs/PROBE.md "Device
// health"): OK, DEGRADED (usable, ranked after OK), FAULT and LOST (never used). Pure functions
// of the proto's Health; the probe combines counters with them, pick and the resolver read them.
#ifndef DEVPLACE_SERVER_PLACEMENT_HEALTH_H_
#define DEVPLACE_SERVER_PLACEMENT_HEALTH_H_

#include <string>

#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// Severity, best first: OK and UNSPECIFIED (nothing said) 0, DEGRADED 1, FAULT 2, LOST 3.
int HealthSeverity(v1::Health health);

// The worse of two healths (`a` on a tie); UNSPECIFIED (an unknown counter) never wins over OK.
v1::Health WorseHealth(v1::Health a, v1::Health b);

// Whether a device in this health may run a job: OK, DEGRADED (and UNSPECIFIED, not yet set).
bool HealthUsable(v1::Health health);

// "ok", "degraded", "fault", "lost" ("unknown" for UNSPECIFIED): the word the CLI, the
// explanations and the metrics use.
std::string HealthWord(v1::Health health);

// The device's reasons in one line: health_reason when set, else "health <word>".
std::string HealthWhy(const v1::Device& d);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_HEALTH_H_
