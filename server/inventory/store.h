// InventoryStore: the daemon's inventory snapshot. It runs the probe program (ProbeRunner),
// publishes each good result as an immutable snapshot with a revision that bumps only when the
// content changes, keeps the last good snapshot when a probe fails, coalesces concurrent
// refreshes into one probe run, refreshes on a timer, and tells subscribers about new revisions.
// No gRPC here: the service layer adapts it.
#ifndef DEVPLACE_SERVER_INVENTORY_STORE_H_
#define DEVPLACE_SERVER_INVENTORY_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/inventory/probe_runner.h"

namespace devplace::inventory {

// An immutable published inventory. Holders keep it alive; no lock is needed to read it.
using Snapshot = std::shared_ptr<const v1::Inventory>;

// The name of devplaced's XID watcher's probe report (xid_watcher.h).
inline constexpr char kXidWatcherReport[] = "nvml_xid";

// Whether two inventories have the same content: equal in everything but `revision`,
// `probed_at`, `usage_read_at`, the probe reports' `duration_ms`, the status and message of the
// XID watcher's report (kXidWatcherReport) and the telemetry that moves on
// every probe (`Host.memory_available_bytes`, `Device.memory_free_bytes`,
// `Partition.memory_free_bytes`, `DeviceUsage.memory_used_bytes`,
// `DeviceUsageProcess.used_memory_bytes`): the contract of Inventory.revision. Which processes use
// a device (their pids, uids and kinds, the count), whether it is busy, and whether a device's or
// partition's free memory is known at all are content.
bool SameContent(const v1::Inventory& a, const v1::Inventory& b);

// Copies the usage figures of `usage` (devplace-probe --usage_only's output) into `into`, matched
// by row and PCI bus id (MIG instances by UUID, else by GPU and compute instance id):
// Device.usage and memory_free_bytes, Partition.usage and memory_free_bytes, each replaced (cleared
// when the usage read has none). A device of `into` the usage read does not list loses its usage
// (its free memory stays as the last full probe read it). Sets usage_read_at to `read_at`.
void MergeUsage(const v1::Inventory& usage, absl::Time read_at, v1::Inventory& into);

// The outcome of one probe run (one Refresh, or one coalesced group of them).
struct ProbeOutcome {
  // OK, or why the refresh failed (see Refresh()).
  absl::Status status;
  // When the run finished (absl::Now()).
  absl::Time finished_at = absl::InfinitePast();
  // How long the probe program ran (spawn to reap).
  absl::Duration duration = absl::ZeroDuration();
  // The current snapshot's revision after this run (0 while there is none).
  uint64_t revision = 0;
  // Whether this run published a new revision.
  bool changed = false;
};

struct StoreOptions {
  // The probe program and its arguments, e.g. {"/usr/libexec/devplace-probe", "--host_root=/"}.
  std::vector<std::string> probe_command;
  // Deadline for one probe run (devplaced's --probe_timeout); the probe is killed when it runs out.
  absl::Duration probe_timeout = absl::Seconds(10);
  // Optional hook run on each fresh, successfully parsed probe result before it is compared with
  // the current snapshot and published; e.g. merges the last devplace-torch-probe view into
  // `torch`. It runs on the refreshing thread, outside the store's lock, one call at a time.
  // A non-OK status fails the refresh like a failed probe (the last good snapshot stays).
  std::function<absl::Status(v1::Inventory& fresh)> augment;
  // Optional hook run on each fresh probe result (after augment) with the snapshot it replaces
  // (none for the first), before they are compared: devplaced keeps there the last FAULT or LOST
  // reading of a health counter that turned unknown (placement::KeepFaultReadings). It runs on
  // the refreshing thread, outside the store's lock, and again if another refresh published
  // meanwhile (so it must be a pure function of its arguments). Not run by RefreshUsage, which
  // keeps the snapshot's health as it is.
  std::function<void(const v1::Inventory& previous, v1::Inventory& fresh)> carry;
  // What `carry` gets as `previous` for the first snapshot (null: carry does not run for it):
  // devplaced's health file, the FAULT and LOST readings the previous daemon published
  // (placement::FaultReadings), so that the first inventory after a restart keeps them too.
  std::shared_ptr<const v1::Inventory> carry_from;
  // Optional observer called after every probe run (success or failure) with its outcome, on the
  // refreshing thread, outside the store's lock (devplaced logs each probe through it).
  std::function<void(const ProbeOutcome&)> on_probe;
  // Inventory.epoch of every snapshot this store publishes (revisions are comparable only within
  // one epoch). 0: the store's construction time in microseconds since the Unix epoch.
  uint64_t epoch = 0;
  // The usage refresh (RefreshUsage): the probe program run to re-read only the usage figures
  // (devplace-probe ... --usage_only), under probe_timeout; empty: none. Start() runs it every
  // usage_interval (a positive duration; infinite: only on request).
  std::vector<std::string> usage_command;
  absl::Duration usage_interval = absl::InfiniteDuration();
  // Optional observer called after every usage refresh with its outcome (as on_probe).
  std::function<void(const ProbeOutcome&)> on_usage;
};

// Thread-safe: every method may be called from any thread. Readers (Current, LastOutcome) take a
// short internal lock only to copy a pointer or a small struct; they never wait for a probe.
class InventoryStore {
 public:
  using SubscriptionId = uint64_t;
  // Gets each newly published revision. Runs on the thread that completed the refresh (a Refresh
  // caller or the timer thread), outside the store's lock, one delivery at a time, in increasing
  // revision order. It must be quick (hand off to a queue) and must not call Refresh() (which
  // then fails with FAILED_PRECONDITION); Current, Subscribe and Unsubscribe are fine.
  using Callback = std::function<void(const Snapshot&)>;

