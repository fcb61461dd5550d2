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
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/inventory/store.h"
#include "server/inventory/torch_view.h"
#include "server/service/liveness.h"
#include "server/service/service.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "",
          "Comma-separated listen addresses: unix:/path/to.sock and/or host:port (port 0 picks a free port, "
          "logged at start). Default: unix:/run/devplace/devplace.sock (as root; otherwise "
          "unix:$XDG_RUNTIME_DIR/devplace.sock, or unix:/tmp/devplace-<uid>/devplace.sock without it) and "
          "127.0.0.1:7465");
ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev, passed to the probe (e.g. /host in a container)");
ABSL_FLAG(std::string, probe_command, "",
          "The probe executable, run as a child process with --host_root (default: devplace-probe next to this "
          "binary). Its stdout must be one serialized devplace.v1.Inventory");
ABSL_FLAG(std::string, torch_probe_command, "",
          "The libtorch probe (default: devplace-torch-probe next to this binary, when installed), run once after "
          "start and on each full refresh (SIGHUP, RefreshInventory); its view is Inventory.torch. \"none\" disables it");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(10),
          "Deadline for one probe child; one that overruns is killed and the last good inventory stays. The child "
          "gets 60% of it as its own deadline for vendor-library probers (a hung NVML call is reported as timed "
          "out and the rest of the inventory still arrives); this deadline is only the safety net");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library the probe child dlopens for GPU names, UUIDs, memory and MIG instances (empty: none)");
ABSL_FLAG(absl::Duration, refresh_interval, absl::Seconds(60),
          "How often to re-probe in the background (0 = only at start, on SIGHUP and on RefreshInventory)");
ABSL_FLAG(std::string, socket_mode, "0660", "Permission bits of unix-socket listeners (octal)");
ABSL_FLAG(std::string, socket_group, "",
          "Group that owns unix-socket listeners (name or gid), so jobs in that group can connect; default: the "
          "daemon's own group");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(2),
          "On SIGTERM/SIGINT: how long in-flight calls may take to finish before they are cancelled");
ABSL_FLAG(int, max_receive_bytes, 1 << 20,
          "Largest request message accepted, in bytes (4096..67108864); a larger one is RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, memory_quota_bytes, int64_t{256} << 20,
          "gRPC resource quota: memory gRPC may hold for connections and requests in flight, in bytes "
          "(16777216..17179869184); past it gRPC shrinks flow-control windows and refuses new streams");

ABSL_FLAG(int, max_watches, 1024,
          "Most WatchInventory streams open at once (0 = no limit); past it a new watch gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_watches_per_peer, 0,
          "Most WatchInventory streams open at once per peer (0 = no limit), RESOURCE_EXHAUSTED past it. A peer is "
          "the client's IP address over TCP (all local TCP clients are one peer) and, over a unix socket, every "
          "client of that socket together (gRPC does not tell which user connected)");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Seconds(60),
          "How long a connection may be silent before the daemon pings it (1s..2h), on TCP and unix sockets alike");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(20),
          "How long the daemon waits for a ping's answer before it drops the connection and its calls and watches "
          "(1s..10m): a frozen or vanished client is dropped within --keepalive_time + --keepalive_timeout");
ABSL_FLAG(absl::Duration, liveness_interval, absl::Seconds(5),
          "How often the daemon calls grpc.health.v1 Check on each of its own listen addresses over a fresh "
          "connection (0 = never). A listener that fails --liveness_failures checks in a row (e.g. gRPC's accept loop "
          "gave up after descriptor exhaustion) logs event=listener_dead, and the daemon exits 1 for its supervisor "
          "(systemd Restart=on-failure, the Kubernetes DaemonSet) to restart it");
ABSL_FLAG(int, liveness_failures, 3, "Consecutive failed self-checks that make a listener dead (1..100)");

