#include "server/service/service.h"

#include <algorithm>
#include <cctype>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "google/protobuf/arena.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/placement/backends.h"
#include "server/placement/pick.h"
#include "server/service/wire.h"

namespace devplace::service {

// One WatchInventory stream. Kept alive by shared pointers held by itself (until gRPC's OnDone),
// by the store subscription and by the service's registry, so a store callback that races with
// the end of the stream never touches freed memory. At most one gRPC operation is started at a
// time (`writing_`), and StartWrite/Finish are called without holding `mu_`.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public std::enable_shared_from_this<WatchReactor> {
 public:
  WatchReactor(DevicePlacementService* service, std::string peer, uint64_t known_epoch, uint64_t known_revision,
               bool privileged)
      : service_(service),
        peer_(std::move(peer)),
        known_epoch_(known_epoch),
        known_revision_(known_revision),
        privileged_(privileged) {}

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

  // Ends the stream with OK (service shutdown).
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
    service_->Forget(this, peer_);
    std::shared_ptr<WatchReactor> last = std::move(self_);  // may destroy *this on scope exit
  }

 private:
  // One message: the snapshot as this caller may see it, with the leases held now.
  std::shared_ptr<grpc::ByteBuffer> Bytes(const v1::Inventory& inv) {
    return std::make_shared<grpc::ByteBuffer>(
        SharedBytes(std::make_shared<const std::string>(service_->InventoryBytes(inv, privileged_))));
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

  DevicePlacementService* const service_;
  const std::string peer_;  // PeerKey of the client
  const uint64_t known_epoch_;
  const uint64_t known_revision_;
  const bool privileged_;
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

// A WatchInventory stream ended before it started (a request that does not parse); deletes itself.
class RefusedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  void OnDone() override { delete this; }
};

std::string PeerKey(const std::string& peer) {
  if (peer.rfind("ipv4:", 0) != 0 && peer.rfind("ipv6:", 0) != 0) return peer;
  const size_t colon = peer.rfind(':');
  return colon > 5 ? peer.substr(0, colon) : peer;
}

DevicePlacementService::DevicePlacementService(inventory::InventoryStore& store, RefreshFn refresh,
                                               RefreshAccess access, ServiceOptions options)
    : options_(options),
      store_(store),
      refresh_(refresh ? std::move(refresh) : [&store] { return store.Refresh(); }),
      access_(std::move(access)),
      prepared_(store, options.answer_cache),
      backends_bytes_(std::make_shared<const std::string>(placement::ListBackendsResponse().SerializeAsString())),
      leases_(std::make_unique<LeaseTable>([this] {
        LeaseTableOptions leases;
        leases.on_release = [this] { LeasesChanged(); };
        leases.max_devices_per_user = options_.max_leased_devices_per_user;
        leases.on_write_error = options_.on_lease_write_error;
        return leases;
      }())),
      worker_([this] { RefreshWorker(); }),
      pick_worker_([this] { PickWorker(); }) {}

DevicePlacementService::~DevicePlacementService() {
  Shutdown();
  worker_.join();
  pick_worker_.join();
}

grpc::ServerUnaryReactor* DevicePlacementService::ResolveDevice(grpc::CallbackServerContext* ctx,
                                                                const grpc::ByteBuffer* request_bytes,
                                                                grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::vector<grpc::Slice> slices;
  std::string flat;
  absl::string_view wire;
  const bool readable = WireBytes(request_bytes, slices, flat, wire);
  const std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current();
  // The same bytes answered before for this snapshot: no parse (the pod-startup storm).
  std::shared_ptr<const ResolveAnswer> answer = readable && prepared != nullptr ? prepared->FindByWire(wire) : nullptr;
  if (answer == nullptr) {
    // Parsed on an arena: a request at the bounds (a DRA allocation of 1,024 devices x 64
    // attributes, 65,536 map entries) parses in about 60 % of the time the heap takes.
    google::protobuf::Arena arena;
    v1::ResolveDeviceRequest& request = *google::protobuf::Arena::CreateMessage<v1::ResolveDeviceRequest>(&arena);
    if (!readable || !request.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
      reactor->Finish(Unparsable<v1::ResolveDeviceRequest>(request_bytes->Length()));
      return reactor;
    }
    if (prepared == nullptr) {
      reactor->Finish(NoInventory(store_));
      return reactor;
    }
    // placement::Resolve's answer for this snapshot, or the same answer from the cache.
    answer = prepared->Resolve(request, wire);
  }
  if (answer->status.ok()) {
    *response_bytes = SharedBytes(std::shared_ptr<const std::string>(answer, &answer->bytes));
    if (options_.on_newer_library) {
      for (const placement::NewerLibrary& newer : answer->newer) options_.on_newer_library(newer);
    }
  }
  reactor->Finish(ToGrpc(answer->status));
  return reactor;
}

