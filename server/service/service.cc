#include "server/service/service.h"

#include <algorithm>
#include <cctype>
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
#include "server/service/inventory_redaction.h"
#include "server/service/wire.h"

namespace devplace::service {

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
      access_(std::move(access)),
      prepared_(store, options.answer_cache),
      backends_bytes_(std::make_shared<const std::string>(placement::ListBackendsResponse().SerializeAsString())),
      watches_(store, {options.max_watches, options.max_watches_per_peer},
               [this](const v1::Inventory& inventory, const Viewer& viewer) { return InventoryBytes(inventory, viewer); }),
      waiting_({options.max_waiting_picks_per_user, options.max_waiting_pick_bytes_per_user},
               {[this](PendingPick& pick, WaitingRound& round) { return RetryWaiting(pick, round); },
                [this](const PendingPick& pick, const grpc::Status& status, const std::string& outcome) {
                  FinishPick(pick, status, outcome);
                },
                [this] { return leases_->ended(); },
                [this](size_t waiting) {
                  if (options_.observer != nullptr) options_.observer->OnPicksWaiting(waiting);
                },
                [this](const PendingPick& pick) {  // the waiter id reaches the caller before any answer
                  pick.ctx->AddInitialMetadata(std::string(kWaiterIdMetadata), pick.waiter_id);
                  pick.reactor->StartSendInitialMetadata();
                  if (options_.observer != nullptr && pick.waiter_id == pick.request.waiter_id()) {
                    options_.observer->OnLeaseEvent(
                        {"waiter_returned", {}, pick.user, absl::StrCat("place_", pick.arrival), ""});
                  }
                },
                [this](std::vector<state::Waiter> waiters) { leases_->SetWaiters(std::move(waiters)); },
                [this](const PendingPick& placeholder, const std::string& why) {
                  if (options_.observer != nullptr) {
                    options_.observer->OnLeaseEvent({"waiter_dropped", {}, placeholder.user, "placeholder", why});
                  }
                }}),
      leases_(std::make_unique<LeaseTable>([this] {
        LeaseTableOptions leases;
        leases.on_release = [this] { LeasesChanged(); };
        leases.max_devices_per_user = options_.max_leased_devices_per_user;
        if (ServiceObserver* observer = options_.observer; observer != nullptr) {
          leases.on_write_error = [observer](const absl::Status& error) { observer->OnLeaseWriteError(error); };
          leases.on_end = [observer](const v1::LeaseInfo& lease, bool expired) {
            observer->OnLeaseEvent({expired ? "expired" : "ended", lease, "", "", ""});
          };
        }
        return leases;
      }())),
      refreshes_(refresh ? std::move(refresh) : [&store] { return store.Refresh(); },
                 [this](const v1::Inventory& fresh) { return InventoryBytes(fresh, Viewer{true, {}}); }, access_.min_interval),
      costly_(options.costly_calls, [observer = options.observer](size_t queued) {
        if (observer != nullptr) observer->OnCostlyCallsQueued(queued);
      }) {}

DevicePlacementService::~DevicePlacementService() {
  Shutdown();
  refreshes_.Join();
  waiting_.Join();
}

grpc::ServerUnaryReactor* DevicePlacementService::ResolveDevice(grpc::CallbackServerContext* ctx,
                                                                const grpc::ByteBuffer* request_bytes,
                                                                grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The request's bytes, kept (with the view into them) until the call is answered.
  struct Call {
    std::vector<grpc::Slice> slices;
    std::string flat;
    absl::string_view wire;
    bool readable = false;
  };
  auto call = std::make_shared<Call>();
  call->readable = WireBytes(request_bytes, call->slices, call->flat, call->wire);
  // The same bytes answered before for this snapshot: no parse (the pod-startup storm), answered here.
  if (std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current(); call->readable && prepared != nullptr) {
    if (std::shared_ptr<const ResolveAnswer> answer = prepared->FindByWire(call->wire)) {
      FinishResolve(reactor, answer, response_bytes);
      return reactor;
    }
  }
  // Parsing and resolving: on the costly-call workers, each peer's calls in turn.
  const std::string peer = WatchPeer(ctx);
  const FairQueue::Submitted submitted = costly_.Submit(peer, [this, call, reactor, request_bytes, response_bytes](bool shutting_down) {
    if (shutting_down) {
      reactor->Finish(ShuttingDown());
      return;
    }
    // Parsed on an arena: a request at the bounds (a DRA allocation of 1,024 devices x 64
    // attributes, 65,536 map entries) parses in about 60 % of the time the heap takes.
    google::protobuf::Arena arena;
    v1::ResolveDeviceRequest& request = *google::protobuf::Arena::CreateMessage<v1::ResolveDeviceRequest>(&arena);
    if (!call->readable || !request.ParseFromArray(call->wire.data(), static_cast<int>(call->wire.size()))) {
      reactor->Finish(Unparsable<v1::ResolveDeviceRequest>(request_bytes->Length()));
      return;
    }
    const std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current();
    if (prepared == nullptr) {
      reactor->Finish(NoInventory(store_));
      return;
    }
    // placement::Resolve's answer for this snapshot, or the same answer from the cache.
    FinishResolve(reactor, prepared->Resolve(request, call->wire), response_bytes);
  });
  if (submitted == FairQueue::Submitted::kShuttingDown) {
    reactor->Finish(ShuttingDown());
  } else if (submitted == FairQueue::Submitted::kPeerFull) {
    reactor->Finish(CostlyCallRefused(peer));
  }
  return reactor;
}

grpc::Status DevicePlacementService::CostlyCallRefused(const std::string& peer) {
  if (options_.observer != nullptr) options_.observer->OnCostlyCallRefused();
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("devplaced: ", costly_.limits().max_queued_per_peer,
                                   " ResolveDevice and PickDevices calls of this peer (", peer,
                                   ") are queued or running, the most --max_queued_calls_per_peer allows; retry once "
                                   "some are answered"));
}

