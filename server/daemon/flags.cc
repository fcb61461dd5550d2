// devplaced's flags (one per DaemonConfig setting; defaults from DaemonConfig's; the vendor
// libraries' --<name>_library flags are server/common/vendor_library_flags.h's, shared with the
// probe), its --help text, the pre-parse check of every flag, and the DaemonConfig the parsed flags
// give. See flags.h for the contract.
#include "server/daemon/flags.h"

#include <algorithm>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "server/common/flag_errors.h"
#include "server/common/flag_help.h"
#include "server/common/host_file.h"
#include "server/common/vendor_library_flags.h"
#include "server/common/version.h"
#include "server/placement/env_typos.h"
#include "server/placement/versions.h"

namespace {

// The flags' defaults are DaemonConfig's.
const devplace::daemon::DaemonConfig& Defaults() {
  static const devplace::daemon::DaemonConfig defaults;
  return defaults;
}

}  // namespace

ABSL_FLAG(std::string, listen, Defaults().listen,
          "Comma-separated listen addresses: unix:/path/to.sock, host:port (plaintext) and/or tls:host:port "
          "(TLS, needs --tls_cert and --tls_key; mutual TLS with --tls_client_ca); port 0 picks a free port, "
          "logged at start. A plaintext host:port must be loopback (127.0.0.0/8, [::1], localhost) unless "
          "--allow_insecure_remote. Default: unix:/run/devplace/devplace.sock (as root; otherwise "
          "unix:$XDG_RUNTIME_DIR/devplace.sock, or unix:/tmp/devplace-<uid>/devplace.sock without it) and "
          "127.0.0.1:7465");
ABSL_FLAG(std::string, tls_cert, Defaults().tls.cert,
          "PEM certificate chain of the tls: listeners (the daemon's certificate first; it should name the "
          "host clients dial, e.g. SAN DNS:node1 or IP:10.0.0.5). Re-read on SIGHUP");
ABSL_FLAG(std::string, tls_key, Defaults().tls.key, "PEM private key of --tls_cert (unencrypted). Re-read on SIGHUP");
ABSL_FLAG(std::string, tls_client_ca, Defaults().tls.client_ca,
          "PEM bundle of the CAs that sign client certificates: tls: listeners then require and verify a client "
          "certificate (mutual TLS). Empty: server-only TLS (encrypted, but any client that reaches the port may "
          "read). Re-read on SIGHUP");
ABSL_FLAG(bool, allow_insecure_remote, Defaults().allow_insecure_remote,
          "Allow a plaintext host:port listener on a non-loopback address (0.0.0.0, [::], a LAN address or host "
          "name): anyone who reaches it can call the daemon unauthenticated and unencrypted. Logged as "
          "event=insecure_remote_listener");
ABSL_FLAG(std::string, host_root, Defaults().host_root,
          "Directory holding the host's /sys, /proc and /dev, passed to the probe (e.g. /host in a container)");
ABSL_FLAG(std::string, probe_command, Defaults().probe_command,
          "The probe executable, run as a child process with --host_root (default: devplace-probe next to this "
          "binary, or in ../lib/devplace/ when installed). Its stdout must be one serialized devplace.v1.Inventory");
ABSL_FLAG(std::string, torch_probe_command, Defaults().torch_probe_command,
          "The libtorch probe (default: devplace-torch-probe next to this binary or in ../lib/devplace/, when "
          "installed), run once after "
          "start and on each full refresh (SIGHUP, RefreshInventory); its view is Inventory.torch. \"none\" disables it");
ABSL_FLAG(absl::Duration, probe_timeout, Defaults().probe_timeout,
          "Deadline for one probe child; one that overruns is killed and the last good inventory stays. The child "
          "gets 60% of it as its own deadline for vendor-library probers (a hung NVML call is reported as timed "
          "out and the rest of the inventory still arrives); this deadline is only the safety net");
ABSL_FLAG(absl::Duration, refresh_interval, Defaults().refresh_interval,
          "How often to re-probe in the background (0 = only at start, on SIGHUP and on RefreshInventory)");
ABSL_FLAG(absl::Duration, usage_interval, Defaults().usage_interval,
          "How often to re-read who uses each device (memory in use and free, processes, compute mode: "
          "Device.usage) between full probes, with a cheaper probe child (devplace-probe --usage_only: the PCI scan "
          "and the vendor libraries that report memory), for PickDevices on shared hosts; at least 100ms, "
          "0 = only with each full probe");
