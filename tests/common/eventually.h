// Waiting in a test for what another thread or process does.
#ifndef DEVPLACE_TESTS_COMMON_EVENTUALLY_H_
#define DEVPLACE_TESTS_COMMON_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace devplace::testing {

// Polls `done` every 5 ms for up to `within`; whether it came true.
template <typename F>
bool Eventually(F done, absl::Duration within = absl::Seconds(5)) {
  const absl::Time give_up = absl::Now() + within;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_EVENTUALLY_H_
