// The gRPC edge of devplaced: the DevicePlacement service on gRPC's callback API. Proto in,
// proto out; no rules here (they live in server/placement) and no probing (server/inventory runs
// the probe process). absl::Status codes map 1:1 onto gRPC status codes.
#ifndef DEVPLACE_SERVER_SERVICE_SERVICE_H_
#define DEVPLACE_SERVER_SERVICE_SERVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "server/inventory/store.h"
#include "server/service/answer_cache.h"
#include "server/service/fair_queue.h"
#include "server/service/lease_table.h"
#include "server/service/refresh_rounds.h"
#include "server/service/service_observer.h"
#include "server/service/unix_listener.h"
#include "server/service/waiting_pick.h"
#include "server/service/watch_hub.h"

namespace devplace::service {

// The initial metadata entry that carries a waiting pick's waiter id (PickDevicesRequest.waiter_id).
inline constexpr std::string_view kWaiterIdMetadata = "devplace-waiter-id";

// Who may call RefreshInventory (a probe: a fork and vendor-library calls), on every transport:
// unix-socket peers (credentials from `peers`) that are root, the daemon's own user or in
// `socket_gid` (primary or supplementary group), and peers whose TLS client certificate was
// verified (ServerContext::auth_context()->IsPeerAuthenticated(), mTLS). Everyone else, plain TCP
// included, gets PERMISSION_DENIED naming who may call it. Read RPCs stay open to every caller.
struct RefreshAccess {
  const PeerRegistry* peers = nullptr;       // null: no unix-socket peer is known (all refused)
  uid_t daemon_uid = static_cast<uid_t>(-1);
  gid_t socket_gid = static_cast<gid_t>(-1);
  std::string socket_group;                  // its name, for messages
  // Calls that would start a new probe round less than this after the previous caller-started
  // round began get RESOURCE_EXHAUSTED with the time to wait; a call that arrives while a round
  // is already queued joins it. Zero = no limit. SIGHUP and the timer are not limited.
  absl::Duration min_interval = absl::ZeroDuration();
};

struct ServiceOptions {
  // Most WatchInventory streams open at once (0 = no limit); past it a new watch ends at once
  // with RESOURCE_EXHAUSTED.
  int max_watches = 0;
  // Most WatchInventory streams open at once from one peer (0 = no limit), RESOURCE_EXHAUSTED past
  // it. The peer is the one the connection caps count by: the key `connections` admitted the
  // connection under (a local client's user "uid:N" over a unix socket or TCP, a remote client's
  // "ip:ADDRESS"). For a connection the gate does not know (no gate), over a unix socket the
  // client's user from RefreshAccess.peers, else what gRPC reports without its port
  // ("ipv4:127.0.0.1": every local TCP client is one peer).
  int max_watches_per_peer = 0;
  const ConnectionGate* connections = nullptr;
  // ResolveDevice answers cached per published snapshot (server/service/answer_cache.h): at most
  // this many entries and bytes; max_entries 0 turns the cache off.
  AnswerCacheLimits answer_cache;
  // Told of every answer metrics count (newer job releases, picks, leases held, lease calls) and
  // of lease-file write errors; null: nobody. Must outlive the service.
  ServiceObserver* observer = nullptr;
  // Most devices one user (uid, root excepted) holds leased at once: 0 = no cap
  // (LeaseTableOptions::max_devices_per_user).
  int max_leased_devices_per_user = 0;
  // Most picks one user (uid over the unix socket, else the peer's address) has waiting at once, and
  // the most bytes what they keep may take together; past either a pick is RESOURCE_EXHAUSTED at once
  // (WaitingPicks, server/service/waiting_pick.h).
  int max_waiting_picks_per_user = 16;
  int64_t max_waiting_pick_bytes_per_user = int64_t{16} << 20;
  // After a restart, how long the picks that were waiting keep their places (placeholders) for their
  // callers to come back (RestoreWaiters; devplaced --waiter_restart_grace): the daemon's start-up
  // and a client's reconnect (clients retry at most every 2 s), and no longer than a waiter that
  // will not come back (its process ended with the old daemon) should hold the queue up.
  absl::Duration waiter_restart_grace = absl::Seconds(20);
  // ResolveDevice calls not answered from the cache are parsed and resolved on the service's own
  // workers, each peer's in turn (FairQueue, server/service/fair_queue.h), and so is a PickDevices
  // call until its first attempt is answered or it queues to wait; a peer (the key of
  // max_watches_per_peer) with max_queued_per_peer calls queued or running gets RESOURCE_EXHAUSTED.
  FairQueueLimits costly_calls;
};

// The key ServiceOptions.max_watches_per_peer counts by, from grpc::ServerContext::peer():
// "ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1", "ipv6:[::1]:5000" -> "ipv6:[::1]", anything else
// (e.g. "unix:") unchanged.
std::string PeerKey(const std::string& peer);

// Serves one host's inventory store: the RPC surface (parsing, authorization, status mapping,
// the answers' bytes). What outlives one call runs in classes of its own, each with its own lock:
// the refresh rounds (RefreshRounds: its worker runs the probe), the open watches (WatchHub), the
// waiting picks (WaitingPicks: its worker retries them) and the lease table (LeaseTable).
// Thread-safe; every handler returns without blocking a gRPC thread.
// Every method is registered raw (ByteBuffer in and out) so that a request that does not parse
// gets INVALID_ARGUMENT with a message: gRPC 1.51's typed callback handler answers such a request
// UNIMPLEMENTED with an empty message. GetInventory and ListBackends also send bytes serialized
// once (per snapshot, per daemon) instead of copying and serializing a message per call.
// Answers come from a PreparedSnapshot (server/service/answer_cache.h) built once per published
// snapshot: its serialized inventory and a bounded cache of ResolveDevice answers.
class DevicePlacementService final
    : public v1::DevicePlacement::WithRawCallbackMethod_PickDevices<
          v1::DevicePlacement::WithRawCallbackMethod_LeaseRelease<
          v1::DevicePlacement::WithRawCallbackMethod_LeaseKeepAlive<
          v1::DevicePlacement::WithRawCallbackMethod_WatchInventory<
          v1::DevicePlacement::WithRawCallbackMethod_RefreshInventory<
              v1::DevicePlacement::WithRawCallbackMethod_ListBackends<
                  v1::DevicePlacement::WithRawCallbackMethod_GetInventory<
                      v1::DevicePlacement::WithRawCallbackMethod_ResolveDevice<
                          v1::DevicePlacement::CallbackService>>>>>>>> {
 public:
  // What RefreshInventory runs: by default store.Refresh(); devplaced passes a "full" refresh
  // that re-runs the libtorch probe first.
  using RefreshFn = RefreshRounds::RefreshFn;
  // `store` must outlive the service and the server it is registered with.
  explicit DevicePlacementService(inventory::InventoryStore& store, RefreshFn refresh = nullptr,
                                  RefreshAccess access = {}, ServiceOptions options = {});
  // Shutdown(), then waits for the refresh worker (once its current refresh returned) and the
  // waiting picks' worker.
  ~DevicePlacementService() override;

  // `request` is a serialized v1::ResolveDeviceRequest; `response` gets a serialized
  // v1::ResolveDeviceResponse. INVALID_ARGUMENT when the request does not parse; UNAVAILABLE until
  // the store has an inventory; otherwise placement::Resolve's answer or error (INVALID_ARGUMENT /
  // FAILED_PRECONDITION, message naming the field). A request not answered from the cache runs on
  // the costly-call workers (ServiceOptions::costly_calls): RESOURCE_EXHAUSTED, naming
  // --max_queued_calls_per_peer, when its peer has too many queued or running.
  grpc::ServerUnaryReactor* ResolveDevice(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // The current snapshot (serialized v1::Inventory, the bytes built once per published snapshot),
  // with the leases held now (Inventory.leases); callers RefreshInventory's rule does not allow get
  // processes' pids and uids and leases' ids and pids removed. UNAVAILABLE before the first probe
  // succeeded; INVALID_ARGUMENT when the request does not parse.
  grpc::ServerUnaryReactor* GetInventory(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // The hardware table (serialized v1::ListBackendsResponse, built once at construction); always
  // answers, except INVALID_ARGUMENT for a request that does not parse.
  grpc::ServerUnaryReactor* ListBackends(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // Re-probes now and returns the resulting snapshot (RefreshRounds: calls that arrive while a
  // refresh runs share the next one); a failed probe returns its error (DEADLINE_EXCEEDED,
  // INTERNAL, ...) and the last good snapshot stays. UNAVAILABLE once shutdown began;
  // PERMISSION_DENIED for callers RefreshAccess does not allow; RESOURCE_EXHAUSTED ("retry in N
  // ms") past RefreshAccess::min_interval. `request` is a serialized v1::RefreshInventoryRequest
  // (INVALID_ARGUMENT when it does not parse), `response` gets a serialized v1::Inventory.
  grpc::ServerUnaryReactor* RefreshInventory(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  // Streams the current snapshot (unless both its epoch and revision equal `known_epoch` and
  // `known_revision`), then every newer revision, until the client cancels or the service shuts
  // down (the stream then ends with OK); WatchHub. A slow client is sent only the newest revision
  // it has not had. RESOURCE_EXHAUSTED past ServiceOptions' caps. `request` is a serialized
  // v1::WatchInventoryRequest (INVALID_ARGUMENT when it does not parse); each message written is a
  // serialized v1::Inventory.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchInventory(grpc::CallbackServerContext* ctx,
                                                             const grpc::ByteBuffer* request) override;

  // Shared hosts (rule P-PICK): picks and leases devices (LeaseTable); a pick that finds too few
  // devices free and asked to wait (wait_ms) is queued (WaitingPicks) and tried again, in arrival
  // order, whenever a lease ends and at least every 500 ms, until its deadline (wait_ms, or the
  // client's deadline less 100 ms). A queued pick keeps only what the rules read of its request
  // (KeptForWaiting); each user (uid over the unix socket, else the peer) has at most
  // ServiceOptions::max_waiting_picks_per_user queued, keeping at most
  // max_waiting_pick_bytes_per_user (RESOURCE_EXHAUSTED past either). LeaseRelease and
  // LeaseKeepAlive: PERMISSION_DENIED unless the caller is the lease's owner or root
  // (LeaseTable::Release). The holder: the caller's process or its parent over the unix socket (peer
  // credentials; FAILED_PRECONDITION over TCP or for a pid devplaced cannot see), else a TTL.
  // The call's parse, holder and first attempt run on the costly-call workers, as ResolveDevice's
  // (its arrival order is taken before it queues there); RESOURCE_EXHAUSTED, naming
  // --max_queued_calls_per_peer, when its peer has too many queued or running. Waiting picks'
  // retries run on WaitingPicks' worker over the kept request.
  grpc::ServerUnaryReactor* PickDevices(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* LeaseRelease(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* LeaseKeepAlive(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  // The lease table (for tests and the daemon's metrics).
  LeaseTable& leases() { return *leases_; }
  // After LeaseTable::Restore: the picks that were waiting when the previous daemon stopped
  // (RestoreReport::waiters), as placeholders holding their places for
  // ServiceOptions::waiter_restart_grace (WaitingPicks::Restore). Returns how many.
  size_t RestoreWaiters(const std::vector<state::Waiter>& waiters) {
    return waiting_.Restore(waiters, options_.waiter_restart_grace);
  }

  // Asks the refresh worker for a refresh without a caller waiting on it (SIGHUP, start-up); it
  // shares a round with concurrent RefreshInventory calls. Ignored once shutdown began.
  void RequestRefresh();

  // Ends every watch cleanly (with OK), refuses new refreshes and watches, and answers waiting
  // picks UNAVAILABLE. Does not block: call it, then grpc::Server::Shutdown (which stops accepting
  // and waits for calls in flight), then destroy the service.
  void Shutdown();
  // After Shutdown and the server's Wait: waits for the waiting picks' worker, which writes the
  // waiters for the next daemon as it ends, then ends the lease table's writes
  // (LeaseTable::CloseFile), so that the process may exit at once without a half-written
  // temporary file left beside the lease file.
  void FinishWrites();

 private:
  // OK when the caller may start a probe, else PERMISSION_DENIED saying who may.
  grpc::Status Authorize(grpc::CallbackServerContext* ctx) const;
  // Whether Authorize would allow the caller (without building its message).
  bool Privileged(grpc::CallbackServerContext* ctx) const;
  // Who the caller is for what it may see of the inventory (inventory_redaction.h).
  Viewer ViewerOf(grpc::CallbackServerContext* ctx) const;
  // The key ServiceOptions.max_watches_per_peer and costly_calls count the caller by.
  std::string WatchPeer(grpc::CallbackServerContext* ctx) const;
  // The serialized inventory a caller gets is the snapshot's bytes (redacted for unprivileged
  // callers), then the leases held now as `viewer` may see them (LeaseBytes): the first part,
  // shared, not copied (GetInventory sends both as two slices).
  std::shared_ptr<const std::string> SnapshotBytes(const std::shared_ptr<PreparedSnapshot>& prepared,
                                                   const Viewer& viewer);
  std::string InventoryBytes(const v1::Inventory& inventory, const Viewer& viewer);
  std::string LeaseBytes(const Viewer& viewer);
  absl::StatusOr<LeaseHolderSpec> HolderFor(grpc::CallbackServerContext* ctx, const v1::PickDevicesRequest& request) const;
  // Answers one pick attempt; false when it stays queued (too few free, before its deadline).
  // `round` (a round of waiting picks): its ended_at_start is LeaseTable::PickAndHold's
  // only_if_ended, its held_back set aside; a pick that stays queued adds the units it keeps free.
  bool TryPick(PendingPick& pick, bool waited, WaitingRound* round = nullptr);
  // WaitingPicks::Hooks::retry: a waiting pick whose caller went away is answered CANCELLED.
  bool RetryWaiting(PendingPick& pick, WaitingRound& round);
  // The caller's uid: its peer credentials over the unix socket, the connection's owner over
  // loopback TCP (ServiceOptions::connections); nullopt elsewhere.
  std::optional<uid_t> CallerUid(grpc::CallbackServerContext* ctx) const;
  // Who the per-user bounds and the lease trail name the caller: "uid:N" (CallerUid), else its
  // peer's address (PeerKey).
  std::string UserOf(grpc::CallbackServerContext* ctx) const;
  // Sends a ResolveDevice answer (its bytes shared, not copied) and tells the observer of newer libraries.
  void FinishResolve(grpc::ServerUnaryReactor* reactor, const std::shared_ptr<const ResolveAnswer>& answer,
                     grpc::ByteBuffer* response_bytes);
  void FinishPick(const PendingPick& pick, const grpc::Status& status, const std::string& outcome);
  // PickDevices' costly part, on a costly-call worker: parses `request_bytes` into `pick`, checks
  // it and its holder, then tries it at once or queues it with the waiting picks.
  void StartPick(PendingPick& pick, const grpc::ByteBuffer* request_bytes);
  // RESOURCE_EXHAUSTED for a call whose peer has --max_queued_calls_per_peer costly calls queued
  // or running (told to the observer).
  grpc::Status CostlyCallRefused(const std::string& peer);
  void LeasesChanged();

  const ServiceOptions options_;
  inventory::InventoryStore& store_;
  RefreshAccess access_;
  PreparedSnapshots prepared_;
  const std::shared_ptr<const std::string> backends_bytes_;  // ListBackends' answer, serialized once
  // The unprivileged callers' copy of the last snapshot that held pids.
  absl::Mutex redacted_mu_;
  inventory::Snapshot redacted_of_ ABSL_GUARDED_BY(redacted_mu_);
  std::shared_ptr<const std::string> redacted_bytes_ ABSL_GUARDED_BY(redacted_mu_);
  WatchHub watches_;
  // Declared before leases_, whose on_release pokes it until leases_ is gone; its worker is
  // joined (destructor) before leases_ goes.
  WaitingPicks waiting_;
  std::unique_ptr<LeaseTable> leases_;
  // Declared after leases_ (its rounds render the leases): destroyed, its worker joined, first.
  RefreshRounds refreshes_;
  // Declared last: its workers (which read prepared_ and the observer) are joined first.
  FairQueue costly_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_SERVICE_H_
