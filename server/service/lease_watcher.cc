#include "server/service/lease_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/time/clock.h"

namespace devplace::service {

LeaseWatcher::LeaseWatcher(std::function<Waits()> waits, std::function<void()> sweep, absl::Duration recheck)
    : waits_(std::move(waits)),
      sweep_(std::move(sweep)),
      recheck_(recheck),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      thread_([this] { Run(); }) {}

LeaseWatcher::~LeaseWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void LeaseWatcher::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
}

void LeaseWatcher::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const Waits waits = waits_();
    std::vector<pollfd> fds;
    fds.reserve(waits.pidfds.size() + 1);
    for (const int fd : waits.pidfds) fds.push_back({fd, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    const absl::Duration wait = std::min(recheck_, std::max(waits.next_expiry - absl::Now(), absl::ZeroDuration()));
    const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1;
    if (poll(fds.data(), fds.size(), timeout_ms) > 0 && (fds.back().revents & POLLIN)) {
      uint64_t drained = 0;
      (void)!read(wake_fd_, &drained, sizeof drained);
    }
    sweep_();
  }
}

}  // namespace devplace::service
