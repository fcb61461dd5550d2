// Daemon: devplaced's start-up, as a list of builders run in the order the daemon has always run
// them (see daemon.h for the contract); the signal loop and shutdown are in daemon_run.cc. Every
// log line here is one of devplaced's documented events.
#include "server/daemon/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/resource_quota.h"
#include "server/common/atomic_file.h"
#include "server/common/vendor_libraries.h"
#include "server/common/version.h"
#include "server/placement/health_carry.h"
#include "server/service/connection_metrics.h"
#include "server/service/tcp_peer.h"
#include "spdlog/spdlog.h"

namespace devplace::daemon {
namespace {

// Descriptors: the soft limit goes up to the hard one, so a connection flood needs the hard limit.
void RaiseDescriptorLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
      spdlog::warn("event=rlimit_nofile_failed error=\"{}\"", strerror(errno));
    }
  }
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) spdlog::info("event=rlimit_nofile soft={} hard={}", files.rlim_cur, files.rlim_max);
}

void LogStart(const ValidConfig& config) {
  const DaemonConfig& c = config.config;
  const std::string& torch_probe = config.torch_probe_command;
  spdlog::info("event=start version={} pid={} host_root={} probe_command={} torch_probe_command={} probe_timeout_ms={} "
               "refresh_interval_s={} usage_interval_ms={}",
               kVersion, getpid(), c.host_root, config.probe_command, torch_probe.empty() ? "none" : torch_probe,
               absl::ToInt64Milliseconds(c.probe_timeout), absl::ToInt64Seconds(c.refresh_interval),
               absl::ToInt64Milliseconds(c.usage_interval));
}

// A probe grandchild that escapes the group kill with setsid() is re-parented here and killed
// after the run (devplaced's only children are probe children).
void EnableOrphanCleanup() {
  if (const absl::Status s = inventory::EnableOrphanCleanup(); !s.ok()) {
    spdlog::warn("event=orphan_cleanup_disabled error=\"{}\"", std::string(s.message()));
  }
}

// Logs a listener that could not be bound (event=listen_failed KEY=ADDRESS), and says so on stderr
// as `devplaced: --FLAG=ADDRESS: why`.
void LogListenFailed(const char* key, const char* flag, const std::string& address, const absl::Status& error) {
  spdlog::error("event=listen_failed {}={} error=\"{}\"", key, address, std::string(error.message()));
  fprintf(stderr, "devplaced: --%s=%s: %s\n", flag, address.c_str(), std::string(error.message()).c_str());
}

}  // namespace

sigset_t BlockDaemonSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int ExitStatus(const absl::Status& start_error) {
  return start_error.code() == absl::StatusCode::kInvalidArgument ||
                 start_error.code() == absl::StatusCode::kFailedPrecondition
             ? 2
             : 1;
}

