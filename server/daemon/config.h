// devplaced's settings as one plain struct, and the one check that turns them into what the
// daemon runs with.
//
// Contract: DaemonConfig holds every setting as its --flag gives it (server/daemon/flags.cc fills
// it from the flags; a test may fill it directly); a default-constructed DaemonConfig holds the
// flags' defaults. ValidateConfig checks every setting, in the order devplaced always has, and
// returns the first problem as INVALID_ARGUMENT whose message is the one line devplaced prints as
// `devplaced: <message> (see --help)` before it exits 2. It starts nothing (no thread, no socket,
// no child); it only reads: the TLS files, --host_root, the probe executables,
// --nfd_features_file's directory, the group database, this binary's location, PATH and
// XDG_RUNTIME_DIR, and the effective uid (for the default socket path).
#ifndef DEVPLACE_SERVER_DAEMON_CONFIG_H_
#define DEVPLACE_SERVER_DAEMON_CONFIG_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/common/vendor_libraries.h"
#include "server/logging/logging.h"
#include "server/service/tls.h"
#include "spdlog/common.h"

namespace devplace::daemon {

// --metrics_listen's default. Only this address may be taken by another process: the daemon then
// runs without metrics (a warning); any other address that cannot be bound is fatal (exit 1).
inline constexpr char kDefaultMetricsListen[] = "127.0.0.1:9465";

struct DaemonConfig {
  // ---- listeners ----
  // Comma-separated listen addresses: unix:/absolute/path.sock, host:port (plaintext) and/or
  // tls:host:port; host is a name, an IPv4 address or [IPv6], port 0..65535 (0: a free port).
  // Empty: DefaultListen().
  std::string listen;
  // --tls_cert, --tls_key, --tls_client_ca: PEM files of the tls: listeners; set only with one.
  service::TlsFiles tls;
  // Allow a plaintext host:port listener on a non-loopback address.
  bool allow_insecure_remote = false;
  // Permission bits of unix-socket listeners: octal text, 0..0777. 0666: every local user may
  // connect (each call checks its caller: RefreshInventory and others' pids and lease ids are for
  // root, the daemon's user and the socket group), so every user can hold a process lease.
  std::string socket_mode = "0666";
  // Group of unix-socket listeners: a group name or a numeric gid; empty: the daemon's own group.
  std::string socket_group;
  // Largest request message accepted, in bytes: kMinReceiveBytes..kMaxReceiveBytes.
  int max_receive_bytes = 1 << 20;
  // gRPC resource quota in bytes: kMinMemoryQuota..kMaxMemoryQuota.
  int64_t memory_quota_bytes = int64_t{256} << 20;
  // Most connections open at once, all ordinary peers together (kept below the descriptor limit
  // at every accept, followed when root changes it: soft RLIMIT_NOFILE - kConnectionReserve -
  // kDescriptorHeadroom) and per peer (a client's uid on a unix socket or over TCP from this host,
  // else the client's IP address): 1..1048576. Past either a new connection is closed at accept.
  // A TLS connection counts from accept, its handshake included.
  int max_connections = 4096;
  int max_connections_per_peer = 128;
  // New connections a peer may open per second, in bursts of up to a second's worth or its cap
  // (max_connections_per_peer), whichever is more: 0 (no limit)..1048576. Past it a new connection is closed at accept.
  int max_connection_rate_per_peer = 64;
  // How long a new connection may take to finish its TLS handshake (and, on any listener, to send
  // the HTTP/2 preface) before it is closed: 1s..120s.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Most WatchInventory streams open at once, in all and per peer: >= 0, 0 = no limit.
  int max_watches = 1024;
  int max_watches_per_peer = 0;
  // Silence before the daemon pings a connection: 1s..2h; how long it waits for the answer:
  // 1s..10m.
  absl::Duration keepalive_time = absl::Seconds(60);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Pause after SIGTERM/SIGINT (or Stop()) for calls in flight to finish: >= 0.
  absl::Duration shutdown_grace = absl::Seconds(2);
  // Time between self-checks of every listener: >= 0, 0 = never; consecutive failed checks that
  // make a listener dead (the daemon then exits 1): 1..100.
  absl::Duration liveness_interval = absl::Seconds(5);
  int liveness_failures = 3;

  // ---- probing ----
  // Directory holding the host's /sys, /proc and /dev; must be a directory.
  std::string host_root = "/";
  // The probe executable (a path, or a name looked up on PATH). Empty: devplace-probe next to
  // this binary, in ../lib/devplace/, else on PATH.
  std::string probe_command;
  // The libtorch probe; empty: devplace-torch-probe next to this binary or in ../lib/devplace/
  // (none when there is none); "none": off.
  std::string torch_probe_command;
  // Deadline of one probe child: >= 200ms (the child gets 60% of it for vendor libraries).
  absl::Duration probe_timeout = absl::Seconds(10);
  // The vendor libraries the probe child dlopens, one per registered library (--<name>_library,
  // server/common/vendor_libraries.h): file names or paths; empty: that one is not read.
  VendorLibraryPaths vendor_libraries = VendorLibraryPaths::Defaults();
  // Background re-probe period: >= 0, 0 = only at start, on SIGHUP and on RefreshInventory.
  absl::Duration refresh_interval = absl::Seconds(60);
  // Usage re-read period (devplace-probe --usage_only): 0 (only with full probes) or >= 100ms.
  absl::Duration usage_interval = absl::Seconds(2);
  // RefreshInventory starts at most one probe per this interval: >= 0, 0 = no limit.
  absl::Duration refresh_min_interval = absl::Seconds(1);