void DevicePlacementService::FinishResolve(grpc::ServerUnaryReactor* reactor,
                                           const std::shared_ptr<const ResolveAnswer>& answer,
                                           grpc::ByteBuffer* response_bytes) {
  if (answer->status.ok()) {
    *response_bytes = SharedBytes(std::shared_ptr<const std::string>(answer, &answer->bytes));
    if (options_.observer != nullptr) {
      for (const placement::NewerLibrary& newer : answer->newer) options_.observer->OnNewerLibrary(newer);
    }
  }
  reactor->Finish(ToGrpc(answer->status));
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
  const Viewer viewer = ViewerOf(ctx);
  *response_bytes = SharedBytes(SnapshotBytes(prepared, viewer), LeaseBytes(viewer));
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
  refreshes_.Enqueue(reactor, response);  // the worker finishes it; the probe never blocks a gRPC thread
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

Viewer DevicePlacementService::ViewerOf(grpc::CallbackServerContext* ctx) const {
  return Viewer{Privileged(ctx), CallerUid(ctx)};
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

void DevicePlacementService::RequestRefresh() { refreshes_.Request(); }

grpc::ServerWriteReactor<grpc::ByteBuffer>* DevicePlacementService::WatchInventory(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes) {
  v1::WatchInventoryRequest request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    auto* refused = new RefusedStream();
    refused->Finish(bad);
    return refused;
  }
  return watches_.Open(WatchPeer(ctx), request.known_epoch(), request.known_revision(), ViewerOf(ctx));
}

std::string DevicePlacementService::WatchPeer(grpc::CallbackServerContext* ctx) const {
  // The peer the connection caps counted the connection for; else a unix-socket peer's user
  // (credentials read at accept) or a TCP peer's address.
  if (options_.connections != nullptr) {
    if (std::optional<std::string> admitted_as = options_.connections->PeerOf(ctx->peer())) return *std::move(admitted_as);
  }
  if (access_.peers != nullptr) {
    if (std::optional<PeerCredentials> c = access_.peers->Find(ctx->peer())) return absl::StrCat("uid:", c->uid);
  }
  return PeerKey(ctx->peer());
}

void DevicePlacementService::Shutdown() {
  waiting_.Shutdown();  // its worker answers the waiting picks UNAVAILABLE and ends
  costly_.Shutdown();   // its workers answer what is still queued UNAVAILABLE
  refreshes_.Shutdown();
  watches_.Shutdown();
}

void DevicePlacementService::FinishWrites() {
  waiting_.Join();
  leases_->CloseFile();
}

// ---- inventory bytes as each caller sees them ----

std::string DevicePlacementService::LeaseBytes(const Viewer& viewer) {
  const std::vector<v1::LeaseInfo> leases = leases_->List();
  if (leases.empty()) return "";
  v1::Inventory only;  // appended to a serialized Inventory: its leases field (repeated) merges
  for (const v1::LeaseInfo& lease : leases) {
    v1::LeaseInfo& copy = *only.add_leases();
    copy = lease;
    RedactLease(copy, viewer);
  }
  return only.SerializeAsString();
}

std::shared_ptr<const std::string> DevicePlacementService::SnapshotBytes(
    const std::shared_ptr<PreparedSnapshot>& prepared, const Viewer& viewer) {
  std::shared_ptr<const std::string> bytes = prepared->inventory_bytes();
  if (!viewer.privileged && HasPrivateUsage(*prepared->snapshot())) {
    absl::MutexLock lock(&redacted_mu_);
    if (redacted_of_ != prepared->snapshot()) {
      v1::Inventory copy = *prepared->snapshot();
      RedactInventory(copy);
      redacted_bytes_ = std::make_shared<const std::string>(copy.SerializeAsString());
      redacted_of_ = prepared->snapshot();
    }
    bytes = redacted_bytes_;
  }
  return bytes;
}

std::string DevicePlacementService::InventoryBytes(const v1::Inventory& inventory, const Viewer& viewer) {
  std::string bytes;
  if (!viewer.privileged && HasPrivateUsage(inventory)) {
    v1::Inventory copy = inventory;
    RedactInventory(copy);
    bytes = copy.SerializeAsString();
  } else {
    bytes = inventory.SerializeAsString();
  }
  return bytes + LeaseBytes(viewer);
}

}  // namespace devplace::service
