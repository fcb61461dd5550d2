#include "tests/common/pid_reuse.h"

#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace devplace::testing {

pid_t SpawnGroupLeaderAtPid(pid_t pid) {
#if defined(SYS_clone3) && defined(CLONE_ARGS_SIZE_VER2)
  pid_t wanted[1] = {pid};
  clone_args args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(wanted);
  args.set_tid_size = 1;
  const long child = syscall(SYS_clone3, &args, CLONE_ARGS_SIZE_VER2);
  if (child < 0) return -1;
  if (child == 0) {  // only async-signal-safe calls from here: the parent may have threads
    setpgid(0, 0);
    for (;;) pause();
  }
  setpgid(static_cast<pid_t>(child), static_cast<pid_t>(child));  // holds when this returns
  return static_cast<pid_t>(child);
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace devplace::testing
