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
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/export/nfd_writer.h"
#include "server/common/flag_errors.h"
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

ABSL_FLAG(std::string, listen, "",
          "Comma-separated listen addresses: unix:/path/to.sock, host:port (plaintext) and/or tls:host:port "
          "(TLS, needs --tls_cert and --tls_key; mutual TLS with --tls_client_ca); port 0 picks a free port, "
          "logged at start. A plaintext host:port must be loopback (127.0.0.0/8, [::1], localhost) unless "
          "--allow_insecure_remote. Default: unix:/run/devplace/devplace.sock (as root; otherwise "
          "unix:$XDG_RUNTIME_DIR/devplace.sock, or unix:/tmp/devplace-<uid>/devplace.sock without it) and "
          "127.0.0.1:7465");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the tls: listeners (the daemon's certificate first; it should name the "
          "host clients dial, e.g. SAN DNS:node1 or IP:10.0.0.5). Re-read on SIGHUP");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted). Re-read on SIGHUP");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM bundle of the CAs that sign client certificates: tls: listeners then require and verify a client "
          "certificate (mutual TLS). Empty: server-only TLS (encrypted, but any client that reaches the port may "
          "read). Re-read on SIGHUP");
ABSL_FLAG(bool, allow_insecure_remote, false,
          "Allow a plaintext host:port listener on a non-loopback address (0.0.0.0, [::], a LAN address or host "
          "name): anyone who reaches it can call the daemon unauthenticated and unencrypted. Logged as "
          "event=insecure_remote_listener");
ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev, passed to the probe (e.g. /host in a container)");
ABSL_FLAG(std::string, probe_command, "",
          "The probe executable, run as a child process with --host_root (default: devplace-probe next to this "
          "binary, or in ../lib/devplace/ when installed). Its stdout must be one serialized devplace.v1.Inventory");
ABSL_FLAG(std::string, torch_probe_command, "",
          "The libtorch probe (default: devplace-torch-probe next to this binary or in ../lib/devplace/, when "
          "installed), run once after "
          "start and on each full refresh (SIGHUP, RefreshInventory); its view is Inventory.torch. \"none\" disables it");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(10),
          "Deadline for one probe child; one that overruns is killed and the last good inventory stays. The child "
          "gets 60% of it as its own deadline for vendor-library probers (a hung NVML call is reported as timed "
          "out and the rest of the inventory still arrives); this deadline is only the safety net");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library the probe child dlopens for GPU names, UUIDs, memory and MIG instances (empty: none)");
ABSL_FLAG(std::string, cuda_library, "libcuda.so.1",
          "libcuda the probe child dlopens (in two short-lived children of its own) for the CUDA runtime's GPU "
          "numbering under CUDA_DEVICE_ORDER unset and PCI_BUS_ID (empty: none; the resolver then warns that the "
          "order may differ on hosts with mixed GPU models)");
ABSL_FLAG(std::string, amd_smi_library, "libamd_smi.so",
          "AMD SMI library the probe child dlopens for AMD GPU names, UUIDs, VRAM and partition modes (empty: none)");
ABSL_FLAG(std::string, level_zero_library, "libze_loader.so.1",
          "Level Zero loader the probe child dlopens for Intel GPU names, UUIDs, memory, tiles (Sysman; empty: none)");
ABSL_FLAG(std::string, hlml_library, "libhlml.so",
          "HLML library (Intel Gaudi) the probe child dlopens for names, UUIDs, memory and health (empty: none)");
ABSL_FLAG(std::string, dcmi_library, "libdcmi.so",
          "DCMI library (Huawei Ascend) the probe child dlopens for ids, names, HBM memory and health (empty: none)");
ABSL_FLAG(std::string, cndev_library, "libcndev.so",
          "CNDev library (Cambricon) the probe child dlopens for names, UUIDs, memory and health (empty: none)");
ABSL_FLAG(std::string, mtml_library, "libmtml.so",
          "MTML library (Moore Threads) the probe child dlopens for names, UUIDs and memory (empty: none)");
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
          "the client's IP address over TCP (all local TCP clients are one peer) and, over a unix socket, the "
          "client's user (uid, from the socket's peer credentials)");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Seconds(60),
          "How long a connection may be silent before the daemon pings it (1s..2h), on TCP and unix sockets alike");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(20),
          "How long the daemon waits for a ping's answer before it drops the connection and its calls and watches "
          "(1s..10m): a frozen or vanished client is dropped within --keepalive_time + --keepalive_timeout");
