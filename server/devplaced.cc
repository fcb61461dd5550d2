// devplaced: the per-host device placement daemon. Probes the host through the devplace-probe
// child process, keeps the inventory snapshot, and serves the DevicePlacement gRPC service with
// server reflection and the grpc.health.v1 health service. See README.md and DESIGN.md.
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/daemon/config.h"
#include "server/daemon/flags.h"
#include "server/export/nfd_writer.h"
#include "server/inventory/store.h"
#include "server/inventory/torch_view.h"
#include "server/logging/logging.h"
#include "server/metrics/exposer.h"
#include "server/metrics/inventory_metrics.h"
#include "server/service/grpc_log.h"
#include "server/service/rpc_metrics.h"
#include "grpcpp/resource_quota.h"
#include "server/service/liveness.h"
#include "server/service/service.h"
#include "server/service/tls.h"
#include "server/service/unix_listener.h"
#include "spdlog/spdlog.h"

namespace devplace {
namespace {

int Usage(const std::string& message) {
  fprintf(stderr, "devplaced: %s (see --help)\n", message.c_str());
  return 2;
}

int Run(int argc, char** argv) {
#ifdef NDEBUG
  // Debian builds libabsl without NDEBUG, so every absl::Mutex (gRPC's included) runs lock-order
  // deadlock detection and aborts on a cycle it suspects. Release builds of the daemon pay
  // neither (issue 12: ~3% of the daemon's CPU per call); Debug builds, the tests', keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  daemon::SetUpFlagUsage();
  if (std::optional<std::string> error = daemon::CheckFlags(std::vector<std::string>(argv + 1, argv + argc))) {
    return Usage(*error);
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected argument '", rest[1], "'"));
  // ---- flags, all checked before anything starts ----
  const absl::StatusOr<daemon::ValidConfig> config = daemon::ConfigFromFlags();
  if (!config.ok()) return Usage(std::string(config.status().message()));
  // Library lines (gRPC core, libprotobuf) per second per library; the rest are counted and
  // reported in one event=library_log_suppressed line (a flood of bad requests logs a line each).
  constexpr int kLibraryLogsPerSecond = 10;
  logging::Configure(config->log_level, config->log_format);
  logging::RouteProtobufLogs(kLibraryLogsPerSecond);
  service::RouteGrpcLogs(config->log_level, kLibraryLogsPerSecond);
  const daemon::DaemonConfig& c = config->config;
  std::unique_ptr<service::ReloadableTlsCredentials> tls;
  if (config->any_tls) {
    absl::StatusOr<std::unique_ptr<service::ReloadableTlsCredentials>> created =
        service::ReloadableTlsCredentials::Create(c.tls);
    if (!created.ok()) return Usage(std::string(created.status().message()));
    tls = *std::move(created);
  }
  const std::vector<std::string>& listen = config->listen;
  const std::vector<std::string>& insecure_remote = config->insecure_remote;
  const mode_t socket_mode = config->socket_mode;
  const gid_t socket_gid = config->socket_gid;
  const std::string& probe = config->probe_command;
  const std::string& torch_probe = config->torch_probe_command;
  const std::string& host_root = c.host_root;
  const std::string& metrics_listen = c.metrics_listen;
  const std::string& nfd_file = c.nfd_features_file;
  const absl::Duration probe_timeout = c.probe_timeout, interval = c.refresh_interval, grace = c.shutdown_grace,
                       refresh_min_interval = c.refresh_min_interval, keepalive_time = c.keepalive_time,
                       keepalive_timeout = c.keepalive_timeout, liveness_interval = c.liveness_interval,
                       nfd_expiry = c.nfd_expiry;
  const int max_receive_bytes = c.max_receive_bytes, max_watches = c.max_watches,
            max_watches_per_peer = c.max_watches_per_peer, liveness_failures = c.liveness_failures;
  const int64_t memory_quota = c.memory_quota_bytes;

  // Signals are handled by sigwait in this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Descriptors: the soft limit goes up to the hard one, so a connection flood needs the hard limit.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
      spdlog::warn("event=rlimit_nofile_failed error=\"{}\"", strerror(errno));
    }
  }
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) spdlog::info("event=rlimit_nofile soft={} hard={}", files.rlim_cur, files.rlim_max);

  spdlog::info("event=start pid={} host_root={} probe_command={} torch_probe_command={} probe_timeout_ms={} "
               "refresh_interval_s={}",
               getpid(), host_root, probe, torch_probe.empty() ? "none" : torch_probe,
               absl::ToInt64Milliseconds(probe_timeout), absl::ToInt64Seconds(interval));

  // A probe grandchild that escapes the group kill with setsid() is re-parented here and killed
  // after the run (devplaced's only children are probe children).
  if (const absl::Status s = inventory::EnableOrphanCleanup(); !s.ok()) {
    spdlog::warn("event=orphan_cleanup_disabled error=\"{}\"", std::string(s.message()));
  }

