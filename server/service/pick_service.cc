// DevicePlacementService's PickDevices and lease calls (LeaseRelease, LeaseKeepAlive): the holder
// of each lease and each pick's answer. The queue of waiting picks is WaitingPicks
// (waiting_pick.h); the inventory calls are in service.cc.
#include <algorithm>
#include <cctype>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/placement/pick.h"
#include "server/service/connection_gate.h"
#include "server/service/service.h"
#include "server/service/wire.h"

namespace devplace::service {
namespace {

// A lease RPC (LeaseRelease, LeaseKeepAlive): parses `Request`, checks its lease_id (1 to 64
// bytes, else INVALID_ARGUMENT), runs `op` and answers a `Response` holding the lease it returns.
// "no_free_device", "invalid_argument", ...: a pick's or lease call's outcome for metrics.
std::string OutcomeOf(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(c == ' ' ? '_' : std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// A lease RPC (LeaseRelease, LeaseKeepAlive): parses `Request`, checks its lease_id (1 to 64
// bytes, else INVALID_ARGUMENT), runs `op` and answers a `Response` holding the lease it returns;
// `on_outcome` (when set) gets "ok" or the error's OutcomeOf.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* LeaseCall(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request_bytes,
                                    grpc::ByteBuffer* response_bytes,
                                    const std::function<absl::StatusOr<v1::LeaseInfo>(const Request&)>& op,
                                    const std::function<void(const std::string&)>& on_outcome) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const auto finish = [&](const grpc::Status& status, const std::string& outcome) {
    if (on_outcome) on_outcome(outcome);
    reactor->Finish(status);
  };
  Request request;
  if (grpc::Status bad; !ParseRequest(request_bytes, &request, &bad)) {
    finish(bad, "invalid_argument");
    return reactor;
  }
  if (request.lease_id().empty() || request.lease_id().size() > 64) {
    finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "lease_id: 1 to 64 bytes, the LeaseInfo.lease_id PickDevices answered"),
           "invalid_argument");
    return reactor;
  }
  absl::StatusOr<v1::LeaseInfo> lease = op(request);
  if (lease.ok()) {
    Response response;
    *response.mutable_lease() = *std::move(lease);
    *response_bytes = SharedBytes(std::make_shared<const std::string>(response.SerializeAsString()));
  }
  finish(ToGrpc(lease.status()), lease.ok() ? "ok" : OutcomeOf(lease.status()));
  return reactor;
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

// ---- PickDevices and leases ----

absl::StatusOr<LeaseHolderSpec> DevicePlacementService::HolderFor(grpc::CallbackServerContext* ctx,
                                                                 const v1::PickDevicesRequest& request) const {
  std::optional<PeerCredentials> creds;
  if (access_.peers != nullptr) creds = access_.peers->Find(ctx->peer());
  LeaseHolderSpec holder;
  // Unspecified: the calling process over the unix socket, a TTL lease when the caller gave a TTL.
  holder.kind = request.holder() != v1::LEASE_HOLDER_UNSPECIFIED ? request.holder()
                : request.ttl_ms() != 0                         ? v1::LEASE_HOLDER_TTL
                                                                : v1::LEASE_HOLDER_PROCESS;
  holder.caller_uid = CallerUid(ctx);
  if (holder.kind == v1::LEASE_HOLDER_TTL) {
    holder.ttl = absl::Milliseconds(request.ttl_ms() != 0 ? request.ttl_ms() : placement::kDefaultLeaseTtlMs);
    return holder;
  }
  const char* which = holder.kind == v1::LEASE_HOLDER_PARENT          ? "LEASE_HOLDER_PARENT"
                      : holder.kind == v1::LEASE_HOLDER_PROCESS_GROUP ? "LEASE_HOLDER_PROCESS_GROUP"
                                                                      : "LEASE_HOLDER_PROCESS";
  if (!creds) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: ", request.holder() == v1::LEASE_HOLDER_UNSPECIFIED ? "a lease for the calling process" : which,
        " needs the unix socket, where devplaced knows the calling process from its peer credentials (its mode "
        "says which local users may connect: by default every one; else ask the host's operator); over TCP a lease has a time to live, which only the caller can choose, since one "
        "that ends while the job runs hands its devices to the next pick: ask for it (`devplace pick --ttl=2h`, "
        "LEASE_HOLDER_TTL with ttl_ms) and renew it (`devplace renew`, LeaseKeepAlive), or pick over the unix socket"));
  }
  // The process that connected: its pid now must still be it (same uid, same start time).
  const std::optional<ProcessIdentity> caller = ReadProcess(creds->pid);
  if (creds->pid <= 0 || !caller) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: the calling process (pid ", creds->pid, " as the socket reports it) is not visible to devplaced "
        "(another pid namespace, or it has exited), so no lease can follow its life; ask for LEASE_HOLDER_TTL "
        "(`devplace pick --ttl=10m`)"));
  }
  if (caller->uid != creds->uid || (creds->start_time != 0 && caller->start_time != creds->start_time)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: pid ", creds->pid, " is no longer the process that connected (it exited and its pid was given to "
        "another process); connect again from the process that will hold the lease"));
  }
  if (holder.kind == v1::LEASE_HOLDER_PROCESS) {
    holder.process = *caller;
    return holder;
  }
  if (holder.kind == v1::LEASE_HOLDER_PROCESS_GROUP) {
    if (caller->pgid != caller->pid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "holder: LEASE_HOLDER_PROCESS_GROUP: the caller (pid ", caller->pid, ") does not lead its process group ",
          caller->pgid, "; call setpgid(0, 0) first (devplace run does)"));
    }
    holder.process = *caller;
    return holder;
  }
  // LEASE_HOLDER_PARENT: holder_pid, an ancestor of the caller (0: its parent), of the caller's uid.
  const pid_t wanted = request.holder_pid() != 0 ? static_cast<pid_t>(request.holder_pid()) : caller->ppid;
  std::optional<ProcessIdentity> ancestor = ReadProcess(caller->ppid);
  for (int up = 0; ancestor && ancestor->pid != wanted && ancestor->ppid > 1 && up < 64; ++up) {
    ancestor = ReadProcess(ancestor->ppid);
  }
  if (wanted <= 1 || !ancestor || ancestor->pid != wanted) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: LEASE_HOLDER_PARENT: pid ", wanted,
        " cannot hold the lease: it is not an ancestor of the calling process that devplaced can see (or it is "
        "init); run the pick from the shell that starts the job, or ask for LEASE_HOLDER_TTL"));
  }
  if (ancestor->uid != creds->uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: LEASE_HOLDER_PARENT: pid ", ancestor->pid, " runs as uid ", ancestor->uid, ", not as the caller (uid ",
        creds->uid, "); a lease is held only for a process of the caller's own user"));
  }
  holder.process = *ancestor;
  return holder;
}

