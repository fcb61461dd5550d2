// libdevplace's Client: Client::Connect (which daemon, whether its socket may be trusted, then a
// gRPC Connection from grpc_connection.cc) and the calls over any Connection; the watch canceller.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grpc_connection.h"
#include "devplace/client.h"

namespace devplace {

void WatchCanceller::Cancel() {
  // The hook runs under the lock: the watch clears it (SetHook(nullptr)) before its ClientContext
  // goes away, and that waits here, so TryCancel never touches a destroyed context.
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (hook_) hook_();
}

bool WatchCanceller::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void WatchCanceller::SetHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hook_ = std::move(hook);
  if (cancelled_ && hook_) hook_();
}

absl::Status Connection::WatchInventory(uint64_t known_revision, InventoryCallback on_inventory,
                                        WatchCanceller* canceller) {
  if (canceller != nullptr && canceller->cancelled()) return absl::CancelledError("watch cancelled by the caller");
  return WatchInventory(known_revision, std::move(on_inventory));
}

absl::StatusOr<Client> Client::Connect(ConnectOptions options) {
  std::vector<std::string> notes;
  const char* env = std::getenv("DEVPLACE_ADDRESS");
  const bool from_env = options.address.empty() && env != nullptr && *env != '\0';
  const std::string target = options.address.empty() ? DefaultTarget(&notes) : options.address;
  const std::string address_option =
      options.address_option.empty() ? "ConnectOptions::address" : options.address_option;
  const std::string origin = !options.address.empty() ? absl::StrCat("from ", address_option)
                             : from_env              ? "from DEVPLACE_ADDRESS"
                                                     : "default; DEVPLACE_ADDRESS is not set";
  if (absl::StartsWith(target, "unix:")) {
    absl::string_view path = absl::string_view(target).substr(5);
    if (absl::StartsWith(path, "//")) path.remove_prefix(2);  // unix:///abs/path
    if (path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("address '", target, "': a unix: target needs a socket path, "
                                                     "e.g. unix:/run/devplace/devplace.sock"));
    }
    if (const absl::Status safe = CheckUnixSocket(std::string(path));
        !options.trust_any_socket && !safe.ok() && !absl::IsNotFound(safe)) {
      return absl::FailedPreconditionError(absl::StrCat("refusing ", target, " (", origin, "): ", safe.message()));
    }
  }
  if (options.address.empty() && !from_env && !absl::StartsWith(target, "unix:")) {
    // The implicit TCP fallback: nobody chose it, so refuse a listener another user could have bound.
    if (const absl::Status safe = CheckLocalListener(target); !safe.ok() && !absl::IsNotFound(safe)) {
      return absl::FailedPreconditionError(absl::StrCat("refusing ", target, " (", origin, "): ", safe.message()));
    }
  }
  absl::StatusOr<std::shared_ptr<Connection>> connection =
      internal::ConnectGrpc(target, options, internal::TargetNote(target, origin, notes, address_option));
  if (!connection.ok()) return connection.status();
  return Client(*std::move(connection));
}

Client::Client(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

absl::StatusOr<v1::ResolveDeviceResponse> Client::Resolve(const ResolveOptions& options) const {
  if (!options.fallback.empty() && options.fallback != "none" && options.fallback != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "fallback (DEVPLACE_FALLBACK) '", options.fallback.substr(0, 64),
        "': accepted: cpu (answer cpu with a warning when the daemon gives no answer) or none (the default)"));
  }
  absl::StatusOr<v1::ResolveDeviceResponse> answer = connection_->ResolveDevice(options.ToRequest());
  if (answer.ok() || options.fallback != "cpu" ||
      !(absl::IsUnavailable(answer.status()) || absl::IsDeadlineExceeded(answer.status()))) {
    return answer;
  }
  v1::ResolveDeviceResponse cpu;
  cpu.set_device("cpu");
  cpu.set_backend(v1::ROW_CPU);
  cpu.set_package("torch");
  cpu.add_devices("cpu");
  cpu.add_explanation("FALLBACK no answer from the daemon; fallback=cpu answers cpu without it");
  cpu.add_warnings(absl::StrCat("devplace fallback: answered cpu without the daemon (fallback=cpu); "
                                "accelerators, if any, are unused: ",
                                absl::StatusCodeToString(answer.status().code()), ": ", answer.status().message()));
  return cpu;
}

absl::StatusOr<v1::Inventory> Client::Inventory() const { return connection_->GetInventory(); }

absl::StatusOr<v1::ListBackendsResponse> Client::Backends() const { return connection_->ListBackends(); }

absl::StatusOr<v1::Inventory> Client::Refresh() const { return connection_->RefreshInventory(); }

absl::Status Client::Watch(uint64_t known_revision, InventoryCallback on_inventory, WatchCanceller* canceller) const {
  if (canceller == nullptr) return connection_->WatchInventory(known_revision, std::move(on_inventory));
  return connection_->WatchInventory(known_revision, std::move(on_inventory), canceller);
}