namespace devplace {
namespace {

constexpr char kUsage[] =
    "the devplace daemon. Probes this host's accelerators and answers ResolveDevice, GetInventory,\n"
    "WatchInventory, ListBackends and RefreshInventory over gRPC (package devplace.v1, reflection on,\n"
    "grpc.health.v1 health service). A config file is read only when given: --flagfile=FILE (one\n"
    "--flag=value per line, e.g. /etc/devplace/devplaced.flags). Signals: SIGHUP re-probes; SIGTERM/SIGINT\n"
    "stop accepting, finish calls, end watches, exit 0. Exit status 2: bad flags or configuration;\n"
    "1: could not listen.\n\n"
    "Usage: devplaced [--listen=unix:/path,127.0.0.1:7465] [--host_root=/] [--refresh_interval=60s] ...";

// --max_receive_bytes: the largest legitimate request (256 env entries of 4 KiB) fits under 2 MiB;
// below 4 KiB even a plain ResolveDevice request may not fit.
constexpr int kMinReceiveBytes = 4096;
constexpr int kMaxReceiveBytes = 64 << 20;
constexpr int64_t kMinMemoryQuota = int64_t{16} << 20;
constexpr int64_t kMaxMemoryQuota = int64_t{16} << 30;

int Usage(const std::string& message) {
  fprintf(stderr, "devplaced: %s (see --help)\n", message.c_str());
  return 2;
}

std::vector<std::string> DefaultListen() {
  std::string unix_path = "/run/devplace/devplace.sock";
  if (geteuid() != 0) {
    const char* xdg = getenv("XDG_RUNTIME_DIR");
    unix_path = xdg != nullptr && *xdg != '\0' ? absl::StrCat(xdg, "/devplace.sock")
                                               : absl::StrCat("/tmp/devplace-", geteuid(), "/devplace.sock");
  }
  return {absl::StrCat("unix:", unix_path), "127.0.0.1:7465"};
}

// `unix:/abs/or/relative/path` or `host:port` / `[v6]:port` with a port in 0..65535.
bool ValidListenAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return address.size() > 5;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = -1;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 && port <= 65535 &&
         address.substr(colon + 1).find_first_not_of("0123456789") == std::string::npos;
}

// `name` next to this binary, or in the build tree's `subdir` beside it; empty when neither exists.
std::string SiblingBinary(const std::string& name, const std::string& subdir) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const std::filesystem::path& candidate : {self.parent_path() / name, self.parent_path() / subdir / name}) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "";
}