void DevicePlacementService::FinishPick(const PendingPick& pick, const grpc::Status& status,
                                        const std::string& outcome) {
  if (options_.observer != nullptr) {
    options_.observer->OnPick(outcome, absl::Now() - pick.arrived);
    if (!status.ok()) {
      options_.observer->OnLeaseEvent({"refused", {}, pick.user.empty() ? UserOf(pick.ctx) : pick.user, outcome,
                                       status.error_message()});
    }
  }
  pick.reactor->Finish(status);
}

bool DevicePlacementService::TryPick(PendingPick& pick, bool waited, WaitingRound* round) {
  const std::shared_ptr<PreparedSnapshot> prepared = prepared_.Current();
  if (prepared == nullptr) {
    // A queued pick (one back from a restart, behind a placeholder) waits for the first inventory
    // within its wait rather than lose its place.
    if (round != nullptr && absl::Now() < pick.deadline) return false;
    FinishPick(pick, NoInventory(store_), "unavailable");
    return true;
  }
  if (round != nullptr && !round->held_back.empty() && round->held_back_in != prepared) {
    round->again = true;  // what older waiters keep free was found in another inventory
    return false;
  }
  const std::optional<uint64_t> only_if_ended =
      round != nullptr ? std::optional<uint64_t>(round->ended_at_start) : std::nullopt;
  const std::vector<placement::LeasedUnit> none;
  placement::PickOutcome outcome = leases_->PickAndHold(*prepared->snapshot(), pick.request, pick.holder,
                                                        only_if_ended, round != nullptr ? round->held_back : none);
  if (only_if_ended && outcome.status.code() == absl::StatusCode::kAborted) return false;  // the round starts again
  if (outcome.status.ok()) {
    *pick.response = SharedBytes(std::make_shared<const std::string>(outcome.response.SerializeAsString()));
    if (options_.observer != nullptr) options_.observer->OnLeaseEvent({"granted", outcome.response.lease(), pick.user, "", ""});
    LeasesChanged();
    FinishPick(pick, grpc::Status::OK, "answered");
    return true;
  }
  const absl::Time now = absl::Now();
  if (outcome.no_free_device && now < pick.deadline) {  // stays queued, keeping free what it could use
    if (round != nullptr) {
      const std::string why = absl::StrCat("it waits for ", std::max<uint32_t>(1, pick.request.count()), " device(s)");
      for (placement::LeasedUnit& unit : outcome.free_units) {
        unit.held_back = true;
        unit.holder = why;
        round->held_back.push_back(std::move(unit));
      }
      if (!outcome.free_units.empty()) round->held_back_in = prepared;
    }
    return false;
  }
  if (outcome.no_free_device && waited && pick.request.wait_ms() > 0) {  // queued only behind others: no wait
    FinishPick(pick,
               ToGrpc(absl::FailedPreconditionError(absl::StrCat(
                   "waited ", absl::ToInt64Milliseconds(now - pick.arrived), " ms (the pick's wait, ",
                   pick.request.wait_ms(), " ms, or the call's deadline): ", outcome.status.message()))),
               "no_free_device_after_wait");
    return true;
  }
  FinishPick(pick, ToGrpc(outcome.status),
             outcome.no_free_device                                           ? "no_free_device"
             : outcome.status.GetPayload(kOverUserCapPayload).has_value()     ? "over_user_device_cap"
             : outcome.status.GetPayload(kLeaseNotDurablePayload).has_value() ? "lease_not_durable"
                                                                              : OutcomeOf(outcome.status));
  return true;
}

