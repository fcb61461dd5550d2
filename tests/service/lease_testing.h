// What the lease tests share: child processes as lease holders, and picks on a small host.
#ifndef DEVPLACE_TESTS_SERVICE_LEASE_TESTING_H_
#define DEVPLACE_TESTS_SERVICE_LEASE_TESTING_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/service/lease_table.h"
#include "tests/common/eventually.h"

namespace devplace::testing {

// A child that sleeps until killed: a lease holder whose life the test controls.
class Sleeper {
 public:
  // `group`: the process group the child joins (setpgid, by the child and by the test, so that it
  // holds when the constructor returns): nullopt keeps the test's, 0 makes it lead a new one.
  explicit Sleeper(std::optional<pid_t> group = std::nullopt);
  ~Sleeper() { Kill(); }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;
  // SIGKILL, then reaps it: its pid is free for reuse.
  void Kill();
  // SIGKILL without reaping: a zombie (state Z) until Kill().
  void KillWithoutReaping();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

v1::PickDevicesRequest Request(int count);
v1::Inventory TwoGpus();
// PROCESS holder `pid` (as ReadProcess sees it now), picked by `uid`.
service::LeaseHolderSpec ProcessHolder(pid_t pid, uid_t uid);
service::LeaseHolderSpec TtlHolder(absl::Duration ttl, std::optional<uid_t> uid = std::nullopt);
// One device of TwoGpus() for `holder`: the lease id (a test failure when the pick fails).
std::string PickOne(service::LeaseTable& table, const service::LeaseHolderSpec& holder);
}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_SERVICE_LEASE_TESTING_H_