ABSL_FLAG(absl::Duration, liveness_interval, absl::Seconds(5),
          "How often the daemon calls grpc.health.v1 Check on each of its own listen addresses over a fresh "
          "connection (0 = never). A listener that fails --liveness_failures checks in a row (e.g. gRPC's accept loop "
          "gave up after descriptor exhaustion) logs event=listener_dead, and the daemon exits 1 for its supervisor "
          "(systemd Restart=on-failure, the Kubernetes DaemonSet) to restart it. A tls: listener is checked by a "
          "connection it must read and close (a failed handshake), as a health call would need a client certificate");
ABSL_FLAG(int, liveness_failures, 3, "Consecutive failed self-checks that make a listener dead (1..100)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9465",
          "Where to serve Prometheus metrics at /metrics over HTTP: IPV4:PORT or [IPV6]:PORT (port 0 picks a free "
          "port, logged at start); empty disables. Loopback only unless --metrics_allow_remote. If the default "
          "address 127.0.0.1:9465 is taken the daemon logs a warning and runs without metrics; any other address "
          "that cannot be bound is fatal (exit 1)");
ABSL_FLAG(bool, metrics_allow_remote, false,
          "Allow a non-loopback --metrics_listen (e.g. 0.0.0.0:9465): /metrics names the host's devices and has "
          "no authentication");
ABSL_FLAG(std::string, log_level, "info", "Least severe log lines written: debug, info, warn or error");
ABSL_FLAG(std::string, log_format, "text",
          "Log line format on stderr: text (TIME LEVEL event=NAME key=value ...) or json (one object per line, "
          "members time, level and the event's fields). gRPC's and libprotobuf's own lines come through the same "
          "format as event=library_log, at most 10 a second per library");
ABSL_FLAG(std::string, nfd_features_file, "",
          "Keep a Node Feature Discovery local feature file with this host's node labels (namespace "
          "devplace.feature.node.kubernetes.io), e.g. /etc/kubernetes/node-feature-discovery/features.d/devplace; "
          "its directory must exist. Rewritten atomically on each new inventory revision, and re-stamped when half "
          "of --nfd_expiry has passed. Empty: none");
ABSL_FLAG(absl::Duration, nfd_expiry, absl::Minutes(10),
          "The feature file's NFD expiry window (# +expiry-time= now + this, at least 1m): the labels vanish "
          "this long after devplaced stops rewriting the file");
ABSL_FLAG(absl::Duration, refresh_min_interval, absl::Seconds(1),
          "RefreshInventory starts at most one probe per this interval (calls arriving while one is queued "
          "share it); others get RESOURCE_EXHAUSTED with the time to wait. 0 = no limit. RefreshInventory is "
          "allowed only to root, the daemon's user and --socket_group members over the unix socket, and to "
          "mTLS-authenticated clients");

