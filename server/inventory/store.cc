#include "server/inventory/store.h"

#include <algorithm>
#include <map>
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

// Whether each device and partition of `a` has a free-memory figure exactly where `b`'s has one
// (`a` and `b` list the same devices and partitions: SameContent compared them first). The
// figure is telemetry, but whether it is known is content: answers budget with it (rule I-MEM)
// or, without it, leave max_memory empty and say why.
bool SameMemoryKnown(const v1::Inventory& a, const v1::Inventory& b) {
  for (int i = 0; i < a.backends_size(); ++i) {
    for (int j = 0; j < a.backends(i).devices_size(); ++j) {
      const v1::Device& x = a.backends(i).devices(j);
      const v1::Device& y = b.backends(i).devices(j);
      if (x.has_memory_free_bytes() != y.has_memory_free_bytes()) return false;
      for (int k = 0; k < x.partitions_size(); ++k) {
        if (x.partitions(k).has_memory_free_bytes() != y.partitions(k).has_memory_free_bytes()) return false;
      }
    }
  }
  return true;
}

}  // namespace

namespace {

// The XID watcher's own report (devplaced's "nvml_xid": starting, watching, unknown, restarted) is
// telemetry: its status and message move without a new revision; the XIDs it counted are device
// counters, which are content.
class IgnoreXidWatcherReport : public google::protobuf::util::MessageDifferencer::IgnoreCriteria {
 public:
  bool IsIgnored(const google::protobuf::Message& message1, const google::protobuf::Message& message2,
                 const google::protobuf::FieldDescriptor* field,
                 const std::vector<google::protobuf::util::MessageDifferencer::SpecificField>&) override {
    if (field->containing_type() != v1::ProbeReport::descriptor()) return false;
    if (field->number() != v1::ProbeReport::kMessageFieldNumber &&
        field->number() != v1::ProbeReport::kStatusFieldNumber) {
      return false;
    }
    return static_cast<const v1::ProbeReport&>(message1).name() == kXidWatcherReport &&
           static_cast<const v1::ProbeReport&>(message2).name() == kXidWatcherReport;
  }
};

}  // namespace

bool SameContent(const v1::Inventory& a, const v1::Inventory& b) {
  google::protobuf::util::MessageDifferencer differencer;
  differencer.AddIgnoreCriteria(new IgnoreXidWatcherReport);
  const google::protobuf::Descriptor* inventory = v1::Inventory::descriptor();
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kRevisionFieldNumber));
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kProbedAtFieldNumber));
  differencer.IgnoreField(v1::ProbeReport::descriptor()->FindFieldByNumber(v1::ProbeReport::kDurationMsFieldNumber));
  // Telemetry that moves on every probe: a new value is published, but it is not a new revision.
  differencer.IgnoreField(v1::Host::descriptor()->FindFieldByNumber(v1::Host::kMemoryAvailableBytesFieldNumber));
  differencer.IgnoreField(v1::Device::descriptor()->FindFieldByNumber(v1::Device::kMemoryFreeBytesFieldNumber));
  // Usage: when it was read and how much memory is in use move all the time; who uses a device
  // (processes, busy) is content.
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kUsageReadAtFieldNumber));
  differencer.IgnoreField(v1::Partition::descriptor()->FindFieldByNumber(v1::Partition::kMemoryFreeBytesFieldNumber));
  differencer.IgnoreField(
      v1::DeviceUsage::descriptor()->FindFieldByNumber(v1::DeviceUsage::kMemoryUsedBytesFieldNumber));
  differencer.IgnoreField(
      v1::DeviceUsageProcess::descriptor()->FindFieldByNumber(v1::DeviceUsageProcess::kUsedMemoryBytesFieldNumber));
  return differencer.Compare(a, b) && SameMemoryKnown(a, b);
}

void MergeUsage(const v1::Inventory& usage, absl::Time read_at, v1::Inventory& into) {
  std::map<std::pair<int, std::string>, const v1::Device*> read;
  for (const v1::Backend& b : usage.backends()) {
    for (const v1::Device& d : b.devices()) read[{b.row(), d.pci_bus_id()}] = &d;
  }
  for (v1::Backend& b : *into.mutable_backends()) {
    for (v1::Device& d : *b.mutable_devices()) {
      const auto it = read.find({b.row(), d.pci_bus_id()});
      if (it == read.end()) {
        d.clear_usage();
        continue;
      }
      const v1::Device& fresh = *it->second;
      if (fresh.has_usage()) {
        *d.mutable_usage() = fresh.usage();
      } else {
        d.clear_usage();
      }
      if (fresh.has_memory_free_bytes()) {
        d.set_memory_free_bytes(fresh.memory_free_bytes());
      } else {
        d.clear_memory_free_bytes();
      }
      for (v1::Partition& p : *d.mutable_partitions()) {
        const auto same = std::find_if(fresh.partitions().begin(), fresh.partitions().end(), [&](const v1::Partition& f) {
          return !p.uuid().empty() ? f.uuid() == p.uuid()
                                   : f.gpu_instance_id() == p.gpu_instance_id() &&
                                         f.compute_instance_id() == p.compute_instance_id();
        });
        if (same == fresh.partitions().end()) {
          p.clear_usage();
          continue;
        }
        if (same->has_usage()) {
          *p.mutable_usage() = same->usage();
        } else {
          p.clear_usage();
        }
        if (same->has_memory_free_bytes()) {
          p.set_memory_free_bytes(same->memory_free_bytes());
        } else {
          p.clear_memory_free_bytes();
        }
      }
    }
  }
  *into.mutable_usage_read_at() = ToTimestamp(read_at);
}

