#include "tests/service/lease_testing.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {

Sleeper::Sleeper(std::optional<pid_t> group) {
  pid_ = fork();
  if (pid_ == 0) {
    if (group) setpgid(0, *group);
    for (;;) pause();
  }
  if (pid_ > 0 && group) setpgid(pid_, *group == 0 ? pid_ : *group);
}

void Sleeper::KillWithoutReaping() {
  if (pid_ > 0) kill(pid_, SIGKILL);
}

void Sleeper::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

v1::PickDevicesRequest Request(int count) {
  v1::PickDevicesRequest r;
  r.set_count(count);
  r.mutable_job()->set_workload(v1::WORKLOAD_TRAINING);
  return r;
}

v1::Inventory TwoGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  return b.Build();
}

service::LeaseHolderSpec ProcessHolder(pid_t pid, uid_t uid) {
  service::LeaseHolderSpec h;
  h.kind = v1::LEASE_HOLDER_PROCESS;
  h.process = *service::ReadProcess(pid);
  h.caller_uid = uid;
  return h;
}

service::LeaseHolderSpec TtlHolder(absl::Duration ttl, std::optional<uid_t> uid) {
  service::LeaseHolderSpec h;
  h.kind = v1::LEASE_HOLDER_TTL;
  h.ttl = ttl;
  h.caller_uid = uid;
  return h;
}

std::string PickOne(service::LeaseTable& table, const service::LeaseHolderSpec& holder) {
  const placement::PickOutcome out = table.PickAndHold(TwoGpus(), Request(1), holder);
  EXPECT_TRUE(out.status.ok()) << out.status;
  return out.response.lease().lease_id();
}

}  // namespace devplace::testing
