// libdevplace's gRPC side: the Connection over a gRPC channel (unary deadlines, the watch stream,
// health), the channel's TLS credentials from ConnectOptions and DEVPLACE_TLS_*, the unix-socket
// trust check and DefaultTarget(), MakeGrpcConnection(), and ConnectGrpc() for Client::Connect.
#include "client/grpc_connection.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/common/bounded_read.h"
#include "client/connect_diagnosis.h"
#include "devplace/client.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpc/grpc.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace devplace {
namespace {

namespace health = ::grpc::health::v1;

constexpr char kSystemSocket[] = "/run/devplace/devplace.sock";
// The initial metadata entry a waiting pick's waiter id comes in (PickDevicesRequest.waiter_id).
constexpr char kWaiterIdMetadata[] = "devplace-waiter-id";
constexpr char kDefaultTcpTarget[] = "127.0.0.1:7465";

// Where the call went, for UNAVAILABLE messages: the target and the TLS settings its channel uses,
// and `note` (where the target came from, what was passed over).
struct Destination {
  std::string target;
  internal::TlsSettings tls;
  std::string note;
};

// When the daemon could not be reached (`channel` not READY; not when the daemon itself answered
// UNAVAILABLE), the message starts with the cause found by dialling `to` again
// (DiagnoseUnreachable: not running, a TLS mistake and the flag that fixes it), keeps gRPC's text,
// and ends with `to.note`. A DEADLINE_EXCEEDED after `waited` (non-zero: the call's own deadline
// passed, not an error the daemon sent) starts with NoAnswer: the target, the time waited, what to check.
absl::Status FromGrpc(const grpc::Status& status, const Destination* to = nullptr, grpc::Channel* channel = nullptr,
                      absl::Duration timeout = absl::Seconds(3), absl::Duration waited = absl::ZeroDuration()) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share numbering and names (OK = 0 ... UNAUTHENTICATED = 16).
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && channel != nullptr && to != nullptr &&
      channel->GetState(false) != GRPC_CHANNEL_READY) {
    const std::string cause = internal::DiagnoseUnreachable(to->target, to->tls, timeout);
    if (!cause.empty()) message = absl::StrCat(cause, " (gRPC: ", message, ")");
    message += to->note;
  } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && to != nullptr &&
             waited > absl::ZeroDuration()) {
    message = absl::StrCat(internal::NoAnswer(to->target, waited), " (gRPC: ", message, ")", to->note);
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
}

// A socket this process may connect to (a root-owned 0660 socket is skipped by other users, who
// then fall back to the TCP listener) and may trust; otherwise why not, in `why`.
bool IsUsableSocket(const std::string& path, std::string* why) {
  const absl::Status safe = CheckUnixSocket(path);
  if (!safe.ok()) {
    *why = std::string(safe.message());
    return false;
  }
  if (::access(path.c_str(), R_OK | W_OK) != 0) {
    *why = absl::StrCat("no permission to connect (", std::strerror(errno), ")");
    return false;
  }
  return true;
}

// Sets `context`'s deadline to now + `timeout` unless `timeout` means "none".
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) return;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
}

// `timeout` when `context`'s deadline (set by SetDeadline) has passed, else zero: FromGrpc's `waited`.
absl::Duration Waited(const grpc::ClientContext& context, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) return absl::ZeroDuration();
  return std::chrono::system_clock::now() >= context.deadline() ? timeout : absl::ZeroDuration();
}

class GrpcConnection final : public Connection {
 public:
  GrpcConnection(std::shared_ptr<grpc::Channel> channel, const ConnectOptions& options, Destination to)
      : channel_(channel),
        placement_(v1::DevicePlacement::NewStub(channel)),
        health_(health::Health::NewStub(channel)),
        timeout_(options.timeout),
        watch_timeout_(options.watch_timeout),
        to_(std::move(to)) {}

  absl::StatusOr<v1::ResolveDeviceResponse> ResolveDevice(const v1::ResolveDeviceRequest& request) override {
    return Unary<v1::ResolveDeviceResponse>([&](grpc::ClientContext* c, v1::ResolveDeviceResponse* r) {
      return placement_->ResolveDevice(c, request, r);
    });
  }

  absl::StatusOr<v1::Inventory> GetInventory() override {
    return Unary<v1::Inventory>([&](grpc::ClientContext* c, v1::Inventory* r) {
      return placement_->GetInventory(c, v1::GetInventoryRequest(), r);
    });
  }