Daemon::Daemon(ValidConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() {
  if (state_ == State::kRunning) {
    Stop();
    Wait();
  }
}

void Daemon::Stop() { stop_requested_ = true; }

absl::Status Daemon::Start() {
  if (state_ != State::kNew) return absl::FailedPreconditionError("Daemon::Start() may be called once");
  state_ = State::kDone;  // unless everything below starts
  // Signals are taken by sigtimedwait in Wait(); every thread started later (the TLS certificate
  // watcher's and gRPC's below included) inherits the mask, so none of them can be killed by one.
  signals_ = BlockDaemonSignals();
  signal(SIGPIPE, SIG_IGN);
  if (absl::Status s = BuildTls(); !s.ok()) return s;
  RaiseDescriptorLimit();
  BuildConnectionGates();
  LogStart(config_);
  EnableOrphanCleanup();
  BuildObserver();
  if (absl::Status s = LockStateFiles(); !s.ok()) return s;  // before the health file is read
  BuildStore();
  BuildService();
  if (absl::Status s = BuildNfdWriter(); !s.ok()) return s;
  // /metrics before the gRPC listeners: a fatal bind error exits before serving.
  if (absl::Status s = StartMetrics(); !s.ok()) return s;
  if (absl::Status s = StartServer(); !s.ok()) return s;
  StartBackground();
  state_ = State::kRunning;
  return absl::OkStatus();
}

absl::Status Daemon::BuildTls() {
  if (!config_.any_tls) return absl::OkStatus();
  // From the files as ValidateConfig read them: they are not read again.
  if (!config_.tls_material.has_value()) {
    return absl::FailedPreconditionError("tls: listeners without checked TLS files (use ValidateConfig)");
  }
  absl::StatusOr<std::unique_ptr<service::ReloadableTlsCredentials>> created =
      service::ReloadableTlsCredentials::Create(config_.config.tls, *std::move(config_.tls_material));
  config_.tls_material.reset();  // the credentials keep the key; no second copy
  if (!created.ok()) return absl::InvalidArgumentError(created.status().message());
  tls_ = *std::move(created);
  return absl::OkStatus();
}

// The connection caps of the gRPC listeners and /metrics' own. The caps stay below the descriptor
// limit, followed at every accept when root changes it later: a flood is refused at accept, never
// met by EMFILE.
void Daemon::BuildConnectionGates() {
  const DaemonConfig& c = config_.config;
  service::ConnectionLimits limits;
  limits.max_total = c.max_connections;
  limits.max_per_peer = c.max_connections_per_peer;
  limits.reserve = kConnectionReserve;
  limits.max_unowned = kMaxUnownedConnections;
  limits.rate_per_peer = c.max_connection_rate_per_peer;
  limits.descriptor_headroom = kDescriptorHeadroom;
  const int max_total = service::ConnectionGate(limits).EffectiveMaxTotal();
  LogMaxConnections(max_total);
  limits.max_per_peer = std::min(limits.max_per_peer, max_total);
  spdlog::info("event=connection_limits max_connections={} max_connections_per_peer={} reserve={} "
               "max_unowned={} max_connection_rate_per_peer={} handshake_timeout_ms={}",
               max_total, limits.max_per_peer, limits.reserve, limits.max_unowned, limits.rate_per_peer,
               absl::ToInt64Milliseconds(c.handshake_timeout));
  gate_ = std::make_unique<service::ConnectionGate>(limits);
  // /metrics has caps of its own, inside the descriptors kept for the daemon itself.
  service::ConnectionLimits metrics_limits;
  metrics_limits.max_total = metrics::kMetricsMaxConnections;
  metrics_limits.max_per_peer = metrics::kMetricsMaxConnectionsPerPeer;
  metrics_limits.reserve = metrics::kMetricsConnectionReserve;
  metrics_limits.max_unowned = kMaxUnownedConnections;
  metrics_limits.rate_per_peer = c.max_connection_rate_per_peer;
  metrics_gate_ = std::make_unique<service::ConnectionGate>(metrics_limits);
}

void Daemon::BuildObserver() { observer_ = std::make_unique<DaemonObserver>(config_.lease_state_file); }

// The libtorch view and the inventory store: the probe child with every vendor library's flag, its
// usage refresh, and the observer told of every run.
void Daemon::BuildStore() {
  const DaemonConfig& c = config_.config;
  const std::string& torch_probe = config_.torch_probe_command;
  torch_ = std::make_unique<inventory::TorchView>(
      torch_probe.empty() ? std::vector<std::string>{} : std::vector<std::string>{torch_probe}, c.probe_timeout,
      config_.torch_probe_off);
  inventory::StoreOptions options;
  // The child's own vendor deadline fires well before ours, so a hung library costs one prober,
  // not the whole inventory.
  const absl::Duration vendor_timeout = c.probe_timeout * 0.6;
  options.probe_command = {config_.probe_command, absl::StrCat("--host_root=", c.host_root)};
  for (size_t i = 0; i < kVendorLibraryCount; ++i) {  // every library, even at its default
    options.probe_command.push_back(absl::StrCat("--", kVendorLibraries[i].flag, "=", c.vendor_libraries[i]));
  }
  options.probe_command.push_back(absl::StrCat("--probe_timeout=", absl::FormatDuration(vendor_timeout)));
  options.probe_timeout = c.probe_timeout;
  BuildXidWatcher(config_.probe_command);
  options.augment = [torch = torch_.get(), observer = observer_.get(), xid = xid_.get()](v1::Inventory& fresh) {
    observer->OnProbeReports(fresh);
    *fresh.mutable_torch() = torch->Last();
    if (xid != nullptr) AddXidWatch(*xid, fresh);  // critical XIDs since start (docs/PROBE.md)
    return absl::OkStatus();
  };
  // A counter that turns unknown keeps its last FAULT or LOST reading, and corrected errors that rose
  // since the last probe make the device DEGRADED (docs/PROBE.md).
  options.carry = placement::CarryHealth;
  LoadHealthFile(options);  // ... also across a restart
  // The usage refresh: the same probe child reading only what moves (devplace-probe --usage_only).
  options.usage_command = options.probe_command;
  options.usage_command.push_back("--usage_only");
  options.usage_interval = c.usage_interval > absl::ZeroDuration() ? c.usage_interval : absl::InfiniteDuration();
  observer_->ObserveStore(options);
  store_ = std::make_unique<inventory::InventoryStore>(options);
}

// A full refresh (RefreshInventory, SIGHUP, start-up) re-runs the libtorch probe, then the host
// probe, which publishes the new view. The service runs it on its one refresh worker.
absl::StatusOr<inventory::Snapshot> Daemon::FullRefresh() {
  if (stopping_.load()) return absl::UnavailableError("devplaced is shutting down");
  spdlog::info("event=refresh kind=full");
  if (!config_.torch_probe_command.empty()) {
    const absl::Time start = absl::Now();
    const v1::TorchInfo view = torch_->Run();
    spdlog::info("event=torch_probe result={} duration_ms={} version={} backends={} error=\"{}\"",
                 view.probed() ? "ok" : "error", absl::ToInt64Milliseconds(absl::Now() - start), view.version(),
                 absl::StrJoin(view.compiled_backends(), ","), absl::CHexEscape(view.error()));
  }
  if (stopping_.load()) return absl::UnavailableError("devplaced is shutting down");
  return store_->Refresh();
}

// The DevicePlacement service: who may re-probe, its caps, and the observer of its answers.
void Daemon::BuildService() {
  const DaemonConfig& c = config_.config;
  service::RefreshAccess access;
  access.peers = &peers_;
  access.daemon_uid = geteuid();
  access.socket_gid = config_.socket_gid != static_cast<gid_t>(-1) ? config_.socket_gid : getegid();
  if (const struct group* g = getgrgid(access.socket_gid); g != nullptr) access.socket_group = g->gr_name;
  access.min_interval = c.refresh_min_interval;
  service::ServiceOptions options;
  options.max_watches = c.max_watches;
  options.max_watches_per_peer = c.max_watches_per_peer;
  options.connections = gate_.get();
  options.observer = observer_.get();
  options.max_leased_devices_per_user = c.max_leased_devices_per_user;
  options.max_waiting_picks_per_user = c.max_waiting_picks_per_user;
  options.max_waiting_pick_bytes_per_user = c.max_waiting_pick_bytes_per_user;
  options.waiter_restart_grace = c.waiter_restart_grace;
  // One peer's costly calls may use every core; one worker more is always left for other peers.
  const int cores = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
  options.costly_calls.workers = cores + 1;
  options.costly_calls.max_running_per_peer = cores;
  options.costly_calls.max_queued_per_peer = c.max_queued_calls_per_peer;
  service_ = std::make_unique<service::DevicePlacementService>(
      *store_, [this] { return FullRefresh(); }, access, options);
}

// --nfd_features_file: a writer thread keeps the NFD feature file current in the directory opened
// (and checked) here, once; write errors never stop serving, an unsafe directory stops the start.
absl::Status Daemon::BuildNfdWriter() {
  const std::string& nfd_file = config_.config.nfd_features_file;
  if (nfd_file.empty()) return absl::OkStatus();
  nfd_ = std::make_unique<labels::NfdPublisher>(
      nfd_file, config_.config.nfd_expiry,
      [nfd_file](const absl::Status& error) {
        spdlog::warn("event=nfd_write_failed path={} error=\"{}\" (retried with back-off; logged again when the "
                     "error changes)",
                     nfd_file, std::string(error.message()));
      },
      [nfd_file](uint64_t revision) { spdlog::info("event=nfd_written path={} revision={}", nfd_file, revision); });
  if (!nfd_->directory_status().ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nfd_features_file=", nfd_file, ": ", nfd_->directory_status().message()));
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartMetrics() {
  const std::string& address = config_.config.metrics_listen;
  if (address.empty()) return absl::OkStatus();
  // Each connection is counted as the gRPC listeners count theirs (a local client's user, else its
  // address), against /metrics' own caps.
  metrics::MetricsConnectionHooks hooks;
  hooks.admit = [gate = metrics_gate_.get(), owner = geteuid()](int fd, const sockaddr_storage& peer) {
    return gate->Admit(fd, service::IdentifyTcpPeer(fd, peer, owner)) == service::Admission::kAdmitted;
  };
  hooks.release = [gate = metrics_gate_.get()](int fd, bool timed_out) { gate->Release(fd, timed_out); };
  absl::StatusOr<metrics::MetricsEndpoint> started = metrics::StartMetricsEndpoint(
      address,
      {observer_->registry(), std::make_shared<metrics::InventoryCollector>([store = store_.get()] { return store->Current(); }),
       std::make_shared<metrics::ProcessCollector>(),
       std::make_shared<service::ConnectionCollector>(std::vector<std::pair<std::string, const service::ConnectionGate*>>{
           {"grpc", gate_.get()}, {"metrics", metrics_gate_.get()}})},
      std::move(hooks));
  if (started.ok()) {
    metrics_endpoint_ = std::move(*started);
    spdlog::info("event=metrics_listening url=http://{}/metrics", metrics_endpoint_.address);
  } else if (address != kDefaultMetricsListen) {
    LogListenFailed("metrics_listen", "metrics_listen", address, started.status());
    return absl::UnavailableError(started.status().message());
  } else {
    // The default address cannot be bound, most often because another devplaced (or a test's)
    // holds it: run without metrics, and say plainly that what answers there is not this daemon.
    const std::string error(started.status().message());
    const std::string port = address.substr(address.rfind(':') + 1);
    const std::string held =
        absl::StrContains(error, std::strerror(EADDRINUSE))
            ? absl::StrCat("another process holds port ", port, " (ss -ltnp 'sport = :", port, "' names it), so http://",
                           address, "/metrics is not this daemon's; ")
            : "";
    spdlog::warn("event=metrics_disabled metrics_listen={} error=\"{}\" hint=\"this daemon serves no metrics: {}start it "
                 "with --metrics_listen=127.0.0.1:0 (a free port, logged as event=metrics_listening) or another free "
                 "address, or --metrics_listen= for none\"",
                 address, error, held);
  }
  return absl::OkStatus();
}

namespace {

// The default lease file's directory of its own inside a socket directory others may write:
// made mode 0700 when missing. One that another user made first is left as it is; the lease file's
// checks (service::CheckLeaseDirectory) then refuse it, and every pick says why.
void MakeLeaseDirectory(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) == 0) {
    // 0700 whatever the umask, on the directory just made: by descriptor, never following a link
    // another user of the parent directory may have put in its place meanwhile.
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      fchmod(fd, 0700);
      close(fd);
    }
    spdlog::info("event=lease_state_directory dir={} created=true", dir);
  } else if (errno != EEXIST) {
    spdlog::warn("event=lease_state_directory dir={} error=\"cannot create it: {}\"", dir, std::strerror(errno));
  }
}

}  // namespace

