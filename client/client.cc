// libdevplace: the gRPC Connection, DefaultTarget, ResolveOptions and Client.
#include "devplace/client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
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
constexpr char kDefaultTcpTarget[] = "127.0.0.1:7465";

// `note` (where the call went, what was passed over) is appended to UNAVAILABLE messages when the
// daemon could not be reached (`channel` not READY), not when the daemon itself answered so.
absl::Status FromGrpc(const grpc::Status& status, const std::string& note = "", grpc::Channel* channel = nullptr) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share numbering and names (OK = 0 ... UNAUTHENTICATED = 16).
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && channel != nullptr &&
      channel->GetState(false) != GRPC_CHANNEL_READY) {
    message += note;
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

// The note appended to UNAVAILABLE errors: the target, whether it came from DEVPLACE_ADDRESS,
// and the default candidates passed over.
std::string TargetNote(const std::string& target, const std::string& origin, const std::vector<std::string>& notes) {
  std::string note = absl::StrCat(" [devplace target ", target, " (", origin, ")");
  if (!notes.empty()) absl::StrAppend(&note, "; passed over: ", absl::StrJoin(notes, "; "));
  absl::StrAppend(&note, "; set DEVPLACE_ADDRESS or --address to choose the daemon]");
  return note;
}

// Sets `context`'s deadline to now + `timeout` unless `timeout` means "none".
void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) return;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
}

class GrpcConnection final : public Connection {
 public:
  GrpcConnection(std::shared_ptr<grpc::Channel> channel, const ConnectOptions& options, std::string note)
      : channel_(channel),
        placement_(v1::DevicePlacement::NewStub(channel)),
        health_(health::Health::NewStub(channel)),
        timeout_(options.timeout),
        watch_timeout_(options.watch_timeout),
        note_(std::move(note)) {}

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
    return FromGrpc(status, note_, channel_.get());
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
    grpc::ClientContext context;
    SetDeadline(context, timeout_);
    Response response;
    const grpc::Status status = call(&context, &response);
    if (!status.ok()) return FromGrpc(status, note_, channel_.get());
    return response;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DevicePlacement::Stub> placement_;
  std::unique_ptr<health::Health::Stub> health_;
  absl::Duration timeout_;
  absl::Duration watch_timeout_;
  std::string note_;
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
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(prefix, "cannot read: ", std::strerror(errno)));
  std::stringstream content;
  content << in.rdbuf();
  const std::string pem = content.str();
  const bool found = what == "PRIVATE KEY"
                         ? pem.find("-----BEGIN ") != std::string::npos && pem.find("PRIVATE KEY-----") != std::string::npos
                         : pem.find(absl::StrCat("-----BEGIN ", what, "-----")) != std::string::npos;
  if (!found) return absl::InvalidArgumentError(absl::StrCat(prefix, "holds no PEM ", absl::AsciiStrToLower(what)));
  return pem;
}

// The channel's credentials and arguments for `target` under `options` (+ environment).
absl::Status ChannelSetup(const std::string& target, const ConnectOptions& given,
                          std::shared_ptr<grpc::ChannelCredentials>* credentials, grpc::ChannelArguments* args) {
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
  return absl::OkStatus();
}

// Whether `name` is `prefix` followed by at least one character, the first matching `first`
// (nullptr = any).
bool MatchesPrefix(absl::string_view name, absl::string_view prefix, int (*first)(int) = nullptr) {
  if (name.size() <= prefix.size() || !absl::StartsWith(name, prefix)) return false;
  return first == nullptr || first(static_cast<unsigned char>(name[prefix.size()])) != 0;
}

// Appends "/dev/<sub>/<name>" for each non-directory entry of dev_dir/sub that `match` accepts.
template <typename Match>
void ScanDev(const std::string& dev_dir, const std::string& sub, Match match, std::vector<std::string>* out) {
  const std::filesystem::path dir = sub.empty() ? std::filesystem::path(dev_dir) : std::filesystem::path(dev_dir) / sub;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return;
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_directory(type_ec) || !match(name)) continue;
    out->push_back(sub.empty() ? absl::StrCat("/dev/", name) : absl::StrCat("/dev/", sub, "/", name));
  }
}

