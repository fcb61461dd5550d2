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

namespace devplace::service {
namespace {

// Status messages travel in a trailer, which clients cap (8 KiB by default): longer ones are cut.
constexpr size_t kMaxStatusMessageBytes = 4096;

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  std::string message(s.message());
  if (message.size() > kMaxStatusMessageBytes) {
    message.resize(kMaxStatusMessageBytes);
    message += "... (truncated)";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), message);
}

// Bytes shared with the cache or the prepared snapshot, as a response body. Small answers are
// copied (one allocation); larger ones travel without a copy, the slice keeping them alive.
grpc::ByteBuffer SharedBytes(std::shared_ptr<const std::string> bytes) {
  constexpr size_t kCopyBelowBytes = 4096;
  if (bytes->size() < kCopyBelowBytes) {
    grpc::Slice copied(bytes->data(), bytes->size());
    return grpc::ByteBuffer(&copied, 1);
  }
  auto* holder = new std::shared_ptr<const std::string>(std::move(bytes));
  grpc::Slice shared(const_cast<char*>((*holder)->data()), (*holder)->size(),
                     [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, holder);
  return grpc::ByteBuffer(&shared, 1);
}

// A raw request body as one contiguous view: small requests arrive as one slice, viewed in place
// (`slices` keeps it alive); others are copied into `flat`. False when the buffer cannot be read.
bool WireBytes(const grpc::ByteBuffer* bytes, std::vector<grpc::Slice>& slices, std::string& flat,
               absl::string_view& wire) {
  if (!bytes->Dump(&slices).ok()) return false;
  if (slices.size() == 1) {
    wire = absl::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size());
    return true;
  }
  flat.reserve(bytes->Length());
  for (const grpc::Slice& s : slices) flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  wire = flat;
  return true;
}

template <typename Message>
grpc::Status Unparsable(size_t length) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat("request: ", length, " bytes that do not parse as a ",
                                   Message::descriptor()->full_name(),
                                   " (malformed protobuf, or a string field that is not UTF-8)"));
}

// Parses a raw request body into `message`; false (and INVALID_ARGUMENT in `error`) when it does
// not parse.
template <typename Message>
bool ParseRequest(const grpc::ByteBuffer* bytes, Message* message, grpc::Status* error) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  absl::string_view wire;
  if (WireBytes(bytes, slices, flat, wire) && message->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return true;
  }
  *error = Unparsable<Message>(bytes->Length());
  return false;
}

// UNAVAILABLE before the first inventory, with the latest probe failure when there was one.
grpc::Status NoInventory(const inventory::InventoryStore& store) {
  const std::optional<inventory::ProbeOutcome> error = store.LastError();
  if (!error.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no inventory yet: the first probe of this host has not completed");
  }
  return ToGrpc(absl::UnavailableError(absl::StrCat("no inventory yet: the last probe of this host failed (",
                                                    absl::StatusCodeToString(error->status.code()), ": ",
                                                    error->status.message(), "); retrying with backoff")));
}

// A lease RPC (LeaseRelease, LeaseKeepAlive): parses `Request`, checks its lease_id (1 to 64
// bytes, else INVALID_ARGUMENT), runs `op` and answers a `Response` holding the lease it returns.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* LeaseCall(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
                                    grpc::ByteBuffer* response_bytes,
                                    const std::function<absl::StatusOr<v1::LeaseInfo>(const Request&)>& op) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Request request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    reactor->Finish(bad);
    return reactor;
  }
  if (request.lease_id().empty() || request.lease_id().size() > 64) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "lease_id: 1 to 64 bytes, the LeaseInfo.lease_id PickDevices answered"));
    return reactor;
  }
  absl::StatusOr<v1::LeaseInfo> lease = op(request);
  if (lease.ok()) {
    Response response;
    *response.mutable_lease() = *std::move(lease);
    *response_bytes = SharedBytes(std::make_shared<const std::string>(response.SerializeAsString()));
  }
  reactor->Finish(ToGrpc(lease.status()));
  return reactor;
}

