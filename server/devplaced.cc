// devplaced: the per-host device placement daemon. Probes the host through the devplace-probe
// child process, keeps the inventory snapshot, and serves the DevicePlacement gRPC service with
// server reflection and the grpc.health.v1 health service. See README.md and DESIGN.md.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
#include "server/inventory/store.h"
#include "server/service/service.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "",
          "Comma-separated listen addresses: unix:/path/to.sock and/or host:port (port 0 picks a free port, "
          "logged at start). Default: unix:/run/devplace/devplace.sock (as root; otherwise "
          "unix:$XDG_RUNTIME_DIR/devplace.sock) and 127.0.0.1:7465");
ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev, passed to the probe (e.g. /host in a container)");
ABSL_FLAG(std::string, probe_command, "",
          "The probe executable, run as a child process with --host_root (default: devplace-probe next to this "
          "binary). Its stdout must be one serialized devplace.v1.Inventory");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(10),
          "Deadline for one probe child; one that overruns is killed and the last good inventory stays");
ABSL_FLAG(absl::Duration, refresh_interval, absl::Seconds(60),
          "How often to re-probe in the background (0 = only at start, on SIGHUP and on RefreshInventory)");
ABSL_FLAG(std::string, socket_mode, "0660", "Permission bits of unix-socket listeners (octal)");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(2),
          "On SIGTERM/SIGINT: how long in-flight calls may take to finish before they are cancelled");
ABSL_FLAG(int, max_receive_bytes, 1 << 20, "Largest request message accepted, in bytes");

namespace devplace {
namespace {

constexpr char kUsage[] =
    "the devplace daemon. Probes this host's accelerators and answers ResolveDevice, GetInventory,\n"
    "WatchInventory, ListBackends and RefreshInventory over gRPC (package devplace.v1, reflection on,\n"
    "grpc.health.v1 health service). Config file: --flagfile=/etc/devplace/devplaced.flags (one --flag=value\n"
    "per line). Signals: SIGHUP re-probes; SIGTERM/SIGINT stop accepting, finish calls, end watches, exit 0.\n\n"
    "Usage: devplaced [--listen=unix:/path,127.0.0.1:7465] [--host_root=/] [--refresh_interval=60s] ...";

std::vector<std::string> DefaultListen() {
  std::string unix_path = "/run/devplace/devplace.sock";
  if (geteuid() != 0) {
    const char* xdg = getenv("XDG_RUNTIME_DIR");
    unix_path = xdg != nullptr && *xdg != '\0' ? absl::StrCat(xdg, "/devplace.sock")
                                               : absl::StrCat("/tmp/devplace-", geteuid(), "/devplace.sock");
  }
  return {absl::StrCat("unix:", unix_path), "127.0.0.1:7465"};
}

std::string DefaultProbeCommand() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "devplace-probe";
  const std::filesystem::path sibling = self.parent_path() / "devplace-probe";
  if (std::filesystem::exists(sibling)) return sibling.string();
  const std::filesystem::path in_tree = self.parent_path() / "probe" / "devplace-probe";  // build tree
  return std::filesystem::exists(in_tree) ? in_tree.string() : "devplace-probe";
}

// Prepares the directory of a unix socket and refuses a path held by something that is not a socket.
bool PrepareUnixSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    spdlog::error("event=listen_failed address=unix:{} error=\"a non-socket file exists at this path\"", path);
    return false;
  }
  return true;
}