// An integer as Python's int() reads it (surrounding whitespace, optional sign, digits), or nullopt.
std::optional<int64_t> ParseInt(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::string_view digits = text;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) digits.remove_prefix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) return std::nullopt;
  return value;
}

}  // namespace

absl::Status CheckUnixSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such socket"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  const uid_t me = ::geteuid();
  if (!S_ISSOCK(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a socket"));
  if (st.st_uid != 0 && st.st_uid != me) {
    return absl::FailedPreconditionError(absl::StrCat("socket ", path, " is owned by uid ", st.st_uid,
                                                      ", not root or you (uid ", me, "): refused as possibly squatted"));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat d;
  if (::stat(dir.empty() ? "." : dir.c_str(), &d) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": ", std::strerror(errno)));
  }
  if (d.st_uid != 0 && d.st_uid != me) {
    return absl::FailedPreconditionError(absl::StrCat("socket directory ", dir, " is owned by uid ", d.st_uid,
                                                      ", not root or you (uid ", me, "): refused as possibly squatted"));
  }
  if ((d.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (d.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", dir, " is writable by group or others without the sticky bit: refused, another "
        "user could have replaced the socket"));
  }
  return absl::OkStatus();
}

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
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  if (absl::Status status = ChannelSetup(target, options, &credentials, &args); !status.ok()) {
    return std::make_shared<FailedConnection>(std::move(status));
  }
  return std::make_shared<GrpcConnection>(grpc::CreateCustomChannel(target, credentials, args), options,
                                          TargetNote(target, "given", {}));
}

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

const std::vector<std::string>& PlacementEnvironmentVariables() {
  static const std::vector<std::string>* const kVariables = new std::vector<std::string>{
      "CUDA_VISIBLE_DEVICES",    "CUDA_DEVICE_ORDER",      "ROCR_VISIBLE_DEVICES",   "HIP_VISIBLE_DEVICES",
      "ZE_AFFINITY_MASK",        "ZE_FLAT_DEVICE_HIERARCHY", "ZE_ENABLE_PCI_ID_DEVICE_ORDER",
      "ASCEND_RT_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES",
      "CN_VISIBLE_DEVICES",      "MUSA_VISIBLE_DEVICES",   "SDAA_VISIBLE_DEVICES",   "NEURON_RT_VISIBLE_CORES",
      "NEURON_RT_NUM_CORES",
      "HABANA_VISIBLE_MODULES",  "HABANA_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS",      "LOCAL_RANK",
      "WORLD_SIZE",              "ACCELERATE_USE_CPU",     "ACCELERATE_TORCH_DEVICE", "USE_TORCH_XLA",
  };
  return *kVariables;
}

std::vector<std::string> JobDeviceNodes(const std::string& dev_dir) {
  auto digit = [](int c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)) ? 1 : 0; };
  std::vector<std::string> nodes;
  ScanDev(dev_dir, "", [&](absl::string_view n) {
    return MatchesPrefix(n, "nvidia", +digit) || absl::StartsWith(n, "neuron") || absl::StartsWith(n, "accel") ||
           MatchesPrefix(n, "davinci", +digit) || absl::StartsWith(n, "cambricon_dev") || absl::StartsWith(n, "mtgpu.");
  }, &nodes);
  ScanDev(dev_dir, "dri", [](absl::string_view n) {
    return absl::StartsWith(n, "renderD") || absl::StartsWith(n, "card");
  }, &nodes);
  ScanDev(dev_dir, "vfio", [&](absl::string_view n) { return digit(static_cast<unsigned char>(n[0])) != 0; }, &nodes);
  ScanDev(dev_dir, "accel", [](absl::string_view n) { return absl::StartsWith(n, "accel"); }, &nodes);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

