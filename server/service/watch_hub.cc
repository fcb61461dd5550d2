#include "server/service/watch_hub.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/service/wire.h"

namespace devplace::service {

// One WatchInventory stream. Kept alive by shared pointers held by itself (until gRPC's OnDone),
// by the store subscription and by the hub's registry, so a store callback that races with the
// end of the stream never touches freed memory. At most one gRPC operation is started at a time
// (`writing_`), and StartWrite/Finish are called without holding `mu_`.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public std::enable_shared_from_this<WatchReactor> {
 public:
  WatchReactor(WatchHub* hub, std::string peer, uint64_t known_epoch, uint64_t known_revision, Viewer viewer)
      : hub_(hub),
        peer_(std::move(peer)),
        known_epoch_(known_epoch),
        known_revision_(known_revision),
        viewer_(std::move(viewer)) {}

  // Registers with the store and queues the current snapshot. Called once, right after creation.
  void Start(inventory::InventoryStore& store) {
    Hold();
    std::weak_ptr<WatchReactor> weak = self_;
    inventory::Snapshot now;  // current at registration; the callback then gets exactly the newer ones
    subscription_ = store.Subscribe(
        [weak](const inventory::Snapshot& inv) {
          if (std::shared_ptr<WatchReactor> w = weak.lock()) w->Push(inv);
        },
        &now);
    store_ = &store;
    if (now == nullptr) return;
    if (now->epoch() == known_epoch_ && now->revision() == known_revision_) {
      absl::MutexLock lock(&mu_);  // the client has this one: only newer revisions follow
      last_queued_ = std::max(last_queued_, now->revision());
      return;
    }
    Push(std::move(now));
  }

  // Queues a snapshot newer than anything queued so far. A watcher holds at most one undelivered
  // snapshot (the newest): a slow or frozen client costs one snapshot, not its history.
  void Push(std::shared_ptr<const v1::Inventory> inv) {
    const grpc::ByteBuffer* write_now = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_ || inv->revision() <= last_queued_) return;
      last_queued_ = inv->revision();
      if (writing_) {
        next_ = std::move(inv);  // replaces an older undelivered one
        return;
      }
      writing_ = true;
      in_flight_ = Bytes(*inv);
      write_now = in_flight_.get();
    }
    StartWrite(write_now);
  }

  // Keeps this reactor alive until gRPC's OnDone (Start does it too).
  void Hold() { self_ = shared_from_this(); }

  // Ends the stream with OK (shutdown).
  void End() { FinishWith(grpc::Status::OK); }
  // Ends the stream with `status` before anything was sent (a cap was reached).
  void Refuse(const grpc::Status& status) { FinishWith(status); }

  void OnWriteDone(bool ok) override {
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    grpc::Status status;  // copied under mu_: Finish is called without it
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      in_flight_.reset();
      if (!ok) finishing_ = true;  // the client went away
      if (finishing_) {
        finish = !finish_called_;
        finish_called_ = true;
        status = status_;
      } else if (next_ != nullptr) {
        writing_ = true;
        in_flight_ = Bytes(*next_);
        next_.reset();
        next = in_flight_.get();
      }
    }
    if (finish) Finish(status);
    if (next != nullptr) StartWrite(next);
  }

  void OnCancel() override { FinishWith(grpc::Status::CANCELLED); }

  void OnDone() override {
    if (store_ != nullptr) store_->Unsubscribe(subscription_);
    hub_->Forget(this, peer_);
    std::shared_ptr<WatchReactor> last = std::move(self_);  // may destroy *this on scope exit
  }

 private:
  // One message: the snapshot as this caller may see it.
  std::shared_ptr<grpc::ByteBuffer> Bytes(const v1::Inventory& inv) {
    return std::make_shared<grpc::ByteBuffer>(
        SharedBytes(std::make_shared<const std::string>(hub_->Render(inv, viewer_))));
  }

  void FinishWith(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
      status_ = status;
      if (writing_ || finish_called_) return;  // OnWriteDone finishes
      finish_called_ = true;
    }
    Finish(status);
  }

  WatchHub* const hub_;
  const std::string peer_;  // the key the per-peer cap counts by
  const uint64_t known_epoch_;
  const uint64_t known_revision_;
  const Viewer viewer_;
  inventory::InventoryStore* store_ = nullptr;
  uint64_t subscription_ = 0;
  std::shared_ptr<WatchReactor> self_;
  absl::Mutex mu_;
  uint64_t last_queued_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const v1::Inventory> next_ ABSL_GUARDED_BY(mu_);  // newest undelivered, if any
  std::shared_ptr<grpc::ByteBuffer> in_flight_ ABSL_GUARDED_BY(mu_);  // the message being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

WatchHub::WatchHub(inventory::InventoryStore& store, WatchLimits limits, RenderFn render)
    : store_(store), limits_(limits), render_(std::move(render)) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchHub::Open(const std::string& peer, uint64_t known_epoch,
                                                           uint64_t known_revision, Viewer viewer) {
  auto watch = std::make_shared<WatchReactor>(this, peer, known_epoch, known_revision, std::move(viewer));
  grpc::Status refusal = grpc::Status::OK;
  bool counted = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      // ends with OK at once, like the watches open at shutdown
    } else if (limits_.max_watches > 0 && static_cast<int>(watches_.size()) >= limits_.max_watches) {
      refusal = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("devplaced already serves ", watches_.size(),
                                          " watches, its limit (--max_watches); retry later"));
    } else if (limits_.max_watches_per_peer > 0 && per_peer_[peer] >= limits_.max_watches_per_peer) {
      refusal = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("peer ", peer, " already has ", per_peer_[peer],
                                          " watches, the limit per peer (--max_watches_per_peer); retry later"));
    } else {
      counted = true;
      ++per_peer_[peer];
      watches_.insert(watch.get());
    }
  }
  if (!counted) {
    // Not subscribed to the store: it ends at once.
    watch->Hold();
    if (refusal.ok()) {
      watch->End();
    } else {
      watch->Refuse(refusal);
    }
    return watch.get();
  }
  watch->Start(store_);
  return watch.get();
}

void WatchHub::Forget(WatchReactor* watch, const std::string& peer) {
  absl::MutexLock lock(&mu_);
  if (watches_.erase(watch) == 0) return;
  auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
}

void WatchHub::Shutdown() {
  std::vector<std::shared_ptr<WatchReactor>> ending;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (WatchReactor* w : watches_) {
      if (std::shared_ptr<WatchReactor> alive = w->weak_from_this().lock()) ending.push_back(std::move(alive));
    }
  }
  for (const std::shared_ptr<WatchReactor>& w : ending) w->End();
}

size_t WatchHub::size() const {
  absl::MutexLock lock(&mu_);
  return watches_.size();
}

}  // namespace devplace::service