grpc::ServerUnaryReactor* DevicePlacementService::GetInventory(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request_bytes,
                                                               grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  v1::GetInventoryRequest request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    reactor->Finish(bad);
    return reactor;
  }
  const std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current();
  if (prepared == nullptr) {
    reactor->Finish(NoInventory(store_));
    return reactor;
  }
  *response_bytes = SharedBytes(InventoryBytes(prepared, Privileged(ctx)));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DevicePlacementService::ListBackends(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request_bytes,
                                                               grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  v1::ListBackendsRequest request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    reactor->Finish(bad);
    return reactor;
  }
  *response_bytes = SharedBytes(backends_bytes_);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DevicePlacementService::RefreshInventory(grpc::CallbackServerContext* ctx,
                                                                   const grpc::ByteBuffer* request_bytes,
                                                                   grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  v1::RefreshInventoryRequest request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    reactor->Finish(bad);
    return reactor;
  }
  if (grpc::Status denied = Authorize(ctx); !denied.ok()) {
    reactor->Finish(denied);
    return reactor;
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "devplaced is shutting down"));
    return reactor;
  }
  if (!caller_round_queued_ && pending_.empty()) {  // this call would start a round of its own
    const absl::Time now = absl::Now();
    const absl::Duration wait = last_caller_round_ + access_.min_interval - now;
    if (access_.min_interval > absl::ZeroDuration() && wait > absl::ZeroDuration()) {
      reactor->Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("RefreshInventory starts at most one probe every ", absl::FormatDuration(access_.min_interval),
                       " (--refresh_min_interval); retry in ", absl::ToInt64Milliseconds(wait) + 1, " ms")));
      return reactor;
    }
    last_caller_round_ = now;
    caller_round_queued_ = true;
  }
  pending_.push_back({reactor, response});  // the worker finishes it; the probe never blocks a gRPC thread
  return reactor;
}

bool DevicePlacementService::Privileged(grpc::CallbackServerContext* ctx) const {
  if (access_.peers != nullptr) {
    if (std::optional<PeerCredentials> c = access_.peers->Find(ctx->peer())) {
      return c->uid == 0 || c->uid == access_.daemon_uid ||
             (access_.socket_gid != static_cast<gid_t>(-1) &&
              (c->gid == access_.socket_gid ||
               std::find(c->groups.begin(), c->groups.end(), access_.socket_gid) != c->groups.end()));
    }
  }
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

grpc::Status DevicePlacementService::Authorize(grpc::CallbackServerContext* ctx) const {
  std::vector<std::string> who = {"root"};
  if (access_.daemon_uid != 0 && access_.daemon_uid != static_cast<uid_t>(-1)) {
    who.push_back(absl::StrCat("uid ", access_.daemon_uid, " (the daemon's user)"));
  }
  if (access_.socket_gid != static_cast<gid_t>(-1)) {
    who.push_back(absl::StrCat("members of group ", access_.socket_group.empty() ? "" : access_.socket_group + " ",
                               "(gid ", access_.socket_gid, ")"));
  }
  const std::string allowed = absl::StrCat(
      "RefreshInventory re-probes the host and is allowed only to ", absl::StrJoin(who, ", "),
      " over the unix socket, or to clients with a verified TLS client certificate (mTLS)");
  const std::string peer = ctx->peer();
  if (access_.peers != nullptr) {
    if (std::optional<PeerCredentials> c = access_.peers->Find(peer)) {
      bool ok = c->uid == 0 || c->uid == access_.daemon_uid;
      if (access_.socket_gid != static_cast<gid_t>(-1)) {
        ok = ok || c->gid == access_.socket_gid ||
             std::find(c->groups.begin(), c->groups.end(), access_.socket_gid) != c->groups.end();
      }
      if (ok) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat(allowed, "; this caller is uid ", c->uid, " gid ", c->gid, " (pid ", c->pid, ")"));
    }
  }
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(allowed, "; this call came over plaintext TCP or without a client certificate (",
                                   peer, ")"));
}

void DevicePlacementService::RequestRefresh() {
  absl::MutexLock lock(&mu_);
  if (!shutting_down_) pending_.push_back({nullptr, nullptr});
}