v1::ResolveDeviceRequest ResolveOptions::ToRequest() const {
  v1::ResolveDeviceRequest request;
  request.set_workload(workload);
  request.set_convention(convention);
  request.set_device_map(device_map);
  request.set_use_cpu(use_cpu);
  if (local_rank) request.set_local_rank(*local_rank);
  if (world_size) request.set_world_size(*world_size);
  for (const auto& [key, value] : env) (*request.mutable_env())[key] = value;
  for (const std::string& backend : runtime_backends) request.add_runtime_backends(backend);
  if (job_device_nodes) {
    v1::JobDevices* devices = request.mutable_job_devices();  // present even when the list is empty
    for (const std::string& node : *job_device_nodes) devices->add_device_nodes(node);
  }
  request.set_strict(strict);
  if (model_size_bytes) request.set_model_size_bytes(*model_size_bytes);
  request.set_transformers_version(transformers_version);
  request.set_accelerate_version(accelerate_version);
  return request;
}

ResolveOptions ResolveOptions::FromEnvironment() { return FromEnvironment("/dev"); }

namespace {
// The placement variables `lookup` finds (nullptr = unset) as options: LOCAL_RANK / WORLD_SIZE
// fill local_rank / world_size when valid, everything else goes into env verbatim.
template <typename Lookup>
ResolveOptions PlacementOptions(Lookup lookup) {
  ResolveOptions options;
  for (const std::string& name : PlacementEnvironmentVariables()) {
    const char* value = lookup(name);
    if (value == nullptr) continue;
    const std::optional<int64_t> number = ParseInt(value);
    if (name == "LOCAL_RANK" && number && *number >= 0 && *number <= INT32_MAX) {
      options.local_rank = static_cast<int32_t>(*number);
    } else if (name == "WORLD_SIZE" && number && *number >= 1 && *number <= INT32_MAX) {
      options.world_size = static_cast<int32_t>(*number);
    } else {
      options.env[name] = value;
    }
  }
  return options;
}
}  // namespace

ResolveOptions ResolveOptions::FromEnvironment(const std::string& dev_dir) {
  ResolveOptions options = PlacementOptions([](const std::string& name) { return std::getenv(name.c_str()); });
  options.job_device_nodes = JobDeviceNodes(dev_dir);
  return options;
}

ResolveOptions ResolveOptions::ForJob(v1::Workload workload, const std::map<std::string, std::string>& job_env,
                                      std::optional<std::vector<std::string>> job_device_nodes) {
  ResolveOptions options = PlacementOptions([&job_env](const std::string& name) -> const char* {
    const auto it = job_env.find(name);
    return it == job_env.end() ? nullptr : it->second.c_str();
  });
  options.workload = workload;
  options.job_device_nodes = std::move(job_device_nodes);
  return options;
}

absl::StatusOr<Client> Client::Connect(ConnectOptions options) {
  std::vector<std::string> notes;
  const char* env = std::getenv("DEVPLACE_ADDRESS");
  const bool from_env = options.address.empty() && env != nullptr && *env != '\0';
  const std::string target = options.address.empty() ? DefaultTarget(&notes) : options.address;
  const std::string origin = !options.address.empty() ? "from --address/ConnectOptions::address"
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
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  if (absl::Status status = ChannelSetup(target, options, &credentials, &args); !status.ok()) return status;
  return Client(std::make_shared<GrpcConnection>(grpc::CreateCustomChannel(target, credentials, args), options,
                                                 TargetNote(target, origin, notes)));
}

Client::Client(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

absl::StatusOr<v1::ResolveDeviceResponse> Client::Resolve(const ResolveOptions& options) const {
  return connection_->ResolveDevice(options.ToRequest());
}

absl::StatusOr<v1::Inventory> Client::Inventory() const { return connection_->GetInventory(); }

absl::StatusOr<v1::ListBackendsResponse> Client::Backends() const { return connection_->ListBackends(); }

absl::StatusOr<v1::Inventory> Client::Refresh() const { return connection_->RefreshInventory(); }

absl::Status Client::Watch(uint64_t known_revision, InventoryCallback on_inventory, WatchCanceller* canceller) const {
  if (canceller == nullptr) return connection_->WatchInventory(known_revision, std::move(on_inventory));
  return connection_->WatchInventory(known_revision, std::move(on_inventory), canceller);
}

absl::StatusOr<bool> Client::Health() const { return connection_->Health(); }

}  // namespace devplace