  // ---- the store, the libtorch view, the service ----
  inventory::TorchView torch(torch_probe.empty() ? std::vector<std::string>{} : std::vector<std::string>{torch_probe},
                             probe_timeout);
  inventory::StoreOptions options;
  // The child's own vendor deadline fires well before ours, so a hung library costs one prober,
  // not the whole inventory.
  const absl::Duration vendor_timeout = probe_timeout * 0.6;
  options.probe_command = {probe, absl::StrCat("--host_root=", host_root),
                           absl::StrCat("--nvml_library=", c.nvml_library),
                           absl::StrCat("--cuda_library=", c.cuda_library),
                           absl::StrCat("--amd_smi_library=", c.amd_smi_library),
                           absl::StrCat("--level_zero_library=", c.level_zero_library),
                           absl::StrCat("--hlml_library=", c.hlml_library),
                           absl::StrCat("--dcmi_library=", c.dcmi_library),
                           absl::StrCat("--cndev_library=", c.cndev_library),
                           absl::StrCat("--mtml_library=", c.mtml_library),
                           absl::StrCat("--probe_timeout=", absl::FormatDuration(vendor_timeout))};
  options.probe_timeout = probe_timeout;
  auto registry = std::make_shared<prometheus::Registry>();  // counters and histograms for /metrics
  metrics::ProbeMetrics probe_metrics(*registry);
  service::RpcMetrics rpc_metrics(*registry);
  options.on_probe = [&probe_metrics](const inventory::ProbeOutcome& o) {
    probe_metrics.ObserveRun(o.status.ok(), o.duration);
    if (o.status.ok()) {
      spdlog::info("event=probe result=ok duration_ms={} revision={} changed={}",
                   absl::ToInt64Milliseconds(o.duration), o.revision, o.changed);
    } else {
      spdlog::warn("event=probe result=error duration_ms={} code={} error=\"{}\" serving_revision={}",
                   absl::ToInt64Milliseconds(o.duration), absl::StatusCodeToString(o.status.code()),
                   absl::CHexEscape(o.status.message()), o.revision);  // the child's stderr is quoted in it
    }
  };
  options.augment = [&torch, &probe_metrics](v1::Inventory& fresh) {
    probe_metrics.ObserveReports(fresh);
    *fresh.mutable_torch() = torch.Last();
    return absl::OkStatus();
  };
  inventory::InventoryStore store(options);
  std::atomic<bool> stopping{false};  // set on SIGTERM/SIGINT
  // A full refresh (RefreshInventory, SIGHUP, start-up) re-runs the libtorch probe, then the host
  // probe, which publishes the new view. The service runs them on its one refresh worker.
  auto full_refresh = [&torch, &store, &stopping, torch_enabled = !torch_probe.empty()]()
      -> absl::StatusOr<inventory::Snapshot> {
    if (stopping.load()) return absl::UnavailableError("devplaced is shutting down");
    spdlog::info("event=refresh kind=full");
    if (torch_enabled) {
      const absl::Time start = absl::Now();
      const v1::TorchInfo view = torch.Run();
      spdlog::info("event=torch_probe result={} duration_ms={} version={} backends={} error=\"{}\"",
                   view.probed() ? "ok" : "error", absl::ToInt64Milliseconds(absl::Now() - start), view.version(),
                   absl::StrJoin(view.compiled_backends(), ","), absl::CHexEscape(view.error()));
    }
    if (stopping.load()) return absl::UnavailableError("devplaced is shutting down");
    return store.Refresh();
  };
  service::PeerRegistry peers;
  service::RefreshAccess access;
  access.peers = &peers;
  access.daemon_uid = geteuid();
  access.socket_gid = socket_gid != static_cast<gid_t>(-1) ? socket_gid : getegid();
  if (const struct group* g = getgrgid(access.socket_gid); g != nullptr) access.socket_group = g->gr_name;
  access.min_interval = refresh_min_interval;
  service::ServiceOptions service_options;
  service_options.max_watches = max_watches;
  service_options.max_watches_per_peer = max_watches_per_peer;
  service::DevicePlacementService service(store, full_refresh, access, service_options);