// The leases the previous daemon held (--lease_state_file), each checked again; a file that cannot
// be used is a warning and an empty table.
absl::Status Daemon::RestoreLeases() {
  const std::string& file = config_.lease_state_file;
  if (file.empty()) {
    spdlog::info("event=lease_state file=none (leases are kept in memory only: a restart forgets them)");
    return absl::OkStatus();
  }
  if (config_.create_lease_state_directory) MakeLeaseDirectory(DirectoryOf(file));
  if (absl::Status s = LockStateFiles(); !s.ok()) return s;  // the directory may have been made just now
  const service::RestoreReport report = service_->leases().Restore(file);
  for (const std::string& name : report.temporary_removed) {
    spdlog::info("event=lease_state_temporary_removed file={} name={} (left by a daemon killed while writing)", file,
                 name);
  }
  if (!report.warning.empty()) {
    spdlog::warn("event=lease_state_ignored file={} error=\"{}\"", file, report.warning);
  }
  for (const std::string& line : report.dropped) {
    spdlog::info("event=lease_dropped file={} reason=\"{}\"", file, line);
  }
  for (const v1::LeaseInfo& lease : service_->leases().List()) {
    spdlog::info("{}", FormatLeaseEvent({"restored", lease, "", "", ""}));
  }
  const size_t waiters = service_->RestoreWaiters(report.waiters);
  for (const service::state::Waiter& w : report.waiters) {
    if (absl::FromUnixMillis(w.deadline_unix_ms()) <= absl::Now()) continue;  // its wait ended meanwhile
    spdlog::info("event=waiter_restored waiter={} uid={} place={} deadline={}", w.waiter_id().substr(0, 8), w.uid(),
                 w.place(), absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(w.deadline_unix_ms()),
                                             absl::UTCTimeZone()));
  }
  spdlog::info("event=lease_state file={} found={} kept={} dropped={} waiters={}", file, report.found, report.kept,
               report.dropped.size(), waiters);
  return absl::OkStatus();
}