// "no_free_device", "invalid_argument", ...: a pick's outcome for metrics.
std::string OutcomeOf(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(c == ' ' ? '_' : std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// The gRPC deadline of a waiting pick: its wait, or the client's deadline less 100 ms (so it gets
// the answer, not DEADLINE_EXCEEDED).
absl::Time WaitDeadline(const grpc::CallbackServerContext* ctx, uint32_t wait_ms, absl::Time now) {
  absl::Time deadline = now + absl::Milliseconds(wait_ms);
  const absl::Time client = absl::FromChrono(ctx->deadline());
  if (client < absl::InfiniteFuture()) deadline = std::min(deadline, client - absl::Milliseconds(100));
  return deadline;
}

}  // namespace

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
      leases_(std::make_unique<LeaseTable>([this] { LeasesChanged(); })),
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

// ---- PickDevices and leases ----

absl::StatusOr<LeaseHolderSpec> DevicePlacementService::HolderFor(grpc::CallbackServerContext* ctx,
                                                                 const v1::PickDevicesRequest& request) const {
  std::optional<PeerCredentials> creds;
  if (access_.peers != nullptr) creds = access_.peers->Find(ctx->peer());
  LeaseHolderSpec holder;
  holder.kind = request.holder() != v1::LEASE_HOLDER_UNSPECIFIED ? request.holder()
                : creds                                         ? v1::LEASE_HOLDER_PROCESS
                                                                : v1::LEASE_HOLDER_TTL;
  if (creds) holder.caller_uid = creds->uid;
  if (holder.kind == v1::LEASE_HOLDER_TTL) {
    holder.ttl = absl::Milliseconds(request.ttl_ms() != 0 ? request.ttl_ms() : placement::kDefaultLeaseTtlMs);
    return holder;
  }
  const char* which = holder.kind == v1::LEASE_HOLDER_PARENT ? "LEASE_HOLDER_PARENT" : "LEASE_HOLDER_PROCESS";
  if (!creds) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: ", which, " needs the unix socket, where devplaced knows the calling process from its peer "
        "credentials; over TCP ask for LEASE_HOLDER_TTL (`devplace pick --ttl=10m`) and renew it with LeaseKeepAlive"));
  }
  const std::optional<ProcessIdentity> caller = ReadProcess(creds->pid);
  if (creds->pid <= 0 || !caller) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: the calling process (pid ", creds->pid, " as the socket reports it) is not visible to devplaced "
        "(another pid namespace, or it has exited), so no lease can follow its life; ask for LEASE_HOLDER_TTL "
        "(`devplace pick --ttl=10m`)"));
  }
  if (holder.kind == v1::LEASE_HOLDER_PROCESS) {
    holder.process = *caller;
    return holder;
  }
  const std::optional<ProcessIdentity> parent = ReadProcess(caller->ppid);
  if (caller->ppid <= 1 || !parent) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: LEASE_HOLDER_PARENT: the caller's parent (pid ", caller->ppid,
        ") cannot hold the lease (init, or not visible to devplaced); run the pick from the shell that starts the "
        "job, or ask for LEASE_HOLDER_TTL"));
  }
  if (parent->uid != creds->uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: LEASE_HOLDER_PARENT: the caller's parent (pid ", parent->pid, ") runs as uid ", parent->uid,
        ", not as the caller (uid ", creds->uid, "); a lease is held only for a process of the caller's own user"));
  }
  holder.process = *parent;
  return holder;
}

void DevicePlacementService::FinishPick(const PendingPick& pick, const grpc::Status& status,
                                        const std::string& outcome) {
  if (options_.on_pick) options_.on_pick(outcome, absl::Now() - pick.arrived);
  pick.reactor->Finish(status);
}

bool DevicePlacementService::TryPick(PendingPick& pick, bool waited) {
  const std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current();
  if (prepared == nullptr) {
    FinishPick(pick, NoInventory(store_), "unavailable");
    return true;
  }
  const placement::PickOutcome outcome = leases_->PickAndHold(*prepared->snapshot(), pick.request, pick.holder);
  if (outcome.status.ok()) {
    *pick.response = SharedBytes(std::make_shared<const std::string>(outcome.response.SerializeAsString()));
    LeasesChanged();
    FinishPick(pick, grpc::Status::OK, "answered");
    return true;
  }
  const absl::Time now = absl::Now();
  if (outcome.no_free_device && now < pick.deadline) return false;  // stays queued
  if (outcome.no_free_device && waited && pick.request.wait_ms() > 0) {  // queued only behind others: no wait
    FinishPick(pick,
               ToGrpc(absl::FailedPreconditionError(absl::StrCat(
                   "waited ", absl::ToInt64Milliseconds(now - pick.arrived), " ms (wait_ms ", pick.request.wait_ms(),
                   " or the call's deadline): ", outcome.status.message()))),
               "no_free_device_after_wait");
    return true;
  }
  FinishPick(pick, ToGrpc(outcome.status), outcome.no_free_device ? "no_free_device" : OutcomeOf(outcome.status));
  return true;
}