grpc::ServerUnaryReactor* DevicePlacementService::PickDevices(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* request_bytes,
                                                              grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto pick = std::make_shared<PendingPick>();
  pick->ctx = ctx;
  pick->reactor = reactor;
  pick->response = response_bytes;
  pick->arrived = absl::Now();
  pick->arrival = waiting_.Arrive();  // before the parse: a big request must not lose its place
  // Parsing, the holder and the first attempt (the resolver over the whole request): on the
  // costly-call workers, each peer's calls in turn, as ResolveDevice's.
  const std::string peer = WatchPeer(ctx);
  const FairQueue::Submitted submitted = costly_.Submit(peer, [this, pick, request_bytes](bool shutting_down) {
    if (shutting_down) {
      FinishPick(*pick, ShuttingDown(), "unavailable");
    } else {
      StartPick(*pick, request_bytes);
    }
  });
  if (submitted == FairQueue::Submitted::kShuttingDown) {
    FinishPick(*pick, ShuttingDown(), "unavailable");
  } else if (submitted == FairQueue::Submitted::kPeerFull) {
    FinishPick(*pick, CostlyCallRefused(peer), "too_many_queued_calls");
  }
  return reactor;
}

void DevicePlacementService::StartPick(PendingPick& pick, const grpc::ByteBuffer* request_bytes) {
  grpc::CallbackServerContext* const ctx = pick.ctx;
  if (grpc::Status bad; !ParseRequest(request_bytes, &pick.request, &bad)) {
    // A call cancelled before its request arrived is no malformed request.
    if (ctx->IsCancelled()) {
      FinishPick(pick, grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away before its request arrived"),
                 "cancelled");
    } else {
      FinishPick(pick, bad, "invalid_argument");
    }
    return;
  }
  // The call keeps its request's bytes until it ends, which for a waiting pick may be an hour:
  // they are parsed, so they are handed back now (the buffer is the call's, cleared, not freed).
  const_cast<grpc::ByteBuffer*>(request_bytes)->Clear();
  if (absl::Status invalid = placement::ValidatePickRequest(pick.request); !invalid.ok()) {
    FinishPick(pick, ToGrpc(invalid), "invalid_argument");
    return;
  }
  absl::StatusOr<LeaseHolderSpec> holder = HolderFor(ctx, pick.request);
  if (!holder.ok()) {
    FinishPick(pick, ToGrpc(holder.status()), OutcomeOf(holder.status()));
    return;
  }
  pick.holder = *std::move(holder);
  pick.deadline = WaitDeadline(ctx, pick.request.wait_ms(), pick.arrived);  // the time queued here counts
  pick.user = UserOf(ctx);
  if (const std::optional<uid_t> uid = CallerUid(ctx)) pick.uid = static_cast<uint32_t>(*uid);
  switch (waiting_.Arriving()) {
    case WaitingPicks::Turn::kShuttingDown:
      FinishPick(pick, ShuttingDown(), "unavailable");
      break;
    case WaitingPicks::Turn::kBehindOthers:  // waiting picks come first: a new one queues behind them
      waiting_.Enqueue(std::move(pick));
      break;
    case WaitingPicks::Turn::kNow:
      if (!TryPick(pick, false)) waiting_.Enqueue(std::move(pick));
      break;
  }
}