int Run(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    fprintf(stderr, "devplaced: unexpected argument '%s' (see --help)\n", rest[1]);
    return 2;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");

  std::vector<std::string> listen = DefaultListen();
  if (!absl::GetFlag(FLAGS_listen).empty()) listen = absl::StrSplit(absl::GetFlag(FLAGS_listen), ',', absl::SkipEmpty());
  int socket_mode = 0;
  if (!absl::numbers_internal::safe_strto32_base(absl::GetFlag(FLAGS_socket_mode), &socket_mode, 8) ||
      socket_mode < 0 || socket_mode > 0777) {
    fprintf(stderr, "devplaced: --socket_mode='%s' is not an octal permission (e.g. 0660)\n",
            absl::GetFlag(FLAGS_socket_mode).c_str());
    return 2;
  }
  const std::string host_root = absl::GetFlag(FLAGS_host_root);
  const std::string probe = absl::GetFlag(FLAGS_probe_command).empty() ? DefaultProbeCommand()
                                                                         : absl::GetFlag(FLAGS_probe_command);

  // Signals are handled by sigwait in this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  spdlog::info("event=start pid={} host_root={} probe_command={} probe_timeout_ms={} refresh_interval_s={}",
               getpid(), host_root, probe, absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_probe_timeout)),
               absl::ToInt64Seconds(absl::GetFlag(FLAGS_refresh_interval)));

  inventory::StoreOptions options;
  options.probe_command = {probe, absl::StrCat("--host_root=", host_root)};
  options.probe_timeout = absl::GetFlag(FLAGS_probe_timeout);
  options.on_probe = [](const inventory::ProbeOutcome& o) {
    if (o.status.ok()) {
      spdlog::info("event=probe result=ok duration_ms={} revision={} changed={}",
                   absl::ToInt64Milliseconds(o.duration), o.revision, o.changed);
    } else {
      spdlog::warn("event=probe result=error duration_ms={} code={} error=\"{}\" serving_revision={}",
                   absl::ToInt64Milliseconds(o.duration), absl::StatusCodeToString(o.status.code()),
                   std::string(o.status.message()), o.revision);
    }
  };
  inventory::InventoryStore store(options);
  service::DevicePlacementService service(store);

  grpc::EnableDefaultHealthCheckService(true);
  (void)grpc::health::v1::HealthCheckRequest::descriptor();  // lets reflection describe grpc.health.v1
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_receive_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  std::vector<std::unique_ptr<int>> ports;
  std::vector<std::string> unix_paths;
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
    spdlog::error("event=listen_failed addresses={} error=\"could not bind (address in use, bad address, or no "
                  "permission for the socket directory)\"",
                  absl::StrJoin(listen, ","));
    return 1;
  }
  // gRPC's default health service starts out SERVING; say NOT_SERVING until the first inventory.
  // (A client racing the first microseconds after bind may still see SERVING once.)
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  for (const std::string& path : unix_paths) {
    if (chmod(path.c_str(), static_cast<mode_t>(socket_mode)) != 0) {
      spdlog::warn("event=chmod_failed path={} error=\"{}\"", path, strerror(errno));
    }
  }
  for (size_t i = 0; i < listen.size(); ++i) {  // logged once the sockets have their mode
    std::string bound = listen[i];
    if (!absl::StartsWith(bound, "unix:")) {
      bound = absl::StrCat(bound.substr(0, bound.rfind(':')), ":", *ports[i]);
    }
    spdlog::info("event=listening address={}", bound);
  }

  // Health turns SERVING with the first inventory; every new revision is logged.
  const inventory::InventoryStore::SubscriptionId subscription =
      store.Subscribe([health](const inventory::Snapshot& inv) {
        spdlog::info("event=inventory revision={} backends={}", inv->revision(), inv->backends_size());
        health->SetServingStatus(true);
      });
  // The timer probes at once, then every --refresh_interval; serving never waits on a probe.
  const absl::Duration interval = absl::GetFlag(FLAGS_refresh_interval);
  if (interval > absl::ZeroDuration()) {
    store.Start(interval);
  } else {
    store.Start(absl::InfiniteDuration());  // the first probe only; then SIGHUP and RefreshInventory
  }

  std::vector<std::thread> hup_refreshes;  // joined at shutdown (each is bounded by --probe_timeout)
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      spdlog::info("event=refresh trigger=SIGHUP");
      hup_refreshes.emplace_back([&store] { (void)store.Refresh(); });
      continue;
    }
    spdlog::info("event=shutdown signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  health->SetServingStatus(false);
  store.Stop();
  for (std::thread& t : hup_refreshes) t.join();
  store.Unsubscribe(subscription);
  service.Shutdown(absl::GetFlag(FLAGS_probe_timeout) + absl::Seconds(1));
  server->Shutdown(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_shutdown_grace)));
  server->Wait();
  spdlog::info("event=stopped");
  return 0;
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) { return devplace::Run(argc, argv); }