namespace devplace {
namespace {

constexpr char kUsage[] =
    "the devplace daemon. Probes this host's accelerators and answers ResolveDevice, GetInventory,\n"
    "WatchInventory, ListBackends and RefreshInventory over gRPC (package devplace.v1, reflection on,\n"
    "grpc.health.v1 health service). A config file is read only when given: --flagfile=FILE (one\n"
    "--flag=value per line, e.g. /etc/devplace/devplaced.flags). Signals: SIGHUP re-probes (and re-reads\n"
    "TLS certificates); SIGTERM/SIGINT stop accepting, finish calls, end watches, exit 0. Exit status 2:\n"
    "bad flags or configuration; 1: could not listen. Prometheus metrics: http://127.0.0.1:9465/metrics\n"
    "(--metrics_listen); logs on stderr (--log_level, --log_format=text|json).\n\n"
    "Remote access: --listen=tls:0.0.0.0:7466 --tls_cert=FILE --tls_key=FILE --tls_client_ca=FILE serves\n"
    "mutual TLS (clients need a certificate signed by --tls_client_ca); without --tls_client_ca it is\n"
    "server-only TLS. The files are checked at start (exit 2 naming the flag) and re-read on SIGHUP: new\n"
    "connections get the new certificate within a second, a broken renewal keeps the old one\n"
    "(event=tls_reload result=error). A plaintext listener on a non-loopback address is refused unless\n"
    "--allow_insecure_remote.\n"
    "Unix sockets: only the default runtime directory (/run/devplace, /tmp/devplace-<uid>) is created;\n"
    "a socket directory must be owned by root or this user and not writable by others (unless sticky).\n"
    "SIGHUP also re-creates a deleted socket. RefreshInventory: root, this user or --socket_group members\n"
    "over the unix socket, or mTLS clients; rate-limited by --refresh_min_interval.\n\n"
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

// `unix:/absolute/path` or `host:port` / `[v6]:port` with a port in 0..65535, where host is a
// name or an IPv4 address (letters, digits, '.', '-', '_').
bool ValidListenAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) {
    const std::string path = address.substr(5);
    return path.size() > 1 && path[0] == '/' && path[1] != '/';
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string host = address.substr(0, colon);
  const bool v6 = host.size() > 2 && host.front() == '[' && host.back() == ']' &&
                  host.find_first_not_of("[]0123456789abcdefABCDEF:.%") == std::string::npos;
  const bool name = host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") ==
                    std::string::npos;
  int port = -1;
  return (v6 || name) && absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 && port <= 65535 &&
         address.substr(colon + 1).find_first_not_of("0123456789") == std::string::npos;
}

// Checks every flag on the command line and in --flagfile files before absl parses them (absl
// would exit 1 on its own): an unknown flag, a value the flag cannot take or an unreadable flag
// file is one line naming the flag and what it accepts. nullopt when all is well.
std::optional<std::string> CheckFlags(const std::vector<std::string>& args, bool from_file, int depth = 0) {
  static const std::set<std::string> kAbslOwn = {"help", "helpfull", "helpshort", "helppackage", "version",
                                                  "only_check_args", "helpon", "helpmatch", "fromenv",
                                                  "tryfromenv", "undefok"};
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional: reported after parsing
    auto [name, value] = SplitFlagArgument(arg);
    if (kAbslOwn.count(name) > 0) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && !value) {  // --noflag for a bool
      const absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      return absl::StrCat("unknown flag --", name, from_file ? " in a --flagfile" : "",
                          " (devplaced --help lists the flags)");
    }
    if (!value) {
      if (flag->IsOfType<bool>()) continue;
      if (from_file || i + 1 >= args.size()) return absl::StrCat("flag --", name, " needs a value (--", name, "=VALUE)");
      value = args[++i];
    }
    if (name == "flagfile") {
      if (depth > 8) return "--flagfile: files include each other more than 8 deep";
      for (absl::string_view file : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
        std::ifstream in{std::string(file)};
        if (!in) {
          return absl::StrCat("--flagfile=", file, ": cannot read it (", strerror(errno),
                              "); a flag file holds one --flag=value per line");
        }
        std::vector<std::string> lines;
        for (std::string line; std::getline(in, line);) {
          absl::string_view l = absl::StripAsciiWhitespace(line);
          if (!l.empty() && l[0] != '#') lines.emplace_back(l);
        }
        if (std::optional<std::string> error = CheckFlags(lines, true, depth + 1)) {
          return absl::StrCat(*error, " (in --flagfile=", file, ")");
        }
      }
      continue;
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) return BadFlagValue(*flag, *value, error);
  }
  return std::nullopt;
}