  // ---- shared hosts (PickDevices and leases) ----
  // The lease table's file (kept durably so that a restart, a crash or an upgrade loses no live
  // lease): an absolute path whose directory exists and is safe (server/common/safe_directory.h);
  // empty: kLeaseStateFileName in the first unix-socket listener's directory (the runtime
  // directory, /run/devplace as root), in memory only without a unix listener; "none": in memory only.
  std::string lease_state_file;
  // Most devices one user (uid, root excepted) holds leased at once: 0 (no cap)..1024.
  int max_leased_devices_per_user = 0;
  // Most picks waiting at once per user (a uid over the unix socket, else the peer's address),
  // and the most bytes their kept requests take together: 1..1024 and 64 KiB..256 MiB.
  int max_waiting_picks_per_user = 16;
  int64_t max_waiting_pick_bytes_per_user = int64_t{16} << 20;
  // After a restart, how long a waiting pick's place is kept for it (ServiceOptions::waiter_restart_grace):
  // 1 s..10 min.
  absl::Duration waiter_restart_grace = absl::Seconds(20);
  // Most ResolveDevice calls (not answered from the cache) one peer has queued or running at once on
  // the service's workers, which serve peers in turn (service::FairQueue): 1..12800 (the most one
  // peer can send at once: 128 connections x 100 streams).
  int max_queued_calls_per_peer = 256;

  // ---- metrics, logs, node labels ----
  // Prometheus /metrics address: IPV4:PORT or [IPV6]:PORT (port 0: a free one), loopback unless
  // metrics_allow_remote; empty: no metrics.
  std::string metrics_listen = kDefaultMetricsListen;
  bool metrics_allow_remote = false;
  // debug, info, warn or error.
  std::string log_level = "info";
  // text or json.
  std::string log_format = "text";
  // NFD feature file to keep current: a file name in an existing directory; empty: none.
  std::string nfd_features_file;
  // Its expiry window: >= 1m.
  absl::Duration nfd_expiry = absl::Minutes(10);
};

// --max_receive_bytes: the largest legitimate request (256 env entries of 4 KiB) fits under 2 MiB;
// below 4 KiB even a plain ResolveDevice request may not fit.
inline constexpr int kMinReceiveBytes = 4096;
inline constexpr int kMaxReceiveBytes = 64 << 20;
inline constexpr int64_t kMinMemoryQuota = int64_t{16} << 20;
// Connections beyond --max_connections that only the daemon's own liveness checks, root and the
// daemon's own user may use (health probes get in during a flood); and the descriptors kept for
// everything else the daemon opens (gRPC's own, probe children's pipes, /metrics, files).
inline constexpr int kConnectionReserve = 32;
inline constexpr int kDescriptorHeadroom = 128;
// Connections from this host whose client already closed when they were looked up (no owner): one
// peer, never reserved, capped at this many open at once.
inline constexpr int kMaxUnownedConnections = 8;
inline constexpr int kMaxConnectionsLimit = 1 << 20;
inline constexpr int64_t kMaxMemoryQuota = int64_t{16} << 30;

// A DaemonConfig that ValidateConfig accepted, with what it resolved on this host. The Daemon
// runs on it; nothing in it needs checking again.
struct ValidConfig {
  DaemonConfig config;  // as given
  spdlog::level::level_enum log_level = spdlog::level::info;
  logging::Format log_format = logging::Format::kText;
  std::vector<std::string> listen;           // config.listen split, or DefaultListen()
  std::vector<std::string> insecure_remote;  // the plaintext non-loopback ones among them
  bool any_tls = false;                      // whether one of them is tls:
  // The TLS files as ValidateConfig read and checked them (set when any_tls): the daemon's
  // credentials start from these, so the files are read once at start (again only on SIGHUP).
  std::optional<service::TlsMaterial> tls_material;
  mode_t socket_mode = 0666;
  gid_t socket_gid = static_cast<gid_t>(-1);  // -1: the daemon's own group
  std::string probe_command;                  // the executable to run
  std::string torch_probe_command;            // empty: none
  // Why torch_probe_command is empty, for Inventory.torch.error: turned off with "none", or no
  // devplace-torch-probe found where the default looks.
  std::string torch_probe_off;
  std::string lease_state_file;               // empty: leases in memory only
  // Set when lease_state_file is the default in kLeaseStateDirectoryName inside a socket
  // directory others may write: the daemon makes that directory (mode 0700) at start.
  bool create_lease_state_directory = false;
};

// The lease table file's name in the runtime directory when --lease_state_file is empty.
inline constexpr char kLeaseStateFileName[] = "leases.state";
// The directory of its own that holds it instead when the socket's directory is writable by
// others (e.g. a sticky 1777 one, where another user could create leases.state first).
inline constexpr char kLeaseStateDirectoryName[] = "devplaced-leases";

// Checks `config` (see the top of this file); the first problem is INVALID_ARGUMENT.
absl::StatusOr<ValidConfig> ValidateConfig(const DaemonConfig& config);

// The listen addresses when --listen is empty: unix:/run/devplace/devplace.sock as root, else
// unix:$XDG_RUNTIME_DIR/devplace.sock (unix:/tmp/devplace-<uid>/devplace.sock without it); and
// 127.0.0.1:7465.
std::vector<std::string> DefaultListen();

}  // namespace devplace::daemon

#endif  // DEVPLACE_SERVER_DAEMON_CONFIG_H_
