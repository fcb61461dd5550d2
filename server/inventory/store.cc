#include "server/inventory/store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/common/version.h"

namespace devplace::inventory {
namespace {

constexpr absl::Duration kMaxFirstProbeBackoff = absl::Seconds(60);

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  google::protobuf::Timestamp ts;
  const int64_t seconds = absl::ToUnixSeconds(t);
  ts.set_seconds(seconds);
  ts.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
  return ts;
}

ProbeRunnerOptions RunnerOptions(const StoreOptions& options) {
  ProbeRunnerOptions runner;
  runner.timeout = options.probe_timeout;
  return runner;
}

}  // namespace

bool SameContent(const v1::Inventory& a, const v1::Inventory& b) {
  google::protobuf::util::MessageDifferencer differencer;
  const google::protobuf::Descriptor* inventory = v1::Inventory::descriptor();
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kRevisionFieldNumber));
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kProbedAtFieldNumber));
  differencer.IgnoreField(v1::ProbeReport::descriptor()->FindFieldByNumber(v1::ProbeReport::kDurationMsFieldNumber));
  // Telemetry that moves on every probe: a new value is published, but it is not a new revision.
  differencer.IgnoreField(v1::Host::descriptor()->FindFieldByNumber(v1::Host::kMemoryAvailableBytesFieldNumber));
  differencer.IgnoreField(v1::Device::descriptor()->FindFieldByNumber(v1::Device::kMemoryFreeBytesFieldNumber));
  return differencer.Compare(a, b);
}

InventoryStore::InventoryStore(StoreOptions options)
    : options_(std::move(options)),
      epoch_(options_.epoch != 0 ? options_.epoch : static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()))),
      runner_(options_.probe_command, RunnerOptions(options_)),
      last_result_(absl::UnavailableError("no probe has run yet")) {
  last_outcome_.status = absl::UnavailableError("no probe has run yet");
}

InventoryStore::~InventoryStore() { Stop(); }

Snapshot InventoryStore::Current() const {
  absl::ReaderMutexLock lock(&mu_);
  return current_;
}

ProbeOutcome InventoryStore::LastOutcome() const {
  absl::ReaderMutexLock lock(&mu_);
  return last_outcome_;
}

std::optional<ProbeOutcome> InventoryStore::LastError() const {
  absl::ReaderMutexLock lock(&mu_);
  return last_error_;
}

bool InventoryStore::InCallback() const {
  absl::ReaderMutexLock lock(&mu_);
  return delivering_thread_ == std::this_thread::get_id();
}

absl::StatusOr<v1::Inventory> InventoryStore::ProbeOnce(absl::Duration& duration) {
  ProbeResult result = runner_.Run();
  duration = result.duration;
  if (!result.inventory.ok()) return result.inventory.status();
  v1::Inventory& fresh = *result.inventory;
  if (fresh.backends_size() == 0 || fresh.backends(0).row() != v1::ROW_CPU) {
    return absl::InternalError(absl::StrCat("probe output lists no cpu row (", fresh.ByteSizeLong(),
                                            " bytes): not a devplace-probe inventory"));
  }
  if (options_.augment) {
    if (absl::Status status = options_.augment(fresh); !status.ok()) return status;
  }
  return std::move(fresh);
}