void DevicePlacementService::RefreshWorker() {
  for (;;) {
    std::vector<PendingRefresh> round;
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
      for (const PendingRefresh& p : round) {
        if (p.reactor != nullptr) {
          p.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "devplaced is shutting down"));
        }
      }
      return;
    }
    // Calls that queued up while the previous round ran share this one probe run.
    const absl::StatusOr<inventory::Snapshot> fresh = refresh_();
    std::shared_ptr<const std::string> bytes;  // serialized once for the round
    for (const PendingRefresh& p : round) {
      if (p.reactor == nullptr) continue;
      if (fresh.ok()) {
        if (bytes == nullptr) bytes = std::make_shared<const std::string>(InventoryBytes(**fresh, true));
        *p.response = SharedBytes(bytes);
      }
      p.reactor->Finish(ToGrpc(fresh.status()));
    }
  }
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DevicePlacementService::WatchInventory(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes) {
  v1::WatchInventoryRequest parsed;
  if (grpc::Status bad; !ParseRequest(request_bytes, &parsed, &bad)) {
    auto* refused = new RefusedStream();
    refused->Finish(bad);
    return refused;
  }
  const v1::WatchInventoryRequest* request = &parsed;
  // The peer the connection caps counted the connection for; else a unix-socket peer's user
  // (credentials read at accept) or a TCP peer's address.
  std::string peer = PeerKey(ctx->peer());
  std::optional<std::string> admitted_as;
  if (options_.connections != nullptr) admitted_as = options_.connections->PeerOf(ctx->peer());
  if (admitted_as.has_value()) {
    peer = *std::move(admitted_as);
  } else if (access_.peers != nullptr) {
    if (std::optional<PeerCredentials> c = access_.peers->Find(ctx->peer())) peer = absl::StrCat("uid:", c->uid);
  }
  auto watch = std::make_shared<WatchReactor>(this, peer, request->known_epoch(), request->known_revision(),
                                              Privileged(ctx));
  grpc::Status refusal = grpc::Status::OK;
  bool counted = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      // ends with OK at once, like the watches open at shutdown
    } else if (options_.max_watches > 0 && static_cast<int>(watches_.size()) >= options_.max_watches) {
      refusal = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("devplaced already serves ", watches_.size(),
                                          " watches, its limit (--max_watches); retry later"));
    } else if (options_.max_watches_per_peer > 0 && watches_per_peer_[peer] >= options_.max_watches_per_peer) {
      refusal = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("peer ", peer, " already has ", watches_per_peer_[peer],
                                          " watches, the limit per peer (--max_watches_per_peer); retry later"));
    } else {
      counted = true;
      ++watches_per_peer_[peer];
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

void DevicePlacementService::Forget(WatchReactor* watch, const std::string& peer) {
  absl::MutexLock lock(&mu_);
  if (watches_.erase(watch) == 0) return;
  auto it = watches_per_peer_.find(peer);
  if (it != watches_per_peer_.end() && --it->second <= 0) watches_per_peer_.erase(it);
}

void DevicePlacementService::Shutdown() {
  {
    absl::MutexLock lock(&pick_mu_);
    picks_stopping_ = true;  // the pick worker answers the waiting picks UNAVAILABLE and ends
  }
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

// ---- inventory bytes as each caller sees them ----

std::string DevicePlacementService::LeaseBytes(bool privileged) {
  const std::vector<v1::LeaseInfo> leases = leases_->List();
  if (leases.empty()) return "";
  v1::Inventory only;  // appended to a serialized Inventory: its leases field (repeated) merges
  for (const v1::LeaseInfo& lease : leases) {
    v1::LeaseInfo& copy = *only.add_leases();
    copy = lease;
    if (!privileged) RedactLease(copy);
  }
  return only.SerializeAsString();
}

std::shared_ptr<const std::string> DevicePlacementService::InventoryBytes(
    const std::shared_ptr<PreparedSnapshot>& prepared, bool privileged) {
  std::shared_ptr<const std::string> bytes = prepared->inventory_bytes();
  if (!privileged && HasPrivateUsage(*prepared->snapshot())) {
    absl::MutexLock lock(&redacted_mu_);
    if (redacted_of_ != prepared->snapshot()) {
      v1::Inventory copy = *prepared->snapshot();
      RedactInventory(copy);
      redacted_bytes_ = std::make_shared<const std::string>(copy.SerializeAsString());
      redacted_of_ = prepared->snapshot();
    }
    bytes = redacted_bytes_;
  }
  const std::string leases = LeaseBytes(privileged);
  if (leases.empty()) return bytes;
  return std::make_shared<const std::string>(*bytes + leases);
}

std::string DevicePlacementService::InventoryBytes(const v1::Inventory& inventory, bool privileged) {
  std::string bytes;
  if (!privileged && HasPrivateUsage(inventory)) {
    v1::Inventory copy = inventory;
    RedactInventory(copy);
    bytes = copy.SerializeAsString();
  } else {
    bytes = inventory.SerializeAsString();
  }
  return bytes + LeaseBytes(privileged);
}

}  // namespace devplace::service