InventoryStore::InventoryStore(StoreOptions options)
    : options_(std::move(options)),
      epoch_(options_.epoch != 0 ? options_.epoch : static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()))),
      runner_(options_.probe_command, RunnerOptions(options_)),
      usage_runner_(options_.usage_command, RunnerOptions(options_)),
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
  }

  absl::Duration duration;
  absl::StatusOr<v1::Inventory> fresh = ProbeOnce(duration);
  const absl::Time finished = absl::Now();
  Snapshot published;
  bool changed = false;
  if (fresh.ok()) {
    *fresh->mutable_probed_at() = ToTimestamp(finished);
    // The full probe reads the usage too.
    const bool has_usage = std::any_of(fresh->backends().begin(), fresh->backends().end(), [](const v1::Backend& b) {
      return std::any_of(b.devices().begin(), b.devices().end(), [](const v1::Device& d) { return d.has_usage(); });
    });
    if (has_usage) *fresh->mutable_usage_read_at() = ToTimestamp(finished);
    published = Publish(
        [&](const Snapshot& base) {
          v1::Inventory next = *fresh;
          const v1::Inventory* previous = base != nullptr ? base.get() : options_.carry_from.get();
          if (previous != nullptr && options_.carry) options_.carry(*previous, next);
          return next;
        },
        changed);
  }

  absl::StatusOr<Snapshot> result;
  ProbeOutcome outcome;  // this run's, for on_probe (last_outcome_ may already be a later run's)
  {
    absl::MutexLock lock(&mu_);
    outcome.status = fresh.status();
    outcome.finished_at = finished;
    outcome.duration = duration;
    outcome.changed = changed;
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

Snapshot InventoryStore::Publish(const std::function<v1::Inventory(const Snapshot& base)>& make, bool& changed) {
  for (;;) {
    Snapshot base;
    {
      absl::ReaderMutexLock lock(&mu_);
      base = current_;
    }
    v1::Inventory next = make(base);
    next.set_epoch(epoch_);
    next.set_daemon_version(kVersion);
    next.clear_revision();
    const uint64_t revision = base ? base->revision() : 0;
    changed = base == nullptr || !SameContent(*base, next);
    next.set_revision(changed ? revision + 1 : revision);
    auto published = std::make_shared<const v1::Inventory>(std::move(next));
    absl::MutexLock lock(&mu_);
    if (current_ != base) continue;  // another refresh published meanwhile: number against it
    current_ = published;
    return published;
  }
}

absl::StatusOr<Snapshot> InventoryStore::RefreshUsage() {
  if (options_.usage_command.empty()) return absl::FailedPreconditionError("no usage refresh configured");
  if (InCallback()) return absl::FailedPreconditionError("InventoryStore::RefreshUsage called from a subscriber callback");
  if (Current() == nullptr) {
    return absl::FailedPreconditionError("no inventory yet: the usage refresh waits for the first full probe");
  }
  ProbeResult result = usage_runner_.Run();
  ProbeOutcome outcome;
  outcome.finished_at = absl::Now();
  outcome.duration = result.duration;
  outcome.status = result.inventory.status();
  Snapshot published;
  if (result.inventory.ok()) {
    published = Publish(
        [&](const Snapshot& base) {
          v1::Inventory next = *base;
          MergeUsage(*result.inventory, outcome.finished_at, next);
          return next;
        },
        outcome.changed);
    outcome.revision = published->revision();
  }
  if (options_.on_usage) options_.on_usage(outcome);
  if (!published) return outcome.status;
  if (outcome.changed) Deliver(published);
  return published;
}

void InventoryStore::UsageLoop(absl::Duration interval) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval)) return;
    }
    if (Current() != nullptr) (void)RefreshUsage();  // the outcome goes to on_usage
  }
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
  const absl::Duration usage = options_.usage_interval;
  if (!options_.usage_command.empty() && usage > absl::ZeroDuration() && usage < absl::InfiniteDuration()) {
    usage_timer_ = std::thread([this, usage] { UsageLoop(usage); });
  }
}

void InventoryStore::Stop() {
  absl::MutexLock thread_lock(&thread_mu_);
  if (!timer_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_.join();
  if (usage_timer_.joinable()) usage_timer_.join();
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
