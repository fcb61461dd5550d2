#include "server/service/waiting_pick.h"

#include <algorithm>
#include <string>
#include <vector>

#include "server/placement/allocation.h"
#include "server/placement/env_typos.h"

namespace devplace::service {

v1::PickDevicesRequest KeptForWaiting(const v1::PickDevicesRequest& request) {
  v1::PickDevicesRequest kept = request;
  v1::ResolveDeviceRequest& job = *kept.mutable_job();
  const std::vector<std::string>& read = placement::ReadEnvironmentVariables();
  auto& env = *job.mutable_env();
  for (auto it = env.begin(); it != env.end();) {
    const bool needed = std::find(read.begin(), read.end(), it->first) != read.end() ||
                        placement::NearMissOf(it->first).has_value();
    it = needed ? std::next(it) : env.erase(it);
  }
  for (v1::AllocatedDevice& d : *job.mutable_device_allocation()->mutable_devices()) {
    auto& attributes = *d.mutable_attributes();
    for (auto it = attributes.begin(); it != attributes.end();) {
      it = placement::IdentifyingAttribute(it->first, d.driver()) ? std::next(it) : attributes.erase(it);
    }
  }
  return kept;
}

}  // namespace devplace::service