// The gRPC server with its TCP/TLS ports and the unix-socket listeners that feed it.
absl::Status Daemon::StartServer() {
  if (tls_ != nullptr) {
    const service::TlsMaterial m = tls_->current();
    spdlog::info("event=tls mode={} subject=\"{}\" not_after=\"{}\" client_cas={}",
                 tls_->mutual() ? "mutual" : "server_only", m.subject, m.not_after, m.client_ca_count);
  }
  for (const std::string& address : config_.insecure_remote) {
    spdlog::warn("event=insecure_remote_listener address={} error=\"plaintext and unauthenticated on a non-loopback "
                 "address (--allow_insecure_remote)\"",
                 address);
  }
  grpc::EnableDefaultHealthCheckService(true);
  (void)grpc::health::v1::HealthCheckRequest::descriptor();  // lets reflection describe grpc.health.v1
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  ConfigureServer(builder);
  std::vector<int> ports;  // each --listen address's port (0 for a unix socket)
  if (absl::Status s = BuildListeners(builder, ports); !s.ok()) return s;
  // Before any pick can arrive: the table a restart must not forget.
  if (absl::Status s = RestoreLeases(); !s.ok()) return s;
  builder.RegisterService(service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(observer_->rpc_metrics().NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    // Every socket was bound above with its errno; gRPC's own log line just before, routed
    // through our logger, says what failed.
    spdlog::error("event=listen_failed addresses={} error=\"the gRPC server did not start: see the library_log "
                  "line above\"",
                  absl::StrJoin(config_.listen, ","));
    return absl::UnavailableError("the gRPC server did not start");
  }
  // gRPC's default health service starts out SERVING; say NOT_SERVING until the first inventory.
  // (A client racing the first microseconds after bind may still see SERVING once.)
  health_ = server_->GetHealthCheckService();
  // The placement service answers under its own name too (same status as "").
  health_->SetServingStatus(v1::DevicePlacement::service_full_name(), false);
  health_->SetServingStatus(false);
  StartListeners(ports);
  return absl::OkStatus();
}

// The server's limits: message size, the memory quota, keepalive, streams per connection and the
// handshake timeout.
void Daemon::ConfigureServer(grpc::ServerBuilder& builder) {
  const DaemonConfig& c = config_.config;
  builder.SetMaxReceiveMessageSize(c.max_receive_bytes);
  // Bounds what gRPC buffers for all connections together (requests being received included).
  grpc::ResourceQuota quota("devplaced");
  quota.Resize(static_cast<size_t>(c.memory_quota_bytes));
  builder.SetResourceQuota(quota);
  // Keepalive pings on every connection, idle or not and with or without data in between, so a
  // frozen (SIGSTOPped) or vanished client is dropped on unix sockets as on TCP.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(c.keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(c.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a second daemon must fail, not share the port
  // Requests handled at once per connection: a flood of streams on one connection queues.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 100);
  // A connection that has not finished its TLS handshake (or sent the HTTP/2 preface) in time is
  // closed: gRPC's default, 120 s, let stalled handshakes pile up.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(c.handshake_timeout)));
}

// Binds every --listen address, in order: unix sockets accepted by devplaced itself (peer
// credentials for RefreshInventory; only the default runtime directory is created), TCP and TLS
// accepted by devplaced (the connection caps), then handed to gRPC with the listener's
// credentials, whose TLS handshake gRPC runs. `ports` gets each address's port (0 for unix).
absl::Status Daemon::BuildListeners(grpc::ServerBuilder& builder, std::vector<int>& ports) {
  const std::string default_unix = DefaultListen().front().substr(5);
  for (const std::string& address : config_.listen) {
    ports.push_back(0);
    if (absl::StartsWith(address, "unix:")) {
      service::UnixListener::Options o;
      o.path = address.substr(5);
      o.mode = config_.socket_mode;
      o.gid = config_.socket_gid;
      o.create_directory = o.path == default_unix;
      absl::StatusOr<std::unique_ptr<service::UnixListener>> l = service::UnixListener::Bind(o);
      if (!l.ok()) {
        LogListenFailed("address", "listen", address, l.status());
        return l.status().code() == absl::StatusCode::kFailedPrecondition
                   ? l.status()
                   : absl::UnavailableError(l.status().message());
      }
      unix_listeners_.push_back(std::move(*l));
      continue;
    }
    const bool tls = absl::StartsWith(address, "tls:");
    absl::StatusOr<std::unique_ptr<service::TcpListener>> l =
        service::TcpListener::Bind(tls ? address.substr(4) : address, tls);
    if (!l.ok()) {
      LogListenFailed("address", "listen", address, l.status());
      return absl::UnavailableError(l.status().message());
    }
    ports.back() = (*l)->port();
    acceptors_.push_back(builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        tls ? tls_->credentials() : grpc::InsecureServerCredentials()));
    tcp_listeners_.push_back(std::move(*l));
  }
  return absl::OkStatus();
}