absl::StatusOr<bool> Client::Health() const { return connection_->Health(); }

absl::StatusOr<v1::PickDevicesResponse> Connection::PickDevices(const v1::PickDevicesRequest&) {
  return absl::UnimplementedError("this Connection does not implement PickDevices");
}

absl::StatusOr<v1::LeaseReleaseResponse> Connection::LeaseRelease(const v1::LeaseReleaseRequest&) {
  return absl::UnimplementedError("this Connection does not implement LeaseRelease");
}

absl::StatusOr<v1::LeaseKeepAliveResponse> Connection::LeaseKeepAlive(const v1::LeaseKeepAliveRequest&) {
  return absl::UnimplementedError("this Connection does not implement LeaseKeepAlive");
}

v1::PickDevicesRequest PickOptions::ToRequest() const {
  v1::PickDevicesRequest request;
  request.set_count(count);
  *request.mutable_job() = job.ToRequest();
  request.set_row(row);
  request.set_min_free_bytes(min_free_bytes);
  request.set_allow_shared(allow_shared);
  request.set_holder(holder);
  if (holder == v1::LEASE_HOLDER_PARENT) request.set_holder_pid(static_cast<uint32_t>(holder_pid));
  // Out-of-range durations are sent as such (saturated), so the daemon names the field.
  request.set_ttl_ms(static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(ttl), 0, UINT32_MAX)));
  request.set_wait_ms(static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(wait), 0, UINT32_MAX)));
  return request;
}

void ApplyPickEnvironment(const v1::PickDevicesResponse& pick) {
  for (const std::string& name : pick.unset()) unsetenv(name.c_str());
  for (const auto& [name, value] : pick.env()) setenv(name.c_str(), value.c_str(), 1);
}

JobHolder JobLeaseHolder() {
  JobHolder job;
  const pid_t pid = getpid();
  const pid_t group = getpgrp();
  if (group == pid) {
    job.holder = v1::LEASE_HOLDER_PROCESS_GROUP;
    return job;
  }
  job.warning = absl::StrCat(
      "the lease is held for this process only (pid ", pid, "): it does not lead its process group ", group,
      " (the group of the script, shell or task that started it), so processes it starts would go on running on the "
      "devices without a lease if it died first. To hold the lease for them too, start this program as the leader "
      "of a group (from an interactive shell, or with setsid), or call setpgid(0, 0) before Client::Pick where no "
      "terminal signals or reads it; PickOptions::holder = LEASE_HOLDER_PROCESS keeps this process's lease without "
      "this warning");
  return job;
}

absl::StatusOr<v1::PickDevicesResponse> Client::Pick(const PickOptions& options) const {
  v1::PickDevicesRequest request = options.ToRequest();
  JobHolder job;
  if (options.holder == v1::LEASE_HOLDER_UNSPECIFIED && options.ttl == absl::ZeroDuration()) {
    job = JobLeaseHolder();
    request.set_holder(job.holder);
  }
  const absl::Time wait_ends = absl::Now() + options.wait;
  absl::StatusOr<v1::PickDevicesResponse> picked = connection_->PickDevices(request);
  // The daemon went away while the pick waited (a restart): ask again within the wait, keeping
  // the place it had (the waiter id).
  for (absl::Duration backoff = absl::Milliseconds(100);
       !picked.ok() && absl::IsUnavailable(picked.status()) && options.wait > absl::ZeroDuration();
       backoff = std::min(backoff * 2, absl::Seconds(2))) {
    if (const auto id = picked.status().GetPayload(kWaiterIdPayload)) {
      request.set_waiter_id(std::string(*id));
    }
    const absl::Duration left = wait_ends - absl::Now() - backoff;
    if (left <= absl::ZeroDuration()) break;
    absl::SleepFor(backoff);
    request.set_wait_ms(static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, UINT32_MAX)));
    picked = connection_->PickDevices(request);
  }
  if (picked.ok() && !job.warning.empty()) picked->add_warnings(job.warning);
  return picked;
}

absl::StatusOr<v1::LeaseInfo> Client::ReleaseLease(const std::string& lease_id) const {
  v1::LeaseReleaseRequest request;
  request.set_lease_id(lease_id);
  absl::StatusOr<v1::LeaseReleaseResponse> released = connection_->LeaseRelease(request);
  if (!released.ok()) return released.status();
  return released->lease();
}

absl::StatusOr<v1::LeaseInfo> Client::KeepLeaseAlive(const std::string& lease_id, absl::Duration ttl) const {
  v1::LeaseKeepAliveRequest request;
  request.set_lease_id(lease_id);
  request.set_ttl_ms(static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(ttl), 0, UINT32_MAX)));
  absl::StatusOr<v1::LeaseKeepAliveResponse> kept = connection_->LeaseKeepAlive(request);
  if (!kept.ok()) return kept.status();
  return kept->lease();
}
}  // namespace devplace