  explicit InventoryStore(StoreOptions options);
  // Stops the timer thread (as Stop()).
  ~InventoryStore();
  InventoryStore(const InventoryStore&) = delete;
  InventoryStore& operator=(const InventoryStore&) = delete;

  // The current snapshot, or null before the first successful probe.
  Snapshot Current() const;
  // The epoch stamped on every published snapshot (StoreOptions.epoch); never 0.
  uint64_t epoch() const { return epoch_; }

  // Probes now and publishes the result. If a probe is already in flight, waits for it and shares
  // its result instead of starting another (coalescing). On success returns the current snapshot:
  // `probed_at` is the time the probe finished; `revision` is the previous one + 1 when the
  // content differs from the previous snapshot (1 for the first), else unchanged. An unchanged
  // result is still published as a new snapshot object carrying the fresh `probed_at` and probe
  // report durations (so `probed_at` says how fresh the data is), but subscribers are not called.
  // On failure the last good snapshot stays current and the error comes back: the ProbeRunner's
  // errors (DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ...), INTERNAL
  // when the output lacks the cpu row every probe reports, the augment hook's error, or
  // FAILED_PRECONDITION when called from a subscriber callback. Blocks for at most the probe
  // timeout plus a small grace (plus the augment hook's time).
  absl::StatusOr<Snapshot> Refresh();

  // Re-reads the usage figures with StoreOptions.usage_command and publishes the current snapshot
  // with them merged (MergeUsage): a new revision when the processes on a device or its busy state
  // changed (SameContent), else the same revision with fresh figures. FAILED_PRECONDITION before
  // the first full probe, without a usage_command, or from a subscriber callback; the
  // ProbeRunner's errors as Refresh(). Concurrent calls run one probe each (the timer is the only
  // regular caller).
  absl::StatusOr<Snapshot> RefreshUsage();

  // The outcome of the latest completed probe run; status UNAVAILABLE "no probe has run yet"
  // (finished_at InfinitePast) before the first.
  ProbeOutcome LastOutcome() const;
  // The latest failed probe run, even if later runs succeeded; nullopt if none failed.
  std::optional<ProbeOutcome> LastError() const;

  // Registers `callback` for every revision published after this call. When `current` is not
  // null it receives the snapshot current at registration (null if none): the callback then gets
  // exactly the revisions newer than it, with no gap and no duplicate.
  SubscriptionId Subscribe(Callback callback, Snapshot* current = nullptr);
  // Removes a subscription (unknown ids are ignored). Called from another thread, it returns once
  // the callback is not running and will not run again. Called from inside a callback it returns
  // at once and no further call is made.
  void Unsubscribe(SubscriptionId id);

  // Starts the refresh thread: it refreshes at once, then `interval` after each refresh finishes
  // (success or failure). Until the first success it retries sooner, with backoff: 1 s, doubling,
  // at most min(interval, 60 s), also when `interval` is infinite. A second Start while running is ignored. `interval` must be positive.
  // With a usage_command and a finite usage_interval, a second thread runs RefreshUsage every
  // usage_interval (after each one finishes), once a snapshot exists.
  void Start(absl::Duration interval);
  // Stops and joins the refresh threads; returns promptly when they wait for the next tick, and
  // after the probe (bounded by its deadline) when one is running. Idempotent. Not from a
  // subscriber callback.
  void Stop();

 private:
  struct Subscriber {
    std::shared_ptr<const Callback> callback;
    uint64_t after_revision;  // deliver only revisions newer than this
  };

  // Runs the probe and the augment hook; returns the inventory to publish or the error.
  absl::StatusOr<v1::Inventory> ProbeOnce(absl::Duration& duration);
  // Publishes make(current) as the new current snapshot: stamped (epoch, version, probed_at) and
  // numbered against the snapshot it was made from; `make` runs again if another publisher got in
  // between. Sets `changed` (a new revision). Returns the published snapshot.
  Snapshot Publish(const std::function<v1::Inventory(const Snapshot& base)>& make, bool& changed);
  void UsageLoop(absl::Duration interval);
  // Calls the subscribers for `snapshot` (a new revision), in order; takes deliver_mu_.
  void Deliver(const Snapshot& snapshot);
  bool InCallback() const;
  void TimerLoop(absl::Duration interval);

  const StoreOptions options_;
  const uint64_t epoch_;
  const ProbeRunner runner_;
  const ProbeRunner usage_runner_;

  mutable absl::Mutex mu_;
  Snapshot current_ ABSL_GUARDED_BY(mu_);
  ProbeOutcome last_outcome_ ABSL_GUARDED_BY(mu_);
  std::optional<ProbeOutcome> last_error_ ABSL_GUARDED_BY(mu_);
  // Coalescing: runs_started_ counts probe runs begun; runs_done_ those finished. A run is in
  // flight when they differ; its shared result is last_result_.
  uint64_t runs_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t runs_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusOr<Snapshot> last_result_ ABSL_GUARDED_BY(mu_);
  absl::CondVar run_done_;  // signalled when runs_done_ advances
  std::map<SubscriptionId, Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
  SubscriptionId next_subscription_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread::id delivering_thread_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Held while subscribers are called: deliveries never overlap, and Unsubscribe can wait for one.
  absl::Mutex deliver_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t delivered_revision_ ABSL_GUARDED_BY(deliver_mu_) = 0;

  absl::Mutex thread_mu_;  // serializes Start/Stop
  std::thread timer_ ABSL_GUARDED_BY(thread_mu_);
  std::thread usage_timer_ ABSL_GUARDED_BY(thread_mu_);
};

}  // namespace devplace::inventory

#endif  // DEVPLACE_SERVER_INVENTORY_STORE_H_
