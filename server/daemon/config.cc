// ValidateConfig: every check of devplaced's settings, in the order the daemon has always made
// them, with its historic one-line messages (see config.h).
#include "server/daemon/config.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/common/address.h"
#include "server/common/atomic_file.h"
#include "server/export/nfd_writer.h"
#include "server/metrics/exposer.h"
#include "server/service/lease_file.h"

namespace devplace::daemon {
namespace {

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

// `name` next to this binary, in the build tree's `subdir` beside it, or in the installed
// `../lib/devplace/` (sbin/devplaced, lib/devplace/devplace-probe); empty when none exists.
std::string SiblingBinary(const std::string& name, const std::string& subdir) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path dir = self.parent_path();
  for (const std::filesystem::path& candidate :
       {dir / name, dir / subdir / name, dir.parent_path() / "lib" / "devplace" / name}) {
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
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

// --listen: the addresses, each well-formed, a plaintext remote one only when allowed.
absl::Status CheckListen(const DaemonConfig& config, ValidConfig& out) {
  out.listen = DefaultListen();
  if (!config.listen.empty()) out.listen = absl::StrSplit(config.listen, ',', absl::SkipEmpty());
  if (out.listen.empty()) return Bad("--listen names no address; accepted: unix:/path/to.sock and/or host:port");
  for (const std::string& address : out.listen) {
    const bool tls = absl::StartsWith(address, "tls:");
    if (!ParseAddress(tls ? address.substr(4) : address, AddressUse::kListen) || (tls && absl::StartsWith(address, "tls:unix:"))) {
      return Bad(absl::StrCat("--listen: '", address,
                              "' is not unix:/absolute/path.sock, host:port or tls:host:port (a name, IPv4 or [IPv6] "
                              "address and a port 0..65535, no scheme)"));
    }
    out.any_tls |= tls;
    if (!tls && !absl::StartsWith(address, "unix:") && !service::IsLoopbackListenAddress(address)) {
      if (!config.allow_insecure_remote) {
        return Bad(absl::StrCat("--listen: '", address, "' is plaintext and reachable from other hosts; use tls:",
                                address, " with --tls_cert, --tls_key and --tls_client_ca, a loopback address, "
                                "or --allow_insecure_remote"));
      }
      out.insecure_remote.push_back(address);
    }
  }
  return absl::OkStatus();
}

// --socket_mode and --socket_group.
absl::Status CheckSocketOwnership(const DaemonConfig& config, ValidConfig& out) {
  int socket_mode = 0;
  if (!absl::numbers_internal::safe_strto32_base(config.socket_mode, &socket_mode, 8) || socket_mode < 0 ||
      socket_mode > 0777) {
    return Bad(absl::StrCat("--socket_mode='", config.socket_mode, "' is not an octal permission (e.g. 0660)"));
  }
  out.socket_mode = static_cast<mode_t>(socket_mode);
  if (const std::string& group = config.socket_group; !group.empty()) {
    const struct group* g = getgrnam(group.c_str());
    unsigned gid = 0;
    if (g != nullptr) {
      out.socket_gid = g->gr_gid;
    } else if (absl::SimpleAtoi(group, &gid)) {
      out.socket_gid = static_cast<gid_t>(gid);
    } else {
      return Bad(absl::StrCat("--socket_group='", group, "' is neither a group name nor a gid"));
    }
  }
  return absl::OkStatus();
}

// The durations and counts, each within its range.
absl::Status CheckLimits(const DaemonConfig& config) {
  if (config.probe_timeout < absl::Milliseconds(200)) {
    return Bad("--probe_timeout must be at least 200ms (e.g. 10s): the probe child gets 60% of it for vendor libraries");
  }
  if (config.refresh_interval < absl::ZeroDuration()) return Bad("--refresh_interval must be 0 (off) or positive, e.g. 60s");
  if (config.usage_interval < absl::ZeroDuration() ||
      (config.usage_interval > absl::ZeroDuration() && config.usage_interval < absl::Milliseconds(100))) {
    return Bad("--usage_interval must be 0 (only with full probes) or at least 100ms, e.g. 2s");
  }
  if (config.shutdown_grace < absl::ZeroDuration()) return Bad("--shutdown_grace must not be negative");
  if (config.refresh_min_interval < absl::ZeroDuration()) {
    return Bad("--refresh_min_interval must be 0 (no limit) or positive, e.g. 1s");
  }
  if (config.max_receive_bytes < kMinReceiveBytes || config.max_receive_bytes > kMaxReceiveBytes) {
    return Bad(absl::StrCat("--max_receive_bytes=", config.max_receive_bytes, " is out of range; accepted: ",
                            kMinReceiveBytes, "..", kMaxReceiveBytes, " bytes"));
  }
  if (config.memory_quota_bytes < kMinMemoryQuota || config.memory_quota_bytes > kMaxMemoryQuota) {
    return Bad(absl::StrCat("--memory_quota_bytes=", config.memory_quota_bytes, " is out of range; accepted: ",
                            kMinMemoryQuota, "..", kMaxMemoryQuota, " bytes"));
  }
  if (config.max_connections < 1 || config.max_connections > kMaxConnectionsLimit) {
    return Bad(absl::StrCat("--max_connections=", config.max_connections, " is out of range; accepted: 1..",
                            kMaxConnectionsLimit));
  }
  if (config.max_connections_per_peer < 1 || config.max_connections_per_peer > kMaxConnectionsLimit) {
    return Bad(absl::StrCat("--max_connections_per_peer=", config.max_connections_per_peer,
                            " is out of range; accepted: 1..", kMaxConnectionsLimit));
  }
  if (config.max_connection_rate_per_peer < 0 || config.max_connection_rate_per_peer > kMaxConnectionsLimit) {
    return Bad(absl::StrCat("--max_connection_rate_per_peer=", config.max_connection_rate_per_peer,
                            " is out of range; accepted: 0 (no limit)..", kMaxConnectionsLimit, " per second"));
  }
  if (config.handshake_timeout < absl::Seconds(1) || config.handshake_timeout > absl::Seconds(120)) {
    return Bad("--handshake_timeout must be within 1s..120s (e.g. 10s)");
  }
  if (config.max_watches < 0) return Bad("--max_watches must be 0 (no limit) or positive");
  if (config.max_watches_per_peer < 0) return Bad("--max_watches_per_peer must be 0 (no limit) or positive");
  if (config.keepalive_time < absl::Seconds(1) || config.keepalive_time > absl::Hours(2)) {
    return Bad("--keepalive_time must be within 1s..2h (e.g. 60s)");
  }
  if (config.keepalive_timeout < absl::Seconds(1) || config.keepalive_timeout > absl::Minutes(10)) {
    return Bad("--keepalive_timeout must be within 1s..10m (e.g. 20s)");
  }
  if (config.liveness_interval < absl::ZeroDuration()) {
    return Bad("--liveness_interval must be 0 (off) or positive, e.g. 5s");
  }
  if (config.liveness_failures < 1 || config.liveness_failures > 100) {
    return Bad("--liveness_failures must be within 1..100");
  }
  return absl::OkStatus();
}

// --host_root, --probe_command and --torch_probe_command.
absl::Status CheckProbes(const DaemonConfig& config, ValidConfig& out) {
  // The non-throwing overloads: a name too long or a directory on the way that cannot be searched
  // is an error line, not an exception.
  std::error_code ec;
  if (!std::filesystem::is_directory(config.host_root, ec)) {
    return Bad(absl::StrCat("--host_root=", config.host_root, " is not a readable directory",
                            ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory
                                ? absl::StrCat(" (", ec.message(), ")")
                                : ""));
  }
  std::string probe = config.probe_command;
  if (probe.empty()) probe = SiblingBinary("devplace-probe", "probe");
  if (probe.empty()) probe = "devplace-probe";  // from PATH
  if (!Executable(probe)) return Bad(absl::StrCat("--probe_command: '", probe, "' is not an executable"));
  std::string torch_probe = config.torch_probe_command;
  if (torch_probe.empty()) {
    torch_probe = SiblingBinary("devplace-torch-probe", "torch");
    if (torch_probe.empty()) {
      out.torch_probe_off = "devplace-torch-probe is not installed: none next to devplaced or in ../lib/devplace/ "
                            "(--torch_probe_command=PATH names one)";
    }
  }
  if (torch_probe == "none") {
    torch_probe.clear();
    out.torch_probe_off = "devplace-torch-probe is turned off (--torch_probe_command=none)";
  }
  if (!torch_probe.empty() && !Executable(torch_probe)) {
    return Bad(absl::StrCat("--torch_probe_command: '", torch_probe, "' is not an executable (\"none\" disables it)"));
  }
  out.probe_command = probe;
  out.torch_probe_command = torch_probe;
  return absl::OkStatus();
}

// --nfd_features_file and --nfd_expiry.
absl::Status CheckNfd(const DaemonConfig& config) {
  if (const std::string& nfd_file = config.nfd_features_file; !nfd_file.empty()) {
    const std::filesystem::path nfd_path(nfd_file);
    const std::filesystem::path nfd_dir = nfd_path.has_parent_path() ? nfd_path.parent_path() : ".";
    std::error_code ec;
    if (!nfd_path.has_filename() || !std::filesystem::is_directory(nfd_dir, ec)) {
      return Bad(absl::StrCat("--nfd_features_file=", nfd_file,
                              ": needs a file name in an existing directory (e.g. NFD's features.d)"));
    }
    if (std::filesystem::is_directory(nfd_path, ec)) {
      return Bad(absl::StrCat("--nfd_features_file=", nfd_file, ": is a directory; name a file inside it"));
    }
    // The directory must be one no other user controls (the daemon, often root, writes there).
    absl::StatusOr<int> dir_fd = labels::OpenFeatureDirectory(labels::FeatureDirectory(nfd_file));
    if (!dir_fd.ok()) return Bad(absl::StrCat("--nfd_features_file=", nfd_file, ": ", dir_fd.status().message()));
    close(*dir_fd);
  }
  if (config.nfd_expiry < absl::Minutes(1)) return Bad("--nfd_expiry must be at least 1m (e.g. 10m)");
  return absl::OkStatus();
}

// --lease_state_file, --max_leased_devices_per_user and the waiting picks' bounds.
absl::Status CheckLeases(const DaemonConfig& config, ValidConfig& out) {
  const std::string& file = config.lease_state_file;
  if (file == "none") {
    out.lease_state_file.clear();
  } else if (file.empty()) {
    // Beside the first unix socket; in a directory others may write (a sticky one, which the
    // socket's rule allows), in a directory of the daemon's own inside it, made at start.
    out.lease_state_file.clear();
    for (const std::string& address : out.listen) {
      if (!absl::StartsWith(address, "unix:")) continue;
      const std::string dir = DirectoryOf(address.substr(5));
      struct stat st {};
      out.create_lease_state_directory = stat(dir.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
      out.lease_state_file = out.create_lease_state_directory
                                 ? absl::StrCat(dir, "/", kLeaseStateDirectoryName, "/", kLeaseStateFileName)
                                 : absl::StrCat(dir, "/", kLeaseStateFileName);
      break;
    }
  } else {
    const std::filesystem::path path(file);
    std::error_code ec;
    if (!path.is_absolute() || !path.has_filename() || !std::filesystem::is_directory(path.parent_path(), ec)) {
      return Bad(absl::StrCat("--lease_state_file=", file,
                              ": needs an absolute file name in an existing directory (e.g. /var/lib/devplace/"
                              "leases.state), or none"));
    }
    if (std::filesystem::is_directory(path, ec)) {
      return Bad(absl::StrCat("--lease_state_file=", file, ": is a directory; name a file inside it"));
    }
    struct stat st {};
    const std::string dir = DirectoryOf(file);
    if (lstat(dir.c_str(), &st) != 0) return Bad(absl::StrCat("--lease_state_file=", file, ": cannot stat ", dir));
    if (S_ISLNK(st.st_mode)) {
      return Bad(absl::StrCat("--lease_state_file=", file, ": directory ", dir,
                              " is a symbolic link: name the directory itself (a link could be re-pointed)"));
    }
    if (absl::Status safe = service::CheckLeaseDirectory(st, dir); !safe.ok()) {
      return Bad(absl::StrCat("--lease_state_file=", file, ": ", safe.message(),
                              "; name a file in a directory of devplaced's own (e.g. /var/lib/devplace/leases.state)"));
    }
    out.lease_state_file = file;
  }
  if (config.max_leased_devices_per_user < 0 || config.max_leased_devices_per_user > 1024) {
    return Bad("--max_leased_devices_per_user must be within 0 (no cap)..1024");
  }
  if (config.waiter_restart_grace < absl::Seconds(1) || config.waiter_restart_grace > absl::Minutes(10)) {
    return Bad("--waiter_restart_grace must be within 1s..10m");
  }
  if (config.max_waiting_picks_per_user < 1 || config.max_waiting_picks_per_user > 1024) {
    return Bad("--max_waiting_picks_per_user must be within 1..1024");
  }
  if (config.max_waiting_pick_bytes_per_user < (int64_t{64} << 10) ||
      config.max_waiting_pick_bytes_per_user > (int64_t{256} << 20)) {
    return Bad("--max_waiting_pick_bytes_per_user must be within 65536 (64 KiB)..268435456 (256 MiB)");
  }
  if (config.max_queued_calls_per_peer < 1 || config.max_queued_calls_per_peer > 12800) {
    return Bad(absl::StrCat("--max_queued_calls_per_peer=", config.max_queued_calls_per_peer,
                            " is out of range; accepted: 1..12800"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> DefaultListen() {
  std::string unix_path = "/run/devplace/devplace.sock";
  if (geteuid() != 0) {
    const char* xdg = getenv("XDG_RUNTIME_DIR");
    unix_path = xdg != nullptr && *xdg != '\0' ? absl::StrCat(xdg, "/devplace.sock")
                                               : absl::StrCat("/tmp/devplace-", geteuid(), "/devplace.sock");
  }
  return {absl::StrCat("unix:", unix_path), "127.0.0.1:7465"};
}

absl::StatusOr<ValidConfig> ValidateConfig(const DaemonConfig& config) {
  ValidConfig out;
  out.config = config;
  const absl::StatusOr<spdlog::level::level_enum> log_level = logging::ParseLevel(config.log_level);
  if (!log_level.ok()) return Bad(log_level.status().message());
  out.log_level = *log_level;
  const absl::StatusOr<logging::Format> log_format = logging::ParseFormat(config.log_format);
  if (!log_format.ok()) return Bad(log_format.status().message());
  out.log_format = *log_format;
  if (absl::Status s = metrics::CheckMetricsAddress(config.metrics_listen, config.metrics_allow_remote); !s.ok()) {
    return Bad(s.message());
  }
  if (absl::Status s = CheckListen(config, out); !s.ok()) return s;
  // The TLS files are read and checked here, once; the daemon builds its credentials from what was read.
  if (out.any_tls) {
    absl::StatusOr<service::TlsMaterial> m = service::LoadTlsMaterial(config.tls);
    if (!m.ok()) return Bad(m.status().message());
    out.tls_material = *std::move(m);
  } else if (!config.tls.cert.empty() || !config.tls.key.empty() || !config.tls.client_ca.empty()) {
    return Bad("--tls_cert/--tls_key/--tls_client_ca are set but no --listen address is tls:host:port");
  }
  if (absl::Status s = CheckSocketOwnership(config, out); !s.ok()) return s;
  if (absl::Status s = CheckLimits(config); !s.ok()) return s;
  if (absl::Status s = CheckProbes(config, out); !s.ok()) return s;
  if (absl::Status s = CheckNfd(config); !s.ok()) return s;
  if (absl::Status s = CheckLeases(config, out); !s.ok()) return s;
  return out;
}

}  // namespace devplace::daemon
