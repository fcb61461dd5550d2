#include "server/service/refresh_rounds.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/wire.h"

namespace devplace::service {

RefreshRounds::RefreshRounds(RefreshFn refresh, RenderFn render, absl::Duration min_interval)
    : refresh_(std::move(refresh)),
      render_(std::move(render)),
      min_interval_(min_interval),
      worker_([this] { Worker(); }) {}

RefreshRounds::~RefreshRounds() {
  Shutdown();
  Join();
}

void RefreshRounds::Enqueue(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* response) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    reactor->Finish(ShuttingDown());
    return;
  }
  if (!caller_round_queued_ && pending_.empty()) {  // this call would start a round of its own
    const absl::Time now = absl::Now();
    const absl::Duration wait = last_caller_round_ + min_interval_ - now;
    if (min_interval_ > absl::ZeroDuration() && wait > absl::ZeroDuration()) {
      reactor->Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("RefreshInventory starts at most one probe every ", absl::FormatDuration(min_interval_),
                       " (--refresh_min_interval); retry in ", absl::ToInt64Milliseconds(wait) + 1, " ms")));
      return;
    }
    last_caller_round_ = now;
    caller_round_queued_ = true;
  }
  pending_.push_back({reactor, response});  // the worker finishes it; the probe never blocks a gRPC thread
}

void RefreshRounds::Request() {
  absl::MutexLock lock(&mu_);
  if (!shutting_down_) pending_.push_back({nullptr, nullptr});
}

void RefreshRounds::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
}

void RefreshRounds::Join() {
  if (worker_.joinable()) worker_.join();
}

void RefreshRounds::Worker() {
  for (;;) {
    std::vector<Waiter> round;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutting_down_ || !pending_.empty(); };
      mu_.Await(absl::Condition(&work));
      round.swap(pending_);
      caller_round_queued_ = false;  // later callers queue the next round
      stopping = shutting_down_;
    }
    if (stopping) {  // no new probes once stopping: queued callers get UNAVAILABLE at once
      for (const Waiter& w : round) {
        if (w.reactor != nullptr) w.reactor->Finish(ShuttingDown());
      }
      return;
    }
    Run(round);
  }
}

void RefreshRounds::Run(const std::vector<Waiter>& round) {
  // Calls that queued up while the previous round ran share this one probe run.
  const absl::StatusOr<inventory::Snapshot> fresh = refresh_();
  std::shared_ptr<const std::string> bytes;  // rendered once for the round
  for (const Waiter& w : round) {
    if (w.reactor == nullptr) continue;
    if (fresh.ok()) {
      if (bytes == nullptr) bytes = std::make_shared<const std::string>(render_(**fresh));
      *w.response = SharedBytes(bytes);
    }
    w.reactor->Finish(ToGrpc(fresh.status()));
  }
}

}  // namespace devplace::service