bool DevicePlacementService::RetryWaiting(PendingPick& pick, WaitingRound& round) {
  if (pick.ctx->IsCancelled()) {
    FinishPick(pick, grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away while waiting"), "cancelled");
    return true;
  }
  return TryPick(pick, true, &round);
}

void DevicePlacementService::LeasesChanged() {
  if (options_.observer != nullptr) options_.observer->OnLeasesHeld(leases_->size());
  waiting_.Poke();
}

std::string DevicePlacementService::UserOf(grpc::CallbackServerContext* ctx) const {
  const std::optional<uid_t> uid = CallerUid(ctx);
  return uid ? absl::StrCat("uid:", *uid) : PeerKey(ctx->peer());
}

std::optional<uid_t> DevicePlacementService::CallerUid(grpc::CallbackServerContext* ctx) const {
  if (access_.peers != nullptr) {
    if (const std::optional<PeerCredentials> creds = access_.peers->Find(ctx->peer())) return creds->uid;
  }
  if (options_.connections != nullptr) {  // loopback TCP: the user the connection gate found for it
    if (const std::optional<std::string> key = options_.connections->PeerOf(ctx->peer())) {
      uint32_t uid = 0;
      if (absl::StartsWith(*key, "uid:") && absl::SimpleAtoi(absl::string_view(*key).substr(4), &uid)) return uid;
    }
  }
  return std::nullopt;
}

grpc::ServerUnaryReactor* DevicePlacementService::LeaseRelease(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request_bytes,
                                                               grpc::ByteBuffer* response_bytes) {
  return LeaseCall<v1::LeaseReleaseRequest, v1::LeaseReleaseResponse>(
      ctx, request_bytes, response_bytes,
      [this, ctx](const v1::LeaseReleaseRequest& request) {
        absl::StatusOr<v1::LeaseInfo> released = leases_->Release(request.lease_id(), LeaseCaller{CallerUid(ctx)});
        if (released.ok() && options_.observer != nullptr) {
          options_.observer->OnLeaseEvent({"released", *released, UserOf(ctx), "", ""});
        }
        return released;
      },
      [this](const std::string& outcome) {
        if (options_.observer != nullptr) options_.observer->OnLeaseCall("release", outcome);
      });
}

grpc::ServerUnaryReactor* DevicePlacementService::LeaseKeepAlive(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request_bytes,
                                                                 grpc::ByteBuffer* response_bytes) {
  return LeaseCall<v1::LeaseKeepAliveRequest, v1::LeaseKeepAliveResponse>(
      ctx, request_bytes, response_bytes,
      [this, ctx](const v1::LeaseKeepAliveRequest& request) -> absl::StatusOr<v1::LeaseInfo> {
        const uint32_t ttl = request.ttl_ms();
        if (ttl != 0 && (ttl < placement::kMinLeaseTtlMs || ttl > placement::kMaxLeaseTtlMs)) {
          return absl::InvalidArgumentError(absl::StrCat("ttl_ms: ", ttl, " is out of range; accepted: 0 (= ",
                                                         placement::kDefaultLeaseTtlMs, ") or ",
                                                         placement::kMinLeaseTtlMs, " to ", placement::kMaxLeaseTtlMs));
        }
        absl::StatusOr<v1::LeaseInfo> renewed =
            leases_->KeepAlive(request.lease_id(), absl::Milliseconds(ttl != 0 ? ttl : placement::kDefaultLeaseTtlMs),
                               LeaseCaller{CallerUid(ctx)});
        if (renewed.ok() && options_.observer != nullptr) {
          options_.observer->OnLeaseEvent({"renewed", *renewed, UserOf(ctx), "", ""});
        }
        return renewed;
      },
      [this](const std::string& outcome) {
        if (options_.observer != nullptr) options_.observer->OnLeaseCall("keep_alive", outcome);
      });
}

}  // namespace devplace::service