  absl::StatusOr<v1::ListBackendsResponse> ListBackends() override {
    return Unary<v1::ListBackendsResponse>([&](grpc::ClientContext* c, v1::ListBackendsResponse* r) {
      return placement_->ListBackends(c, v1::ListBackendsRequest(), r);
    });
  }

  absl::StatusOr<v1::Inventory> RefreshInventory() override {
    return Unary<v1::Inventory>([&](grpc::ClientContext* c, v1::Inventory* r) {
      return placement_->RefreshInventory(c, v1::RefreshInventoryRequest(), r);
    });
  }

  absl::Status WatchInventory(uint64_t known_revision, InventoryCallback on_inventory) override {
    return WatchInventory(known_revision, std::move(on_inventory), nullptr);
  }

  absl::Status WatchInventory(uint64_t known_revision, InventoryCallback on_inventory,
                              WatchCanceller* canceller) override {
    grpc::ClientContext context;
    SetDeadline(context, watch_timeout_);
    if (canceller != nullptr) canceller->SetHook([&context] { context.TryCancel(); });
    struct ClearHook {
      WatchCanceller* c;
      ~ClearHook() {
        if (c != nullptr) c->SetHook(nullptr);
      }
    } clear{canceller};
    v1::WatchInventoryRequest request;
    request.set_known_revision(known_revision);
    std::unique_ptr<grpc::ClientReader<v1::Inventory>> reader = placement_->WatchInventory(&context, request);
    v1::Inventory inventory;
    bool stopped = false;
    while (reader->Read(&inventory)) {
      if (!on_inventory(inventory)) {
        stopped = true;
        context.TryCancel();
        break;
      }
    }
    if (stopped) {
      while (reader->Read(&inventory)) {}  // drain what was in flight; Finish wants Read == false
    }
    const grpc::Status status = reader->Finish();
    if (stopped) return absl::OkStatus();
    if (canceller != nullptr && canceller->cancelled()) return absl::CancelledError("watch cancelled by the caller");
    if (status.ok()) {
      return absl::AbortedError("the daemon ended the watch (it is shutting down); reconnect to keep watching");
    }
    return FromGrpc(status, &to_, channel_.get(), timeout_);
  }

  absl::StatusOr<v1::PickDevicesResponse> PickDevices(const v1::PickDevicesRequest& request) override {
    // A pick may wait in the daemon (wait_ms); the call's deadline covers that wait too.
    const absl::Duration timeout =
        timeout_ <= absl::ZeroDuration() || timeout_ == absl::InfiniteDuration()
            ? timeout_
            : timeout_ + absl::Milliseconds(request.wait_ms());
    grpc::ClientContext context;
    SetDeadline(context, timeout);
    v1::PickDevicesResponse response;
    const grpc::Status status = placement_->PickDevices(&context, request, &response);
    if (status.ok()) return response;
    absl::Status failed = FromGrpc(status, &to_, channel_.get(), timeout_, Waited(context, timeout));
    // The place a waiting pick had in the daemon's queue (sent before the daemon went): Client::Pick
    // asks again with it.
    const auto& metadata = context.GetServerInitialMetadata();
    if (auto id = metadata.find(kWaiterIdMetadata); id != metadata.end() && id->second.size() <= 64) {
      failed.SetPayload(kWaiterIdPayload, absl::Cord(absl::string_view(id->second.data(), id->second.size())));
    }
    return failed;
  }

  absl::StatusOr<v1::LeaseReleaseResponse> LeaseRelease(const v1::LeaseReleaseRequest& request) override {
    return Unary<v1::LeaseReleaseResponse>([&](grpc::ClientContext* c, v1::LeaseReleaseResponse* r) {
      return placement_->LeaseRelease(c, request, r);
    });
  }

  absl::StatusOr<v1::LeaseKeepAliveResponse> LeaseKeepAlive(const v1::LeaseKeepAliveRequest& request) override {
    return Unary<v1::LeaseKeepAliveResponse>([&](grpc::ClientContext* c, v1::LeaseKeepAliveResponse* r) {
      return placement_->LeaseKeepAlive(c, request, r);
    });
  }