// Whether `command` names an executable file (absolute/relative path, or found on PATH).
bool Executable(const std::string& command) {
  if (command.find('/') != std::string::npos) return access(command.c_str(), X_OK) == 0;
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    if (access(absl::StrCat(dir, "/", command).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Prepares a unix socket path: creates its directory, refuses a path held by something that is
// not a socket or by a socket another process still accepts on (a second daemon must not take
// over the first one's socket), and removes a stale one.
bool PrepareUnixSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    spdlog::error("event=listen_failed address=unix:{} error=\"a non-socket file exists at this path\"", path);
    return false;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return true;  // gRPC reports the too-long path itself
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) close(fd);
  if (live) {
    spdlog::error("event=listen_failed address=unix:{} error=\"another process is serving on this socket (a "
                  "devplaced already running?)\"",
                  path);
    return false;
  }
  unlink(path.c_str());
  return true;
}

int Run(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected argument '", rest[1], "'"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");

  // ---- flags, all checked before anything starts ----
  std::vector<std::string> listen = DefaultListen();
  if (!absl::GetFlag(FLAGS_listen).empty()) listen = absl::StrSplit(absl::GetFlag(FLAGS_listen), ',', absl::SkipEmpty());
  if (listen.empty()) return Usage("--listen names no address; accepted: unix:/path/to.sock and/or host:port");
  for (const std::string& address : listen) {
    if (!ValidListenAddress(address)) {
      return Usage(absl::StrCat("--listen: '", address, "' is not unix:/path or host:port with a port 0..65535"));
    }
  }
  int socket_mode = 0;
  if (!absl::numbers_internal::safe_strto32_base(absl::GetFlag(FLAGS_socket_mode), &socket_mode, 8) ||
      socket_mode < 0 || socket_mode > 0777) {
    return Usage(absl::StrCat("--socket_mode='", absl::GetFlag(FLAGS_socket_mode),
                              "' is not an octal permission (e.g. 0660)"));
  }
  gid_t socket_gid = static_cast<gid_t>(-1);
  if (const std::string group = absl::GetFlag(FLAGS_socket_group); !group.empty()) {
    const struct group* g = getgrnam(group.c_str());
    unsigned gid = 0;
    if (g != nullptr) {
      socket_gid = g->gr_gid;
    } else if (absl::SimpleAtoi(group, &gid)) {
      socket_gid = static_cast<gid_t>(gid);
    } else {
      return Usage(absl::StrCat("--socket_group='", group, "' is neither a group name nor a gid"));
    }
  }
  const absl::Duration probe_timeout = absl::GetFlag(FLAGS_probe_timeout);
  const absl::Duration interval = absl::GetFlag(FLAGS_refresh_interval);
  const absl::Duration grace = absl::GetFlag(FLAGS_shutdown_grace);
  if (probe_timeout < absl::Milliseconds(200)) {
    return Usage("--probe_timeout must be at least 200ms (e.g. 10s): the probe child gets 60% of it for vendor libraries");
  }
  if (interval < absl::ZeroDuration()) return Usage("--refresh_interval must be 0 (off) or positive, e.g. 60s");
  if (grace < absl::ZeroDuration()) return Usage("--shutdown_grace must not be negative");
  const int max_receive_bytes = absl::GetFlag(FLAGS_max_receive_bytes);
  if (max_receive_bytes < kMinReceiveBytes || max_receive_bytes > kMaxReceiveBytes) {
    return Usage(absl::StrCat("--max_receive_bytes=", max_receive_bytes, " is out of range; accepted: ",
                              kMinReceiveBytes, "..", kMaxReceiveBytes, " bytes"));
  }
  const int64_t memory_quota = absl::GetFlag(FLAGS_memory_quota_bytes);
  if (memory_quota < kMinMemoryQuota || memory_quota > kMaxMemoryQuota) {
    return Usage(absl::StrCat("--memory_quota_bytes=", memory_quota, " is out of range; accepted: ", kMinMemoryQuota,
                              "..", kMaxMemoryQuota, " bytes"));
  }
  const int max_watches = absl::GetFlag(FLAGS_max_watches);
  const int max_watches_per_peer = absl::GetFlag(FLAGS_max_watches_per_peer);
  if (max_watches < 0) return Usage("--max_watches must be 0 (no limit) or positive");
  if (max_watches_per_peer < 0) return Usage("--max_watches_per_peer must be 0 (no limit) or positive");
  const absl::Duration keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  const absl::Duration keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  if (keepalive_time < absl::Seconds(1) || keepalive_time > absl::Hours(2)) {
    return Usage("--keepalive_time must be within 1s..2h (e.g. 60s)");
  }
  if (keepalive_timeout < absl::Seconds(1) || keepalive_timeout > absl::Minutes(10)) {
    return Usage("--keepalive_timeout must be within 1s..10m (e.g. 20s)");
  }
  const absl::Duration liveness_interval = absl::GetFlag(FLAGS_liveness_interval);
  const int liveness_failures = absl::GetFlag(FLAGS_liveness_failures);
  if (liveness_interval < absl::ZeroDuration()) return Usage("--liveness_interval must be 0 (off) or positive, e.g. 5s");
  if (liveness_failures < 1 || liveness_failures > 100) return Usage("--liveness_failures must be within 1..100");
  const std::string host_root = absl::GetFlag(FLAGS_host_root);
  if (!std::filesystem::is_directory(host_root)) {
    return Usage(absl::StrCat("--host_root=", host_root, " is not a readable directory"));
  }
  std::string probe = absl::GetFlag(FLAGS_probe_command);
  if (probe.empty()) probe = SiblingBinary("devplace-probe", "probe");
  if (probe.empty()) probe = "devplace-probe";  // from PATH
  if (!Executable(probe)) return Usage(absl::StrCat("--probe_command: '", probe, "' is not an executable"));
  std::string torch_probe = absl::GetFlag(FLAGS_torch_probe_command);
  if (torch_probe.empty()) torch_probe = SiblingBinary("devplace-torch-probe", "torch");
  if (torch_probe == "none") torch_probe.clear();
  if (!torch_probe.empty() && !Executable(torch_probe)) {
    return Usage(absl::StrCat("--torch_probe_command: '", torch_probe, "' is not an executable (\"none\" disables it)"));
  }

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

  // ---- the store, the libtorch view, the service ----
  inventory::TorchView torch(torch_probe.empty() ? std::vector<std::string>{} : std::vector<std::string>{torch_probe},
                             probe_timeout);
  inventory::StoreOptions options;
  // The child's own vendor deadline fires well before ours, so a hung library costs one prober,
  // not the whole inventory.
  const absl::Duration vendor_timeout = probe_timeout * 0.6;
  options.probe_command = {probe, absl::StrCat("--host_root=", host_root),
                           absl::StrCat("--nvml_library=", absl::GetFlag(FLAGS_nvml_library)),
                           absl::StrCat("--probe_timeout=", absl::FormatDuration(vendor_timeout))};
  options.probe_timeout = probe_timeout;
  options.on_probe = [](const inventory::ProbeOutcome& o) {
    if (o.status.ok()) {
      spdlog::info("event=probe result=ok duration_ms={} revision={} changed={}",
                   absl::ToInt64Milliseconds(o.duration), o.revision, o.changed);
    } else {
      spdlog::warn("event=probe result=error duration_ms={} code={} error=\"{}\" serving_revision={}",
                   absl::ToInt64Milliseconds(o.duration), absl::StatusCodeToString(o.status.code()),
                   absl::CHexEscape(o.status.message()), o.revision);  // the child's stderr is quoted in it
    }
  };
  options.augment = [&torch](v1::Inventory& fresh) {
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
  service::ServiceOptions service_options;
  service_options.max_watches = max_watches;
  service_options.max_watches_per_peer = max_watches_per_peer;
  service::DevicePlacementService service(store, full_refresh, service_options);

  // ---- listeners ----
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
  std::vector<std::string> unix_paths;
  std::vector<std::string> bound_targets;  // for the liveness check
  for (const std::string& address : listen) {
    if (absl::StartsWith(address, "unix:")) {
      const std::string path = address.substr(5);
      if (!PrepareUnixSocket(path)) return 1;
      unix_paths.push_back(path);
    }
    ports.push_back(std::make_unique<int>(0));
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), ports.back().get());
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    spdlog::error("event=listen_failed addresses={} error=\"could not bind (address in use, or no permission for the "
                  "socket directory)\"",
                  absl::StrJoin(listen, ","));
    return 1;
  }
  // gRPC's default health service starts out SERVING; say NOT_SERVING until the first inventory.
  // (A client racing the first microseconds after bind may still see SERVING once.)
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  for (const std::string& path : unix_paths) {
    if (chmod(path.c_str(), static_cast<mode_t>(socket_mode)) != 0 ||
        (socket_gid != static_cast<gid_t>(-1) && chown(path.c_str(), static_cast<uid_t>(-1), socket_gid) != 0)) {
      spdlog::warn("event=socket_permissions_failed path={} error=\"{}\"", path, strerror(errno));
    }
  }
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

  // Health turns SERVING with the first inventory (never again once stopping); each new revision
  // is logged.
  const inventory::InventoryStore::SubscriptionId subscription =
      store.Subscribe([health, &stopping](const inventory::Snapshot& inv) {
        spdlog::info("event=inventory revision={} backends={}", inv->revision(), inv->backends_size());
        if (!stopping.load()) health->SetServingStatus(true);
      });
  // The timer probes at once, then every --refresh_interval; serving never waits on a probe.
  store.Start(interval > absl::ZeroDuration() ? interval : absl::InfiniteDuration());
  service.RequestRefresh();  // the libtorch view, once serving

  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      spdlog::info("event=refresh_requested trigger=SIGHUP");
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
  service.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  server->Wait();
  store.Stop();
  store.Unsubscribe(subscription);
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
