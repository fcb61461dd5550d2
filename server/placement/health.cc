#include "server/placement/health.h"

#include "absl/strings/str_cat.h"

namespace devplace::placement {

int HealthSeverity(v1::Health health) {
  switch (health) {
    case v1::HEALTH_DEGRADED: return 1;
    case v1::HEALTH_FAULT: return 2;
    case v1::HEALTH_LOST: return 3;
    default: return 0;
  }
}

v1::Health WorseHealth(v1::Health a, v1::Health b) {
  if (HealthSeverity(b) > HealthSeverity(a)) return b;
  if (a == v1::HEALTH_UNSPECIFIED && b == v1::HEALTH_OK) return b;
  return a;
}

bool HealthUsable(v1::Health health) { return HealthSeverity(health) <= 1; }

std::string HealthWord(v1::Health health) {
  switch (health) {
    case v1::HEALTH_OK: return "ok";
    case v1::HEALTH_DEGRADED: return "degraded";
    case v1::HEALTH_FAULT: return "fault";
    case v1::HEALTH_LOST: return "lost";
    default: return "unknown";
  }
}

std::string HealthWhy(const v1::Device& d) {
  return d.health_reason().empty() ? absl::StrCat("health ", HealthWord(d.health())) : d.health_reason();
}

}  // namespace devplace::placement