  // ---- /metrics (before the gRPC listeners: a fatal bind error exits before serving) ----
  metrics::MetricsEndpoint metrics_endpoint;
  if (!metrics_listen.empty()) {
    absl::StatusOr<metrics::MetricsEndpoint> started = metrics::StartMetricsEndpoint(
        metrics_listen, {registry, std::make_shared<metrics::InventoryCollector>([&store] { return store.Current(); }),
                         std::make_shared<metrics::ProcessCollector>()});
    if (started.ok()) {
      metrics_endpoint = std::move(*started);
      spdlog::info("event=metrics_listening url=http://{}/metrics", metrics_endpoint.address);
    } else if (metrics_listen != daemon::kDefaultMetricsListen) {
      spdlog::error("event=listen_failed metrics_listen={} error=\"{}\"", metrics_listen,
                    std::string(started.status().message()));
      return 1;
    } else {
      spdlog::warn("event=metrics_disabled metrics_listen={} error=\"{}\" hint=\"set --metrics_listen to another "
                   "address, or empty\"",
                   metrics_listen, std::string(started.status().message()));
    }
  }

  // ---- listeners ----
  if (tls != nullptr) {
    const service::TlsMaterial m = tls->current();
    spdlog::info("event=tls mode={} subject=\"{}\" not_after=\"{}\" client_cas={}",
                 tls->mutual() ? "mutual" : "server_only", m.subject, m.not_after, m.client_ca_count);
  }
  for (const std::string& address : insecure_remote) {
    spdlog::warn("event=insecure_remote_listener address={} error=\"plaintext and unauthenticated on a non-loopback "
                 "address (--allow_insecure_remote)\"",
                 address);
  }
  grpc::EnableDefaultHealthCheckService(true);
  (void)grpc::health::v1::HealthCheckRequest::descriptor();  // lets reflection describe grpc.health.v1
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  // Bounds what gRPC buffers for all connections together (requests being received included).
  grpc::ResourceQuota quota("devplaced");
  quota.Resize(static_cast<size_t>(memory_quota));
  builder.SetResourceQuota(quota);
  // Keepalive pings on every connection, idle or not and with or without data in between, so a
  // frozen (SIGSTOPped) or vanished client is dropped on unix sockets as on TCP.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a second daemon must fail, not share the port
  // Requests handled at once per connection: a flood of streams on one connection queues.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 100);
  std::vector<std::unique_ptr<int>> ports;
  // Unix sockets are accepted by devplaced itself (peer credentials for RefreshInventory); only
  // the default runtime directory is created.
  std::vector<std::unique_ptr<service::UnixListener>> unix_listeners;
  const std::string default_unix = daemon::DefaultListen().front().substr(5);
  std::vector<std::string> bound_targets;  // for the liveness check
  for (const std::string& address : listen) {
    ports.push_back(std::make_unique<int>(0));
    if (absl::StartsWith(address, "unix:")) {
      service::UnixListener::Options o;
      o.path = address.substr(5);
      o.mode = socket_mode;
      o.gid = socket_gid;
      o.create_directory = o.path == default_unix;
      absl::StatusOr<std::unique_ptr<service::UnixListener>> l = service::UnixListener::Bind(o);
      if (!l.ok()) {
        spdlog::error("event=listen_failed address={} error=\"{}\"", address, std::string(l.status().message()));
        fprintf(stderr, "devplaced: --listen=%s: %s\n", address.c_str(), std::string(l.status().message()).c_str());
        return l.status().code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
      }
      unix_listeners.push_back(std::move(*l));
      continue;
    }
    if (absl::StartsWith(address, "tls:")) {
      builder.AddListeningPort(address.substr(4), tls->credentials(), ports.back().get());
    } else {
      builder.AddListeningPort(address, grpc::InsecureServerCredentials(), ports.back().get());
    }
  }
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(rpc_metrics.NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    // Unix sockets were bound above with their errno; this is a TCP port gRPC could not bind
    // (gRPC's own log line just before, routed through our logger, names the errno).
    spdlog::error("event=listen_failed addresses={} error=\"could not bind a TCP listener (address in use, or a "
                  "privileged port): see the library_log line above for the system error\"",
                  absl::StrJoin(listen, ","));
    return 1;
  }
  // gRPC's default health service starts out SERVING; say NOT_SERVING until the first inventory.
  // (A client racing the first microseconds after bind may still see SERVING once.)
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  // The placement service answers under its own name too (same status as "").
  health->SetServingStatus(v1::DevicePlacement::service_full_name(), false);
  health->SetServingStatus(false);
  for (const auto& l : unix_listeners) l->Start(server.get(), &peers);
  for (size_t i = 0; i < listen.size(); ++i) {  // logged once the sockets have their mode
    std::string bound = listen[i];
    if (!absl::StartsWith(bound, "unix:")) {
      bound = absl::StrCat(bound.substr(0, bound.rfind(':')), ":", *ports[i]);
    }
    spdlog::info("event=listening address={}", bound);
    bound_targets.push_back(service::LoopbackTarget(bound));
  }
  std::atomic<bool> listener_dead{false};
  service::LivenessOptions liveness_options;
  liveness_options.targets = bound_targets;
  liveness_options.interval = liveness_interval;
  liveness_options.timeout = std::min(absl::Seconds(2), std::max(liveness_interval, absl::Milliseconds(500)));
  liveness_options.max_failures = liveness_failures;
  liveness_options.on_failure = [](const std::string& target, const std::string& error) {
    spdlog::warn("event=liveness_check_failed address={} error=\"{}\"", target, error);
  };
  liveness_options.on_dead = [health, &listener_dead](const std::string& target, const std::string& error) {
    spdlog::error("event=listener_dead address={} error=\"{}\" action=exit status=1", target, error);
    listener_dead = true;
    health->SetServingStatus(false);
    kill(getpid(), SIGTERM);  // the main thread's sigwait runs the normal shutdown, then exits 1
  };
  service::ListenerLiveness liveness(liveness_options);
  if (liveness_interval > absl::ZeroDuration()) liveness.Start();