absl::StatusOr<Snapshot> InventoryStore::Refresh() {
  Snapshot previous;
  {
    absl::MutexLock lock(&mu_);
    if (delivering_thread_ == std::this_thread::get_id()) {
      return absl::FailedPreconditionError("InventoryStore::Refresh called from a subscriber callback");
    }
    if (runs_started_ != runs_done_) {  // coalesce with the run in flight
      const uint64_t run = runs_started_;
      while (runs_done_ < run) run_done_.Wait(&mu_);
      return last_result_;
    }
    ++runs_started_;
    previous = current_;  // only the run in flight replaces current_, so this stays current
  }

  absl::Duration duration;
  absl::StatusOr<v1::Inventory> fresh = ProbeOnce(duration);
  const absl::Time finished = absl::Now();
  Snapshot published;
  bool changed = false;
  if (fresh.ok()) {
    fresh->clear_revision();
    fresh->set_epoch(epoch_);
    fresh->set_daemon_version(kVersion);
    *fresh->mutable_probed_at() = ToTimestamp(finished);
    const uint64_t revision = previous ? previous->revision() : 0;
    changed = previous == nullptr || !SameContent(*previous, *fresh);
    fresh->set_revision(changed ? revision + 1 : revision);
    published = std::make_shared<const v1::Inventory>(std::move(*fresh));
  }

  absl::StatusOr<Snapshot> result;
  ProbeOutcome outcome;  // this run's, for on_probe (last_outcome_ may already be a later run's)
  {
    absl::MutexLock lock(&mu_);
    outcome.status = fresh.status();
    outcome.finished_at = finished;
    outcome.duration = duration;
    outcome.changed = changed;
    if (published) current_ = published;
    outcome.revision = current_ ? current_->revision() : 0;
    last_outcome_ = outcome;
    if (!outcome.status.ok()) last_error_ = outcome;
    result = published ? absl::StatusOr<Snapshot>(published) : absl::StatusOr<Snapshot>(fresh.status());
    last_result_ = result;
    runs_done_ = runs_started_;
    run_done_.SignalAll();
  }
  if (options_.on_probe) options_.on_probe(outcome);
  if (changed) Deliver(published);
  return result;
}

void InventoryStore::Deliver(const Snapshot& snapshot) {
  absl::MutexLock deliver_lock(&deliver_mu_);
  if (snapshot->revision() <= delivered_revision_) return;  // a newer one was delivered already
  delivered_revision_ = snapshot->revision();
  std::vector<SubscriptionId> ids;
  {
    absl::MutexLock lock(&mu_);
    delivering_thread_ = std::this_thread::get_id();
    for (const auto& [id, subscriber] : subscribers_) {
      if (subscriber.after_revision < snapshot->revision()) ids.push_back(id);
    }
  }
  for (SubscriptionId id : ids) {
    std::shared_ptr<const Callback> callback;
    {
      absl::MutexLock lock(&mu_);  // re-checked: a callback may have unsubscribed this one
      auto it = subscribers_.find(id);
      if (it == subscribers_.end()) continue;
      callback = it->second.callback;
    }
    (*callback)(snapshot);
  }
  absl::MutexLock lock(&mu_);
  delivering_thread_ = std::thread::id();
}

InventoryStore::SubscriptionId InventoryStore::Subscribe(Callback callback, Snapshot* current) {
  absl::MutexLock lock(&mu_);
  const SubscriptionId id = next_subscription_++;
  subscribers_[id] = Subscriber{std::make_shared<const Callback>(std::move(callback)),
                                current_ ? current_->revision() : 0};
  if (current != nullptr) *current = current_;
  return id;
}

void InventoryStore::Unsubscribe(SubscriptionId id) {
  {
    absl::MutexLock lock(&mu_);
    subscribers_.erase(id);
    if (delivering_thread_ == std::this_thread::get_id()) return;
  }
  absl::MutexLock wait_for_delivery(&deliver_mu_);
}

void InventoryStore::Start(absl::Duration interval) {
  absl::MutexLock thread_lock(&thread_mu_);
  if (timer_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  timer_ = std::thread([this, interval] { TimerLoop(interval); });
}

void InventoryStore::Stop() {
  absl::MutexLock thread_lock(&thread_mu_);
  if (!timer_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_.join();
}

void InventoryStore::TimerLoop(absl::Duration interval) {
  absl::Duration backoff = absl::Seconds(1);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    (void)Refresh();  // the outcome is recorded in LastOutcome / LastError
    absl::MutexLock lock(&mu_);
    // Until the first success, retry with backoff (1 s doubling, at most the interval or 60 s,
    // whichever is shorter), also when the interval is infinite (refreshes only on request).
    absl::Duration wait = interval;
    if (current_ == nullptr) {
      wait = std::min(backoff, std::min(interval, kMaxFirstProbeBackoff));
      backoff = std::min(backoff * 2, kMaxFirstProbeBackoff);
    }
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait)) return;
  }
}

}  // namespace devplace::inventory