  absl::StatusOr<bool> Health() override {
    health::HealthCheckRequest request;
    request.set_service("");
    absl::StatusOr<health::HealthCheckResponse> response =
        Unary<health::HealthCheckResponse>([&](grpc::ClientContext* c, health::HealthCheckResponse* r) {
          return health_->Check(c, request, r);
        });
    if (!response.ok()) return response.status();
    return response->status() == health::HealthCheckResponse::SERVING;
  }

 private:
  // Runs one unary call `call(context, response)` under the unary deadline.
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(Call call) {
    return Unary<Response>(std::move(call), timeout_);
  }
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(Call call, absl::Duration timeout) {
    grpc::ClientContext context;
    SetDeadline(context, timeout);
    Response response;
    const grpc::Status status = call(&context, &response);
    if (!status.ok()) return FromGrpc(status, &to_, channel_.get(), timeout_, Waited(context, timeout));
    return response;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DevicePlacement::Stub> placement_;
  std::unique_ptr<health::Health::Stub> health_;
  absl::Duration timeout_;
  absl::Duration watch_timeout_;
  Destination to_;
};

// A Connection whose every call fails with `status` (MakeGrpcConnection with unusable TLS files).
class FailedConnection final : public Connection {
 public:
  explicit FailedConnection(absl::Status status) : status_(std::move(status)) {}
  absl::StatusOr<v1::ResolveDeviceResponse> ResolveDevice(const v1::ResolveDeviceRequest&) override { return status_; }
  absl::StatusOr<v1::Inventory> GetInventory() override { return status_; }
  absl::StatusOr<v1::ListBackendsResponse> ListBackends() override { return status_; }
  absl::StatusOr<v1::Inventory> RefreshInventory() override { return status_; }
  absl::Status WatchInventory(uint64_t, InventoryCallback) override { return status_; }
  absl::StatusOr<bool> Health() override { return status_; }
  absl::StatusOr<v1::PickDevicesResponse> PickDevices(const v1::PickDevicesRequest&) override { return status_; }
  absl::StatusOr<v1::LeaseReleaseResponse> LeaseRelease(const v1::LeaseReleaseRequest&) override { return status_; }
  absl::StatusOr<v1::LeaseKeepAliveResponse> LeaseKeepAlive(const v1::LeaseKeepAliveRequest&) override {
    return status_;
  }

 private:
  absl::Status status_;
};

// One TLS option: its ConnectOptions field and environment variable.
struct TlsField {
  const char* option;
  const char* variable;
  std::string ConnectOptions::*member;
};

constexpr TlsField kTlsFields[] = {
    {"tls_ca", "DEVPLACE_TLS_CA", &ConnectOptions::tls_ca},
    {"tls_cert", "DEVPLACE_TLS_CERT", &ConnectOptions::tls_cert},
    {"tls_key", "DEVPLACE_TLS_KEY", &ConnectOptions::tls_key},
    {"tls_server_name", "DEVPLACE_TLS_SERVER_NAME", &ConnectOptions::tls_server_name},
};

// A PEM file's text; `what` names the PEM block it must hold ("CERTIFICATE", "PRIVATE KEY").
// Errors name `source` ("tls_ca" or "DEVPLACE_TLS_CA").
absl::StatusOr<std::string> ReadPemFile(const std::string& source, const std::string& path, absl::string_view what) {
  const std::string prefix = absl::StrCat(source, "=", path, ": ");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return absl::InvalidArgumentError(prefix + "is a directory, not a PEM file");
  if (::access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "cannot read: ", std::strerror(errno)));
  }
  // A regular file of at most 1 MiB (a CA bundle is a few hundred KB), read within 10 s.
  reading::ReadBudget budget(absl::Seconds(10), reading::kMiB);
  absl::StatusOr<std::string> read = reading::ReadRegularFile(path, reading::kMiB, budget);
  if (!read.ok()) return absl::InvalidArgumentError(absl::StrCat(prefix, read.status().message()));
  const std::string pem = *std::move(read);
  const bool found = what == "PRIVATE KEY"
                         ? pem.find("-----BEGIN ") != std::string::npos && pem.find("PRIVATE KEY-----") != std::string::npos
                         : pem.find(absl::StrCat("-----BEGIN ", what, "-----")) != std::string::npos;
  if (!found) return absl::InvalidArgumentError(absl::StrCat(prefix, "holds no PEM ", absl::AsciiStrToLower(what)));
  return pem;
}