  // --nfd_features_file: a writer thread keeps the NFD feature file current; errors never stop serving.
  std::unique_ptr<labels::NfdPublisher> nfd;
  if (!nfd_file.empty()) {
    nfd = std::make_unique<labels::NfdPublisher>(
        nfd_file, nfd_expiry,
        [nfd_file](const absl::Status& error) {
          spdlog::warn("event=nfd_write_failed path={} error=\"{}\"", nfd_file, std::string(error.message()));
        },
        [nfd_file](uint64_t revision) { spdlog::info("event=nfd_written path={} revision={}", nfd_file, revision); });
  }
  // Health turns SERVING with the first inventory (never again once stopping); each new revision
  // is logged.
  const inventory::InventoryStore::SubscriptionId subscription =
      store.Subscribe([health, &stopping, nfd = nfd.get()](const inventory::Snapshot& inv) {
        spdlog::info("event=inventory revision={} backends={}", inv->revision(), inv->backends_size());
        if (!stopping.load()) health->SetServingStatus(true);
        if (nfd != nullptr) nfd->Publish(inv);
      });
  // The timer probes at once, then every --refresh_interval; serving never waits on a probe.
  store.Start(interval > absl::ZeroDuration() ? interval : absl::InfiniteDuration());
  service.RequestRefresh();  // the libtorch view, once serving

  // A deleted socket file is re-created on SIGHUP and by a check every 10 s; a path another
  // process now serves on is left to it (logged).
  auto check_sockets = [&unix_listeners](const char* trigger) {
    for (const auto& l : unix_listeners) {
      if (l->PathIsOurs()) continue;
      const absl::Status s = l->Recreate();
      if (s.ok()) {
        spdlog::warn("event=socket_recreated path={} trigger={}", l->path(), trigger);
      } else {
        spdlog::error("event=socket_lost path={} trigger={} error=\"{}\"", l->path(), trigger,
                      std::string(s.message()));
      }
    }
  };
  for (;;) {
    const timespec check_every{10, 0};
    const int sig = sigtimedwait(&signals, nullptr, &check_every);
    if (sig < 0) {
      if (errno == EAGAIN) check_sockets("check");
      continue;
    }
    if (sig == SIGHUP) {
      spdlog::info("event=refresh_requested trigger=SIGHUP");
      if (tls != nullptr) {  // new connections get the new certificates; a broken renewal keeps the old ones
        absl::StatusOr<service::TlsMaterial> m = tls->Reload();
        if (m.ok()) {
          spdlog::info("event=tls_reload result=ok subject=\"{}\" not_after=\"{}\" client_cas={}", m->subject,
                       m->not_after, m->client_ca_count);
        } else {
          spdlog::error("event=tls_reload result=error error=\"{}\" (the previous certificates stay in use)",
                        std::string(m.status().message()));
        }
      }
      check_sockets("SIGHUP");
      service.RequestRefresh();
      continue;
    }
    spdlog::info("event=shutdown signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  // Stop accepting at once; calls in flight get --shutdown_grace (a RefreshInventory waiting on a
  // probe finishes when that probe does, bounded by --probe_timeout); watches end with OK.
  stopping = true;
  liveness.Stop();
  torch.Cancel();  // a libtorch probe in flight is killed, not waited for
  health->SetServingStatus(false);
  for (const auto& l : unix_listeners) l->Stop();  // no new unix connections; the file is removed
  service.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  server->Wait();
  store.Stop();
  store.Unsubscribe(subscription);
  if (nfd != nullptr) nfd->Stop();  // the file stays; NFD drops its labels at the expiry time
  spdlog::info("event=stopped");
  spdlog::shutdown();
  fflush(stdout);
  fflush(stderr);
  // Every call is finished and every watch ended; what is left is gRPC's global shutdown, which
  // can wait up to ~10 s on a poller (issue 8), and the refresh worker's probe in flight. Neither
  // holds state worth keeping: leave now.
  std::_Exit(listener_dead ? 1 : 0);
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) { return devplace::Run(argc, argv); }
