// A process started at a pid of the test's choosing, as the kernel would give a freed pid to a
// stranger: clone3(2) with set_tid (Linux 5.5; CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE in the pid
// namespace, i.e. a test run as root). For tests of what devplaced does when a lease holder's pid
// is reused.
#ifndef DEVPLACE_TESTS_COMMON_PID_REUSE_H_
#define DEVPLACE_TESTS_COMMON_PID_REUSE_H_

#include <sys/types.h>

namespace devplace::testing {

// Starts a child at `pid` that leads a process group of its own (setpgid(0, 0)) and sleeps until
// killed; the caller reaps it. Returns `pid`, or -1 with errno set: EPERM without the capability,
// EEXIST when `pid` is taken, ENOSYS where clone3 or set_tid is missing.
pid_t SpawnGroupLeaderAtPid(pid_t pid);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_PID_REUSE_H_
