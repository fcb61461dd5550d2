// The WatchInventory streams of devplaced: each open stream subscribes to the inventory store and
// is sent every newer snapshot. The handler (DevicePlacementService) parses the request and says
// who the peer is and what it may see; this class counts the streams against their caps, writes
// them and ends them.
#ifndef DEVPLACE_SERVER_SERVICE_WATCH_HUB_H_
#define DEVPLACE_SERVER_SERVICE_WATCH_HUB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/inventory/store.h"
#include "server/service/inventory_redaction.h"

namespace devplace::service {

class WatchReactor;

struct WatchLimits {
  // Most streams open at once (0 = no limit; devplaced --max_watches).
  int max_watches = 0;
  // Most streams open at once from one peer (0 = no limit; --max_watches_per_peer), by the key
  // the caller gives Open.
  int max_watches_per_peer = 0;
};

// The open watches, with their own lock; each stream has a lock of its own too. Thread-safe.
//
// Order: a stream is sent the snapshot current when it opened (unless the client has it: both
// its epoch and revision equal what the client said it knows), then every newer revision in
// increasing order. A stream holds at most one unsent snapshot, the newest: a slow or frozen
// client is sent only the newest revision it has not had, and costs one snapshot, not a history.
// At most one gRPC write per stream is in flight.
//
// Bounds: past WatchLimits a new stream ends at once with RESOURCE_EXHAUSTED naming the cap; its
// count is freed when a stream ends (client cancel, a failed write, shutdown).
//
// Shutdown: Shutdown() does not block; it ends every open stream with OK, and every stream opened
// later ends with OK at once. The hub must outlive the streams (until gRPC's OnDone of each, i.e.
// until grpc::Server::Shutdown returned), and the store must outlive the hub.
class WatchHub {
 public:
  // The bytes of one message of a stream: `inventory` as the caller (`viewer`) may see it,
  // a serialized v1::Inventory. Called on the store's delivering thread or a gRPC thread.
  using RenderFn = std::function<std::string(const v1::Inventory& inventory, const Viewer& viewer)>;

  WatchHub(inventory::InventoryStore& store, WatchLimits limits, RenderFn render);
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // A stream for `peer` (the key max_watches_per_peer counts by) that knows `known_epoch` and
  // `known_revision`; `viewer` is handed to RenderFn. Started, or already finished as above.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Open(const std::string& peer, uint64_t known_epoch,
                                                   uint64_t known_revision, Viewer viewer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every stream with OK and refuses new ones (they end with OK at once).
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Streams open now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class WatchReactor;
  // A stream ended (gRPC's OnDone): its count is freed.
  void Forget(WatchReactor* watch, const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Render(const v1::Inventory& inventory, const Viewer& viewer) const { return render_(inventory, viewer); }

  inventory::InventoryStore& store_;
  const WatchLimits limits_;
  const RenderFn render_;
  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_WATCH_HUB_H_