// Every listener starts accepting into the started server; each address is logged (with the port
// picked for :0) once the sockets have their mode.
void Daemon::StartListeners(const std::vector<int>& ports) {
  const service::AcceptErrorHook on_accept_error = [](const std::string& listener, int error) {
    spdlog::warn("event=accept_failed address={} error=\"{}\" (retried every 100 ms; logged at most once a second)",
                 listener, strerror(error));
  };
  for (const auto& l : unix_listeners_) {
    l->Start(server_.get(), &peers_, gate_.get(), config_.config.handshake_timeout, on_accept_error);
  }
  for (size_t i = 0; i < tcp_listeners_.size(); ++i) {
    tcp_listeners_[i]->Start(acceptors_[i].get(), gate_.get(), &self_connections_, geteuid(), on_accept_error);
  }
  const std::vector<std::string>& listen = config_.listen;
  for (size_t i = 0; i < listen.size(); ++i) {
    std::string bound = listen[i];
    if (!absl::StartsWith(bound, "unix:")) {
      bound = absl::StrCat(bound.substr(0, bound.rfind(':')), ":", ports[i]);
    }
    spdlog::info("event=listening address={}", bound);
    listening_.push_back(bound);
  }
}

// Liveness self-checks, the inventory subscription (health, NFD writer) and the first probes.
void Daemon::StartBackground() {
  BuildLiveness();
  // Health turns SERVING with the first inventory (never again once stopping); each new revision
  // is logged.
  subscription_ = store_->Subscribe([this, nfd = nfd_.get()](const inventory::Snapshot& inv) {
    spdlog::info("event=inventory revision={} backends={}", inv->revision(), inv->backends_size());
    if (!stopping_.load()) health_->SetServingStatus(true);
    if (nfd != nullptr) nfd->Publish(inv);
    SaveHealthReadings(*inv);
  });
  // The timer probes at once, then every --refresh_interval; serving never waits on a probe.
  const absl::Duration refresh_interval = config_.config.refresh_interval;
  store_->Start(refresh_interval > absl::ZeroDuration() ? refresh_interval : absl::InfiniteDuration());
  service_->RequestRefresh();  // the libtorch view, once serving
  if (xid_ != nullptr) xid_->Start();
}