ABSL_FLAG(std::string, socket_mode, Defaults().socket_mode,
          "Permission bits of unix-socket listeners (octal). The default 0666 lets every local user read and pick "
          "(a process lease for their own process); refresh and others' pids stay for root, the daemon's user and "
          "--socket_group");
ABSL_FLAG(std::string, socket_group, Defaults().socket_group,
          "Group that owns unix-socket listeners (name or gid), so jobs in that group can connect; default: the "
          "daemon's own group");
ABSL_FLAG(absl::Duration, shutdown_grace, Defaults().shutdown_grace,
          "On SIGTERM/SIGINT: how long in-flight calls may take to finish before they are cancelled");
ABSL_FLAG(int, max_receive_bytes, Defaults().max_receive_bytes,
          "Largest request message accepted, in bytes (4096..67108864); a larger one is RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, memory_quota_bytes, Defaults().memory_quota_bytes,
          "gRPC resource quota: memory gRPC may hold for connections and requests in flight, in bytes "
          "(16777216..17179869184); past it gRPC shrinks flow-control windows and refuses new streams");

ABSL_FLAG(int, max_connections, Defaults().max_connections,
          "Most connections open at once on all listeners together (1..1048576); past it a new connection is "
          "closed at accept. Lowered to fit the descriptor limit (soft RLIMIT_NOFILE - 160, followed when root "
          "changes it), logged as event=connection_limits and event=max_connections_lowered. 32 more are kept for "
          "the daemon's own liveness checks and for root and the daemon's user (health probes)");
ABSL_FLAG(int, max_connections_per_peer, Defaults().max_connections_per_peer,
          "Most connections open at once per peer (1..1048576), closed at accept past it. A peer is the client's "
          "user (uid) over a unix socket or over TCP from this host (loopback or one of the node's addresses), else "
          "its IP address; connections from this host whose client already closed are one peer of their own, at "
          "most 8 at once. A TLS connection counts from accept, its handshake included");
ABSL_FLAG(int, max_connection_rate_per_peer, Defaults().max_connection_rate_per_peer,
          "New connections a peer may open per second (0 = no limit, ..1048576), in bursts of up to a second's "
          "worth or --max_connections_per_peer, whichever is more; past it a new connection is closed at accept, so a connect-and-close flood "
          "costs the daemon an accept and a close. Root and the daemon's user are not limited");
ABSL_FLAG(absl::Duration, handshake_timeout, Defaults().handshake_timeout,
          "How long a new connection may take to complete its TLS handshake and send the HTTP/2 preface before it "
          "is closed, on every listener, unix sockets included (1s..120s; gRPC's own default is 120s)");
ABSL_FLAG(int, max_watches, Defaults().max_watches,
          "Most WatchInventory streams open at once (0 = no limit); past it a new watch gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_watches_per_peer, Defaults().max_watches_per_peer,
          "Most WatchInventory streams open at once per peer (0 = no limit), RESOURCE_EXHAUSTED past it. A peer is "
          "what --max_connections_per_peer counts by: the client's user (uid) over a unix socket or over TCP from "
          "this host, else its IP address");
ABSL_FLAG(absl::Duration, keepalive_time, Defaults().keepalive_time,
          "How long a connection may be silent before the daemon pings it (1s..2h), on TCP and unix sockets alike");
ABSL_FLAG(absl::Duration, keepalive_timeout, Defaults().keepalive_timeout,
          "How long the daemon waits for a ping's answer before it drops the connection and its calls and watches "
          "(1s..10m): a frozen or vanished client is dropped within --keepalive_time + --keepalive_timeout");
ABSL_FLAG(absl::Duration, liveness_interval, Defaults().liveness_interval,
          "How often the daemon calls grpc.health.v1 Check on each of its own listen addresses over a fresh "
          "connection (0 = never), admitted into the connection reserve. A listener that fails "
          "--liveness_failures checks in a row without progress logs event=listener_dead, and the daemon "
          "exits 1 for its supervisor (systemd Restart=on-failure, the Kubernetes DaemonSet) to restart it; a failed "
          "check while the listener accepted other connections (a flood), or accepted the check's own while the "
          "daemon answered calls (a burst of slow calls), is busy, logged but not counted. A tls: listener is checked by a connection its accept loop closes at once (no handshake), as a "
          "health call would need a client certificate");
ABSL_FLAG(int, liveness_failures, Defaults().liveness_failures, "Consecutive failed self-checks that make a listener dead (1..100)");
ABSL_FLAG(std::string, metrics_listen, Defaults().metrics_listen,
          "Where to serve Prometheus metrics at /metrics over HTTP: IPV4:PORT or [IPV6]:PORT (port 0 picks a free "
          "port, logged at start); empty disables. Loopback only unless --metrics_allow_remote. If the default "
          "address 127.0.0.1:9465 is taken the daemon logs a warning and runs without metrics; any other address "
          "that cannot be bound is fatal (exit 1). One accept loop, no worker per connection (64 connections at "
          "once, 8 per peer); a connection that has not sent its request within 5s is closed");