// The channel's credentials and arguments for `target` under `options` (+ environment).
absl::Status ChannelSetup(const std::string& target, const ConnectOptions& given,
                          std::shared_ptr<grpc::ChannelCredentials>* credentials, grpc::ChannelArguments* args,
                          internal::TlsSettings* used) {
  *credentials = grpc::InsecureChannelCredentials();
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return absl::OkStatus();
  ConnectOptions options = given;
  std::map<std::string, std::string> source;  // option -> the name errors use
  for (const TlsField& field : kTlsFields) {
    std::string& value = options.*field.member;
    source[field.option] = field.option;
    if (!value.empty()) continue;
    if (const char* env = std::getenv(field.variable); env != nullptr && *env != '\0') {
      value = env;
      source[field.option] = field.variable;
    }
  }
  if (options.tls_ca.empty() && options.tls_cert.empty() && options.tls_key.empty()) return absl::OkStatus();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    const char* missing = options.tls_cert.empty() ? "tls_cert" : "tls_key";
    const char* present = options.tls_cert.empty() ? "tls_key" : "tls_cert";
    return absl::InvalidArgumentError(absl::StrCat(source[present], " is set without ", missing,
                                                   ": a client certificate needs its private key and the other way round"));
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> pem = ReadPemFile(source["tls_ca"], options.tls_ca, "CERTIFICATE");
    if (!pem.ok()) return pem.status();
    ssl.pem_root_certs = *std::move(pem);
  }
  if (!options.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(source["tls_cert"], options.tls_cert, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(source["tls_key"], options.tls_key, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  *credentials = grpc::SslCredentials(ssl);
  if (!options.tls_server_name.empty()) args->SetSslTargetNameOverride(options.tls_server_name);
  *used = {true, options.tls_ca, options.tls_cert, options.tls_key, options.tls_server_name};
  return absl::OkStatus();
}

}  // namespace

namespace internal {

std::string TargetNote(const std::string& target, const std::string& origin, const std::vector<std::string>& notes,
                       const std::string& address_option) {
  std::string note = absl::StrCat(" [devplace target ", target, " (", origin, ")");
  if (!notes.empty()) absl::StrAppend(&note, "; passed over: ", absl::StrJoin(notes, "; "));
  absl::StrAppend(&note, "; set DEVPLACE_ADDRESS or ", address_option, " to choose the daemon]");
  return note;
}

absl::StatusOr<std::shared_ptr<Connection>> ConnectGrpc(const std::string& target, const ConnectOptions& options,
                                                        std::string note) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  // A daemon that restarts (a package upgrade) is back within seconds, and a waiting pick asks
  // again then (Client::Pick): the channel tries to reconnect at most every 2 s, not gRPC's 2 min.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  Destination to{target, {}, std::move(note)};
  if (absl::Status status = ChannelSetup(target, options, &credentials, &args, &to.tls); !status.ok()) return status;
  return std::shared_ptr<Connection>(std::make_shared<GrpcConnection>(
      grpc::CreateCustomChannel(target, credentials, args), options, std::move(to)));
}

}  // namespace internal

std::string DefaultTarget() { return DefaultTarget(nullptr); }

std::string DefaultTarget(std::vector<std::string>* notes) {
  if (const char* address = std::getenv("DEVPLACE_ADDRESS"); address != nullptr && *address != '\0') {
    return address;
  }
  std::vector<std::string> candidates = {kSystemSocket};
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime != '\0') {
    candidates.push_back(absl::StrCat(runtime, "/devplace.sock"));
  }
  // Where a non-root devplaced without XDG_RUNTIME_DIR listens.
  candidates.push_back(absl::StrCat("/tmp/devplace-", ::geteuid(), "/devplace.sock"));
  for (const std::string& path : candidates) {
    std::string why;
    if (IsUsableSocket(path, &why)) return absl::StrCat("unix:", path);
    if (notes != nullptr) notes->push_back(absl::StrCat("unix:", path, " (", why, ")"));
  }
  return kDefaultTcpTarget;
}

std::shared_ptr<Connection> MakeGrpcConnection(const std::string& target, const ConnectOptions& options) {
  absl::StatusOr<std::shared_ptr<Connection>> connection =
      internal::ConnectGrpc(target, options, internal::TargetNote(target, "given", {}, "ConnectOptions::address"));
  if (!connection.ok()) return std::make_shared<FailedConnection>(connection.status());
  return *std::move(connection);
}

}  // namespace devplace