// `name` next to this binary, in the build tree's `subdir` beside it, or in the installed
// `../lib/devplace/` (sbin/devplaced, lib/devplace/devplace-probe); empty when none exists.
std::string SiblingBinary(const std::string& name, const std::string& subdir) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path dir = self.parent_path();
  for (const std::filesystem::path& candidate :
       {dir / name, dir / subdir / name, dir.parent_path() / "lib" / "devplace" / name}) {
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

int Run(int argc, char** argv) {
#ifdef NDEBUG
  // Debian builds libabsl without NDEBUG, so every absl::Mutex (gRPC's included) runs lock-order
  // deadlock detection and aborts on a cycle it suspects. Release builds of the daemon pay
  // neither (issue 12: ~3% of the daemon's CPU per call); Debug builds, the tests', keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.normalize_filename = [](absl::string_view file) {  // "devplaced.cc", not the build path
    const size_t slash = file.rfind('/');
    return std::string(slash == absl::string_view::npos ? file : file.substr(slash + 1));
  };
  absl::SetFlagsUsageConfig(usage_config);
  if (std::optional<std::string> error = CheckFlags(std::vector<std::string>(argv + 1, argv + argc), false)) {
    return Usage(*error);
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected argument '", rest[1], "'"));
  // Library lines (gRPC core, libprotobuf) per second per library; the rest are counted and
  // reported in one event=library_log_suppressed line (a flood of bad requests logs a line each).
  constexpr int kLibraryLogsPerSecond = 10;
  const absl::StatusOr<spdlog::level::level_enum> log_level = logging::ParseLevel(absl::GetFlag(FLAGS_log_level));
  if (!log_level.ok()) return Usage(std::string(log_level.status().message()));
  const absl::StatusOr<logging::Format> log_format = logging::ParseFormat(absl::GetFlag(FLAGS_log_format));
  if (!log_format.ok()) return Usage(std::string(log_format.status().message()));
  logging::Configure(*log_level, *log_format);
  logging::RouteProtobufLogs(kLibraryLogsPerSecond);
  service::RouteGrpcLogs(*log_level, kLibraryLogsPerSecond);
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (absl::Status s = metrics::CheckMetricsAddress(metrics_listen, absl::GetFlag(FLAGS_metrics_allow_remote));
      !s.ok()) {
    return Usage(std::string(s.message()));
  }

  // ---- flags, all checked before anything starts ----
  std::vector<std::string> listen = DefaultListen();
  if (!absl::GetFlag(FLAGS_listen).empty()) listen = absl::StrSplit(absl::GetFlag(FLAGS_listen), ',', absl::SkipEmpty());
  if (listen.empty()) return Usage("--listen names no address; accepted: unix:/path/to.sock and/or host:port");
  bool any_tls = false;
  std::vector<std::string> insecure_remote;
  for (const std::string& address : listen) {
    const bool tls = absl::StartsWith(address, "tls:");
    if (!ValidListenAddress(tls ? address.substr(4) : address) || (tls && absl::StartsWith(address, "tls:unix:"))) {
      return Usage(absl::StrCat("--listen: '", address,
                                "' is not unix:/absolute/path.sock, host:port or tls:host:port (a name, IPv4 or [IPv6] "
                                "address and a port 0..65535, no scheme)"));
    }
    any_tls |= tls;
    if (!tls && !absl::StartsWith(address, "unix:") && !service::IsLoopbackListenAddress(address)) {
      if (!absl::GetFlag(FLAGS_allow_insecure_remote)) {
        return Usage(absl::StrCat("--listen: '", address, "' is plaintext and reachable from other hosts; use tls:",
                                  address, " with --tls_cert, --tls_key and --tls_client_ca, a loopback address, "
                                  "or --allow_insecure_remote"));
      }
      insecure_remote.push_back(address);
    }
  }
  const service::TlsFiles tls_files{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                    absl::GetFlag(FLAGS_tls_client_ca)};
  std::unique_ptr<service::ReloadableTlsCredentials> tls;
  if (any_tls) {
    absl::StatusOr<std::unique_ptr<service::ReloadableTlsCredentials>> created =
        service::ReloadableTlsCredentials::Create(tls_files);
    if (!created.ok()) return Usage(std::string(created.status().message()));
    tls = *std::move(created);
  } else if (!tls_files.cert.empty() || !tls_files.key.empty() || !tls_files.client_ca.empty()) {
    return Usage("--tls_cert/--tls_key/--tls_client_ca are set but no --listen address is tls:host:port");
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
  const absl::Duration refresh_min_interval = absl::GetFlag(FLAGS_refresh_min_interval);
  if (refresh_min_interval < absl::ZeroDuration()) {
    return Usage("--refresh_min_interval must be 0 (no limit) or positive, e.g. 1s");
  }
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

  const std::string nfd_file = absl::GetFlag(FLAGS_nfd_features_file);
  const absl::Duration nfd_expiry = absl::GetFlag(FLAGS_nfd_expiry);
  if (!nfd_file.empty()) {
    const std::filesystem::path nfd_path(nfd_file);
    const std::filesystem::path nfd_dir = nfd_path.has_parent_path() ? nfd_path.parent_path() : ".";
    if (!nfd_path.has_filename() || !std::filesystem::is_directory(nfd_dir)) {
      return Usage(absl::StrCat("--nfd_features_file=", nfd_file,
                                ": needs a file name in an existing directory (e.g. NFD's features.d)"));
    }
    if (std::filesystem::is_directory(nfd_path)) {
      return Usage(absl::StrCat("--nfd_features_file=", nfd_file, ": is a directory; name a file inside it"));
    }
  }
  if (nfd_expiry < absl::Minutes(1)) return Usage("--nfd_expiry must be at least 1m (e.g. 10m)");

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
                           absl::StrCat("--nvml_library=", absl::GetFlag(FLAGS_nvml_library)),
                           absl::StrCat("--cuda_library=", absl::GetFlag(FLAGS_cuda_library)),
                           absl::StrCat("--amd_smi_library=", absl::GetFlag(FLAGS_amd_smi_library)),
                           absl::StrCat("--level_zero_library=", absl::GetFlag(FLAGS_level_zero_library)),
                           absl::StrCat("--hlml_library=", absl::GetFlag(FLAGS_hlml_library)),
                           absl::StrCat("--dcmi_library=", absl::GetFlag(FLAGS_dcmi_library)),
                           absl::StrCat("--cndev_library=", absl::GetFlag(FLAGS_cndev_library)),
                           absl::StrCat("--mtml_library=", absl::GetFlag(FLAGS_mtml_library)),
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
    } else if (metrics_listen != absl::GetFlagReflectionHandle(FLAGS_metrics_listen).DefaultValue()) {
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
  const std::string default_unix = DefaultListen().front().substr(5);
  std::vector<std::string> bound_targets;  // for the liveness check
  for (const std::string& address : listen) {
    ports.push_back(std::make_unique<int>(0));
    if (absl::StartsWith(address, "unix:")) {
      service::UnixListener::Options o;
      o.path = address.substr(5);
      o.mode = static_cast<mode_t>(socket_mode);
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