grpc::ServerUnaryReactor* DevicePlacementService::PickDevices(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* request_bytes,
                                                              grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  PendingPick pick{ctx, reactor, response_bytes, {}, {}, absl::Now(), absl::InfinitePast()};
  if (grpc::Status bad; !ParseRequest(request_bytes, &pick.request, &bad)) {
    FinishPick(pick, bad, "invalid_argument");
    return reactor;
  }
  if (absl::Status invalid = placement::ValidatePickRequest(pick.request); !invalid.ok()) {
    FinishPick(pick, ToGrpc(invalid), "invalid_argument");
    return reactor;
  }
  absl::StatusOr<LeaseHolderSpec> holder = HolderFor(ctx, pick.request);
  if (!holder.ok()) {
    FinishPick(pick, ToGrpc(holder.status()), OutcomeOf(holder.status()));
    return reactor;
  }
  pick.holder = *std::move(holder);
  pick.deadline = WaitDeadline(ctx, pick.request.wait_ms(), pick.arrived);
  {
    absl::MutexLock lock(&pick_mu_);
    if (picks_stopping_) {
      FinishPick(pick, grpc::Status(grpc::StatusCode::UNAVAILABLE, "devplaced is shutting down"), "unavailable");
      return reactor;
    }
    // Waiting picks come first: a new one queues behind them (arrival order).
    if (!waiting_.empty()) {
      waiting_.push_back(std::move(pick));
      pick_poked_ = true;
      return reactor;
    }
  }
  if (!TryPick(pick, false)) {
    absl::MutexLock lock(&pick_mu_);
    waiting_.push_back(std::move(pick));
    pick_poked_ = true;  // the worker takes its deadline into account
  }
  return reactor;
}

void DevicePlacementService::LeasesChanged() {
  if (options_.on_leases) options_.on_leases(leases_->size());
  absl::MutexLock lock(&pick_mu_);
  pick_poked_ = true;
}

void DevicePlacementService::PickWorker() {
  constexpr absl::Duration kRetryEvery = absl::Milliseconds(500);
  for (;;) {
    std::vector<PendingPick> round;
    bool stopping = false;
    {
      absl::MutexLock lock(&pick_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pick_mu_) {
        return picks_stopping_ || (pick_poked_ && !waiting_.empty());
      };
      absl::Duration wait = waiting_.empty() ? absl::InfiniteDuration() : kRetryEvery;
      const absl::Time now = absl::Now();
      for (const PendingPick& p : waiting_) wait = std::min(wait, std::max(p.deadline - now, absl::ZeroDuration()));
      pick_mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
      pick_poked_ = false;
      stopping = picks_stopping_;
      round.swap(waiting_);
    }
    std::vector<PendingPick> kept;
    for (PendingPick& p : round) {
      if (stopping) {
        FinishPick(p, grpc::Status(grpc::StatusCode::UNAVAILABLE, "devplaced is shutting down"), "unavailable");
      } else if (p.ctx->IsCancelled()) {
        FinishPick(p, grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away while waiting"), "cancelled");
      } else if (!TryPick(p, true)) {
        kept.push_back(std::move(p));
      }
    }
    if (stopping) return;
    absl::MutexLock lock(&pick_mu_);
    // Those that arrived meanwhile queue behind the ones still waiting.
    kept.insert(kept.end(), std::make_move_iterator(waiting_.begin()), std::make_move_iterator(waiting_.end()));
    waiting_.swap(kept);
  }
}

grpc::ServerUnaryReactor* DevicePlacementService::LeaseRelease(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request_bytes,
                                                               grpc::ByteBuffer* response_bytes) {
  return LeaseCall<v1::LeaseReleaseRequest, v1::LeaseReleaseResponse>(
      ctx, request_bytes, response_bytes,
      [this](const v1::LeaseReleaseRequest& request) { return leases_->Release(request.lease_id()); });
}

grpc::ServerUnaryReactor* DevicePlacementService::LeaseKeepAlive(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request_bytes,
                                                                 grpc::ByteBuffer* response_bytes) {
  return LeaseCall<v1::LeaseKeepAliveRequest, v1::LeaseKeepAliveResponse>(
      ctx, request_bytes, response_bytes,
      [this](const v1::LeaseKeepAliveRequest& request) -> absl::StatusOr<v1::LeaseInfo> {
        const uint32_t ttl = request.ttl_ms();
        if (ttl != 0 && (ttl < placement::kMinLeaseTtlMs || ttl > placement::kMaxLeaseTtlMs)) {
          return absl::InvalidArgumentError(absl::StrCat("ttl_ms: ", ttl, " is out of range; accepted: 0 (= ",
                                                         placement::kDefaultLeaseTtlMs, ") or ",
                                                         placement::kMinLeaseTtlMs, " to ", placement::kMaxLeaseTtlMs));
        }
        return leases_->KeepAlive(request.lease_id(),
                                  absl::Milliseconds(ttl != 0 ? ttl : placement::kDefaultLeaseTtlMs));
      });
}

}  // namespace devplace::service