ABSL_FLAG(bool, metrics_allow_remote, Defaults().metrics_allow_remote,
          "Allow a non-loopback --metrics_listen (e.g. 0.0.0.0:9465): /metrics names the host's devices and has "
          "no authentication");
ABSL_FLAG(std::string, log_level, Defaults().log_level, "Least severe log lines written: debug, info, warn or error");
ABSL_FLAG(std::string, log_format, Defaults().log_format,
          "Log line format on stderr: text (TIME LEVEL event=NAME key=value ...) or json (one object per line, "
          "members time, level and the event's fields). gRPC's and libprotobuf's own lines come through the same "
          "format as event=library_log, at most 10 a second per library");
ABSL_FLAG(std::string, nfd_features_file, Defaults().nfd_features_file,
          "Keep a Node Feature Discovery local feature file with this host's node labels (namespace "
          "devplace.feature.node.kubernetes.io), e.g. /etc/kubernetes/node-feature-discovery/features.d/devplace; "
          "its directory must exist and be safe (owned by root or the daemon's user, not writable by group or others "
          "without the sticky bit, not a symbolic link; else exit 2), and is opened once at start. Rewritten atomically on each new inventory revision, and re-stamped when half "
          "of --nfd_expiry has passed. Empty: none");
ABSL_FLAG(absl::Duration, nfd_expiry, Defaults().nfd_expiry,
          "The feature file's NFD expiry window (# +expiry-time= now + this, at least 1m): the labels vanish "
          "this long after devplaced stops rewriting the file");
ABSL_FLAG(absl::Duration, refresh_min_interval, Defaults().refresh_min_interval,
          "RefreshInventory starts at most one probe per this interval (calls arriving while one is queued "
          "share it); others get RESOURCE_EXHAUSTED with the time to wait. 0 = no limit. RefreshInventory is "
          "allowed only to root, the daemon's user and --socket_group members over the unix socket, and to "
          "mTLS-authenticated clients");
ABSL_FLAG(std::string, lease_state_file, Defaults().lease_state_file,
          "The lease table's file: every PickDevices lease is written there (mode 0600, atomic replace, fsync) "
          "before the pick is answered and read back at start, so a restart, kill -9 or a package upgrade loses no "
          "live lease (each is checked again: its process still running with the same start time, its time to live "
          "not past; the rest are dropped with a log line). A file that is corrupt, not owned by the daemon's user "
          "or writable by others is a warning and an empty table; a pick whose lease cannot be written (a full disk) "
          "is refused (FAILED_PRECONDITION) and leases nothing. An absolute path in an existing directory (not a "
          "link) owned by root or the daemon's user and writable by no one else, sticky or not (else exit 2); "
          "\"none\": in memory only. Default: leases.state beside the first unix socket (/run/devplace/"
          "leases.state as root; in devplaced-leases/, made mode 0700, when others may write the socket's "
          "directory), in memory only without a unix listener. health.state beside it keeps the devices' FAULT and "
          "LOST health readings across a restart (docs/PROBE.md)");
ABSL_FLAG(int, max_leased_devices_per_user, Defaults().max_leased_devices_per_user,
          "Most devices one user (uid; root is not capped) holds leased at once, all its leases together; a pick "
          "past it is RESOURCE_EXHAUSTED. 0 = no cap, the default: on a workstation with one user, or one job per "
          "host, a single job must be able to lease every device (a --count=8 pick on an 8-GPU host); a host "
          "shared by several users sets it, e.g. to the device count divided by the users who share it. Users "
          "seen only over TCP without a uid are not capped");
ABSL_FLAG(int, max_waiting_picks_per_user, Defaults().max_waiting_picks_per_user,
          "Most picks one user (uid over the unix socket, else the client's address) has waiting (--wait) at "
          "once (1..1024); past it a pick is RESOURCE_EXHAUSTED at once");
ABSL_FLAG(absl::Duration, waiter_restart_grace, Defaults().waiter_restart_grace,
          "After a restart, how long the picks that were waiting (--wait) keep their places for their callers to "
          "come back (the clients ask again, at most every 2 s, with the waiter id they were sent); no later pick is "
          "served meanwhile. 1s..10m, never past a waiter's own deadline");