// A self-connect check of every bound listener; a listener found dead ends the daemon (exit 1).
void Daemon::BuildLiveness() {
  const DaemonConfig& c = config_.config;
  service::LivenessOptions liveness_options;
  size_t next_unix = 0, next_tcp = 0;
  for (const std::string& bound : listening_) {
    liveness_options.targets.push_back(service::LoopbackTarget(bound));
    if (absl::StartsWith(bound, "unix:")) {
      liveness_options.progress.push_back([l = unix_listeners_[next_unix++].get()] { return l->accepted(); });
    } else {
      liveness_options.progress.push_back([l = tcp_listeners_[next_tcp++].get()] { return l->accepted(); });
    }
  }
  liveness_options.answered = [rpc = &observer_->rpc_metrics()] { return rpc->answered(); };
  liveness_options.self = &self_connections_;
  liveness_options.interval = c.liveness_interval;
  liveness_options.timeout = std::min(absl::Seconds(2), std::max(c.liveness_interval, absl::Milliseconds(500)));
  liveness_options.max_failures = c.liveness_failures;
  liveness_options.on_failure = [](const std::string& target, const std::string& error) {
    spdlog::warn("event=liveness_check_failed address={} error=\"{}\"", target, error);
  };
  liveness_options.on_dead = [this](const std::string& target, const std::string& error) {
    spdlog::error("event=listener_dead address={} error=\"{}\" action=exit status=1", target, error);
    listener_dead_ = true;
    health_->SetServingStatus(false);
    kill(getpid(), SIGTERM);  // Wait()'s sigtimedwait runs the normal shutdown, then returns 1
  };
  liveness_ = std::make_unique<service::ListenerLiveness>(liveness_options);
  if (c.liveness_interval > absl::ZeroDuration()) liveness_->Start();
}

}  // namespace devplace::daemon