ABSL_FLAG(int, max_queued_calls_per_peer, Defaults().max_queued_calls_per_peer,
          "Most ResolveDevice and PickDevices calls one peer (a local client's uid, a remote client's address) has "
          "queued or running at once on the daemon's workers, which take each peer's calls in turn so that one peer's burst "
          "never holds another's call behind it (1..12800; answers from the cache do not count); past it a call is "
          "RESOURCE_EXHAUSTED at once, before its request is parsed");
ABSL_FLAG(int64_t, max_waiting_pick_bytes_per_user, Defaults().max_waiting_pick_bytes_per_user,
          "Most bytes one user's waiting picks keep together (what each needs to be tried again: the job's "
          "environment entries the rules read, its device nodes and DRA allocation), 64 KiB..256 MiB; past it a "
          "pick is RESOURCE_EXHAUSTED at once");

namespace devplace::daemon {
namespace {

constexpr char kUsage[] =
    "the devplace daemon. Probes this host's accelerators and answers ResolveDevice, GetInventory,\n"
    "WatchInventory, ListBackends, RefreshInventory, and for shared hosts PickDevices, LeaseRelease and\n"
    "LeaseKeepAlive, over gRPC (package devplace.v1, reflection on, grpc.health.v1 health service). A config file is read only when given: --flagfile=FILE (one\n"
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
    "over the unix socket, or mTLS clients; rate-limited by --refresh_min_interval.\n"
    "Flag names take - or _ alike (--lease-state-file is --lease_state_file), in a --flagfile too.\n\n"
    "Usage: devplaced [--listen=unix:/path,127.0.0.1:7465] [--host_root=/] [--refresh_interval=60s] ...";

}  // namespace

void SetUpFlagUsage() {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.normalize_filename = [](absl::string_view file) {  // "devplaced.cc", not the build path
    // Where these flags were defined first; the vendor-library flags are devplaced's own too.
    if (file == __FILE__ || file == VendorLibraryFlagsFile()) return std::string("devplaced.cc");
    const size_t slash = file.rfind('/');
    return std::string(slash == absl::string_view::npos ? file : file.substr(slash + 1));
  };
  // The version, then the newest library releases whose rules this daemon has (V-SKEW: a job's newer
  // release gets these, with a warning).
  usage_config.version_string = [] {
    return absl::StrCat("devplaced ", kVersion, " (newest rules: ", placement::NewestRules(), ")\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
}

std::optional<std::string> HelpText(const std::vector<std::string>& args) {
  // devplaced's own flags: those of the file named devplaced.cc (SetUpFlagUsage's names).
  return FlagHelp(args, "devplaced", "devplaced.cc");
}

namespace {

// "; did you mean --X?" for an unknown flag `name` near a flag devplaced accepts (the CLI's rule,
// flag_errors.h), or "".
std::string DaemonFlagSuggestion(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) names.emplace_back(flag_name);
  std::sort(names.begin(), names.end());  // ties go to the first name in order, whatever the map's order
  return DidYouMeanFlag(placement::ClosestName(name, names, 2));
}

std::optional<std::string> CheckFlagsIn(const std::vector<std::string>& args, bool from_file, int depth,
                                        std::vector<std::string>* for_absl) {
  static const std::set<std::string> kAbslOwn = {"help", "helpfull", "helpshort", "helppackage", "version",
                                                  "only_check_args", "helpon", "helpmatch", "fromenv",
                                                  "tryfromenv", "undefok"};
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      for (; i < args.size(); ++i) for_absl->push_back(args[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {  // positional: reported after parsing
      for_absl->emplace_back(arg);
      continue;
    }
    auto [name, value, typed] = SplitFlagArgument(arg);
    // absl knows only the underscore spelling: hand it the name as checked here.
    const std::string spelled = absl::StrCat("--", name, value ? absl::StrCat("=", *value) : "");
    if (name == "version" && value) return absl::StrCat("flag ", typed, " takes no value (", typed, "=", *value, ")");
    if (kAbslOwn.count(name) > 0) {
      for_absl->push_back(spelled);
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && !value) {  // --noflag for a bool
      const absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) {
        for_absl->push_back(spelled);
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::StrCat("unknown flag ", typed, from_file ? " in a --flagfile" : "", DaemonFlagSuggestion(name));
    }
    if (!value) {
      if (flag->IsOfType<bool>()) {
        for_absl->push_back(spelled);
        continue;
      }
      if (from_file || i + 1 >= args.size()) return absl::StrCat("flag --", name, " needs a value (--", name, "=VALUE)");
      value = args[++i];
    }
    if (name == "flagfile") {
      if (depth > 8) return "--flagfile: files include each other more than 8 deep";
      for (absl::string_view file : absl::StrSplit(*value, ',', absl::SkipEmpty())) {
        // A regular file of at most 1 MiB (a FIFO would hang the start, a device node run its driver).
        const absl::StatusOr<std::string> text = ReadHostFile(file);
        if (!text.ok()) {
          return absl::StrCat("--flagfile=", file, ": cannot read it (", text.status().message(),
                              "); a flag file holds one --flag=value per line");
        }
        std::vector<std::string> lines;
        for (absl::string_view line : absl::StrSplit(*text, '\n')) {
          absl::string_view l = absl::StripAsciiWhitespace(line);
          if (!l.empty() && l[0] != '#') lines.emplace_back(l);
        }
        // The file's flags take its place, so that absl never reads a file spelled with dashes.
        if (std::optional<std::string> error = CheckFlagsIn(lines, true, depth + 1, for_absl)) {
          return absl::StrCat(*error, " (in --flagfile=", file, ")");
        }
      }
      continue;
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) return BadFlagValue(*flag, *value, error);
    for_absl->push_back(absl::StrCat("--", name, "=", *value));
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> CheckFlags(const std::vector<std::string>& args, std::vector<std::string>* for_absl) {
  std::vector<std::string> ignored;
  return CheckFlagsIn(args, false, 0, for_absl != nullptr ? for_absl : &ignored);
}

absl::StatusOr<ValidConfig> ConfigFromFlags() {
  DaemonConfig c;
  c.listen = absl::GetFlag(FLAGS_listen);
  c.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_client_ca)};
  c.allow_insecure_remote = absl::GetFlag(FLAGS_allow_insecure_remote);
  c.socket_mode = absl::GetFlag(FLAGS_socket_mode);
  c.socket_group = absl::GetFlag(FLAGS_socket_group);
  c.max_receive_bytes = absl::GetFlag(FLAGS_max_receive_bytes);
  c.memory_quota_bytes = absl::GetFlag(FLAGS_memory_quota_bytes);
  c.max_watches = absl::GetFlag(FLAGS_max_watches);
  c.max_watches_per_peer = absl::GetFlag(FLAGS_max_watches_per_peer);
  c.max_connections = absl::GetFlag(FLAGS_max_connections);
  c.max_connections_per_peer = absl::GetFlag(FLAGS_max_connections_per_peer);
  c.max_connection_rate_per_peer = absl::GetFlag(FLAGS_max_connection_rate_per_peer);
  c.handshake_timeout = absl::GetFlag(FLAGS_handshake_timeout);
  c.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  c.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  c.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  c.liveness_interval = absl::GetFlag(FLAGS_liveness_interval);
  c.liveness_failures = absl::GetFlag(FLAGS_liveness_failures);
  c.host_root = absl::GetFlag(FLAGS_host_root);
  c.probe_command = absl::GetFlag(FLAGS_probe_command);
  c.torch_probe_command = absl::GetFlag(FLAGS_torch_probe_command);
  c.probe_timeout = absl::GetFlag(FLAGS_probe_timeout);
  c.vendor_libraries = VendorLibraryPathsFromFlags();
  c.refresh_interval = absl::GetFlag(FLAGS_refresh_interval);
  c.usage_interval = absl::GetFlag(FLAGS_usage_interval);
  c.refresh_min_interval = absl::GetFlag(FLAGS_refresh_min_interval);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.metrics_allow_remote = absl::GetFlag(FLAGS_metrics_allow_remote);
  c.log_level = absl::GetFlag(FLAGS_log_level);
  c.log_format = absl::GetFlag(FLAGS_log_format);
  c.nfd_features_file = absl::GetFlag(FLAGS_nfd_features_file);
  c.nfd_expiry = absl::GetFlag(FLAGS_nfd_expiry);
  c.lease_state_file = absl::GetFlag(FLAGS_lease_state_file);
  c.max_leased_devices_per_user = absl::GetFlag(FLAGS_max_leased_devices_per_user);
  c.max_waiting_picks_per_user = absl::GetFlag(FLAGS_max_waiting_picks_per_user);
  c.waiter_restart_grace = absl::GetFlag(FLAGS_waiter_restart_grace);
  c.max_queued_calls_per_peer = absl::GetFlag(FLAGS_max_queued_calls_per_peer);
  c.max_waiting_pick_bytes_per_user = absl::GetFlag(FLAGS_max_waiting_pick_bytes_per_user);
  return ValidateConfig(c);
}

}  // namespace devplace::daemon
