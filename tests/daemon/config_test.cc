// ValidateConfig (server/daemon/config.h) without a process: a good config and what it resolves
// to, then one bad setting at a time and the exact line devplaced prints for it (without the
// "devplaced: " prefix and " (see --help)" suffix), and which problem wins when there are several.
#include "server/daemon/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"

namespace devplace::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using devplace::testing::TempDir;

const char kHostRoot[] = DEVPLACE_FIXTURES_DIR "/hosts/nvidia-2x-h100";

// What a test daemon runs with: a unix socket in `dir` and 127.0.0.1:0, the built probe on a
// fixture host, no libtorch probe, no metrics.
DaemonConfig GoodConfig(const TempDir& dir) {
  DaemonConfig c;
  c.listen = "unix:" + dir.File("d.sock") + ",127.0.0.1:0";
  c.host_root = kHostRoot;
  c.probe_command = DEVPLACE_PROBE_BINARY;
  c.torch_probe_command = "none";
  c.metrics_listen = "";
  return c;
}

TEST(DaemonConfig, GoodConfigPassesAndResolves) {
  TempDir dir;
  const absl::StatusOr<ValidConfig> v = ValidateConfig(GoodConfig(dir));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->listen, ElementsAre("unix:" + dir.File("d.sock"), "127.0.0.1:0"));
  EXPECT_TRUE(v->insecure_remote.empty());
  EXPECT_FALSE(v->any_tls);
  EXPECT_EQ(v->socket_mode, 0666u);
  EXPECT_EQ(v->socket_gid, static_cast<gid_t>(-1));
  EXPECT_EQ(v->probe_command, DEVPLACE_PROBE_BINARY);
  EXPECT_EQ(v->torch_probe_command, "");
  EXPECT_EQ(v->log_level, spdlog::level::info);
  EXPECT_EQ(v->log_format, logging::Format::kText);
  EXPECT_EQ(v->config.host_root, kHostRoot);
  // The lease table beside the first unix socket, unless named or "none".
  EXPECT_EQ(v->lease_state_file, dir.File("leases.state"));
  DaemonConfig c = GoodConfig(dir);
  c.lease_state_file = "none";
  EXPECT_EQ(ValidateConfig(c)->lease_state_file, "");
  c.lease_state_file = dir.File("mine.state");
  EXPECT_EQ(ValidateConfig(c)->lease_state_file, dir.File("mine.state"));
  c.lease_state_file = "";
  c.listen = "127.0.0.1:0";  // no unix socket: in memory only
  EXPECT_EQ(ValidateConfig(c)->lease_state_file, "");
  EXPECT_FALSE(v->create_lease_state_directory);
}

// A socket directory every user may write (sticky, as the socket's rule allows): the default lease
// file goes to a directory of the daemon's own inside it, which the daemon makes at start.
TEST(ValidateConfig, TheDefaultLeaseFileInASocketDirectoryOthersMayWriteGetsADirectoryOfItsOwn) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  DaemonConfig c = GoodConfig(dir);
  const absl::StatusOr<ValidConfig> v = ValidateConfig(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->lease_state_file, dir.File("devplaced-leases/leases.state"));
  EXPECT_TRUE(v->create_lease_state_directory);
}

TEST(DaemonConfig, ResolvesTheOtherAcceptedForms) {
  TempDir dir;
  const devplace::testing::CertFiles ca = devplace::testing::MakeCa(dir.path(), "ca");
  const devplace::testing::CertFiles server =
      devplace::testing::MakeLeaf(dir.path(), ca, "server", "IP:127.0.0.1", /*client=*/false);
  DaemonConfig c = GoodConfig(dir);
  c.listen = "tls:127.0.0.1:0,0.0.0.0:7465,[::1]:0,localhost:7465";
  c.tls = {server.cert, server.key, ca.cert};
  c.allow_insecure_remote = true;
  c.socket_mode = "0600";
  c.socket_group = "0";  // a gid; "root" names the same group
  c.log_level = "debug";
  c.log_format = "json";
  c.metrics_listen = "[::1]:0";
  c.nfd_features_file = dir.File("features");
  c.refresh_interval = absl::ZeroDuration();
  c.liveness_interval = absl::ZeroDuration();
  const absl::StatusOr<ValidConfig> v = ValidateConfig(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->any_tls);
  EXPECT_THAT(v->insecure_remote, ElementsAre("0.0.0.0:7465"));
  EXPECT_EQ(v->socket_mode, 0600u);
  EXPECT_EQ(v->socket_gid, 0u);
  EXPECT_EQ(v->log_level, spdlog::level::debug);
  EXPECT_EQ(v->log_format, logging::Format::kJson);
  c.socket_group = "root";
  ASSERT_TRUE(ValidateConfig(c).ok());
  EXPECT_EQ(ValidateConfig(c)->socket_gid, 0u);
}

TEST(DaemonConfig, DefaultsAreTheDocumentedOnes) {
  const DaemonConfig c;
  EXPECT_EQ(c.listen, "");
  EXPECT_EQ(c.socket_mode, "0666");
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9465");
  EXPECT_EQ(c.max_receive_bytes, 1 << 20);
  EXPECT_EQ(c.memory_quota_bytes, int64_t{256} << 20);
  EXPECT_EQ(c.probe_timeout, absl::Seconds(10));
  EXPECT_EQ(c.refresh_interval, absl::Seconds(60));
  EXPECT_EQ(c.nfd_expiry, absl::Minutes(10));
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.max_connections, 4096);
  EXPECT_EQ(c.max_connections_per_peer, 128);
  EXPECT_EQ(c.max_queued_calls_per_peer, 256);
  EXPECT_EQ(c.max_connection_rate_per_peer, 64);
  EXPECT_EQ(c.handshake_timeout, absl::Seconds(10));
}

struct BadCase {
  std::string name;
  std::function<void(DaemonConfig&, const TempDir&)> change;
  std::string message;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }  // test names, not bytes

std::vector<BadCase> BadCases() {
  const std::string kNotAddress =
      "' is not unix:/absolute/path.sock, host:port or tls:host:port (a name, IPv4 or [IPv6] address and a port "
      "0..65535, no scheme)";
  auto listen = [](const std::string& value) { return [value](DaemonConfig& c, const TempDir&) { c.listen = value; }; };
  return {
      {"log_level", [](DaemonConfig& c, const TempDir&) { c.log_level = "loud"; },
       "--log_level='loud' is not one of debug, info, warn, error"},
      {"log_format", [](DaemonConfig& c, const TempDir&) { c.log_format = "xml"; },
       "--log_format='xml' is not one of text, json"},
      {"metrics_remote", [](DaemonConfig& c, const TempDir&) { c.metrics_listen = "0.0.0.0:9465"; },
       "--metrics_listen='0.0.0.0:9465' is not a loopback address; /metrics names this host's devices, so serving it "
       "beyond the host needs --metrics_allow_remote"},
      {"metrics_name", [](DaemonConfig& c, const TempDir&) { c.metrics_listen = "localhost:9465"; },
       "--metrics_listen='localhost:9465' is not an address; accepted: empty (off), IPV4:PORT or [IPV6]:PORT, e.g. "
       "127.0.0.1:9465 or [::1]:9465"},
      {"listen_none", listen(","), "--listen names no address; accepted: unix:/path/to.sock and/or host:port"},
      {"listen_relative", listen("unix:relative.sock"), "--listen: 'unix:relative.sock" + kNotAddress},
      {"listen_double_slash", listen("unix://double.sock"), "--listen: 'unix://double.sock" + kNotAddress},
      {"listen_no_port", listen("127.0.0.1"), "--listen: '127.0.0.1" + kNotAddress},
      {"listen_port_range", listen("127.0.0.1:65536"), "--listen: '127.0.0.1:65536" + kNotAddress},
      {"listen_port_negative", listen("127.0.0.1:-1"), "--listen: '127.0.0.1:-1" + kNotAddress},
      {"listen_scheme", listen("http://127.0.0.1:80"), "--listen: 'http://127.0.0.1:80" + kNotAddress},
      {"listen_tls_unix", listen("tls:unix:/run/t.sock"), "--listen: 'tls:unix:/run/t.sock" + kNotAddress},
      {"listen_bad_v6", listen("[zz]:80"), "--listen: '[zz]:80" + kNotAddress},
      {"listen_second_bad", listen("127.0.0.1:0,unix:x"), "--listen: 'unix:x" + kNotAddress},
      {"listen_remote", listen("0.0.0.0:7465"),
       "--listen: '0.0.0.0:7465' is plaintext and reachable from other hosts; use tls:0.0.0.0:7465 with --tls_cert, "
       "--tls_key and --tls_client_ca, a loopback address, or --allow_insecure_remote"},
      {"tls_cert_without_tls", [](DaemonConfig& c, const TempDir&) { c.tls.cert = "/etc/cert.pem"; },
       "--tls_cert/--tls_key/--tls_client_ca are set but no --listen address is tls:host:port"},
      {"tls_client_ca_without_tls", [](DaemonConfig& c, const TempDir&) { c.tls.client_ca = "/etc/ca.pem"; },
       "--tls_cert/--tls_key/--tls_client_ca are set but no --listen address is tls:host:port"},
      {"tls_missing_cert",
       [](DaemonConfig& c, const TempDir& d) {
         c.listen = "tls:127.0.0.1:0";
         c.tls = {d.File("missing.pem"), d.File("key.pem"), ""};
       },
       "--tls_cert=<dir>/missing.pem: cannot read: No such file or directory"},
      {"tls_empty_cert",
       [](DaemonConfig& c, const TempDir& d) {
         c.listen = "tls:127.0.0.1:0";
         c.tls = {d.Write("empty.pem", ""), d.File("key.pem"), ""};
       },
       "--tls_cert=<dir>/empty.pem: the file is empty; want PEM"},
      // A FIFO is never opened (opening it would wait for a writer), nor a file over the 1 MiB cap read.
      {"tls_fifo_cert",
       [](DaemonConfig& c, const TempDir& d) {
         c.listen = "tls:127.0.0.1:0";
         mkfifo(d.File("fifo.pem").c_str(), 0600);
         c.tls = {d.File("fifo.pem"), d.File("key.pem"), ""};
       },
       "--tls_cert=<dir>/fifo.pem: not a regular file"},
      {"tls_huge_cert",
       [](DaemonConfig& c, const TempDir& d) {
         c.listen = "tls:127.0.0.1:0";
         c.tls = {d.Write("huge.pem", std::string((1 << 20) + 1, 'A')), d.File("key.pem"), ""};
       },
       "--tls_cert=<dir>/huge.pem: not read: <dir>/huge.pem is larger than 1048576 bytes"},
      {"socket_mode_digit", [](DaemonConfig& c, const TempDir&) { c.socket_mode = "0999"; },
       "--socket_mode='0999' is not an octal permission (e.g. 0660)"},
      {"socket_mode_text", [](DaemonConfig& c, const TempDir&) { c.socket_mode = "rw"; },
       "--socket_mode='rw' is not an octal permission (e.g. 0660)"},
      {"socket_mode_sticky", [](DaemonConfig& c, const TempDir&) { c.socket_mode = "01777"; },
       "--socket_mode='01777' is not an octal permission (e.g. 0660)"},
      {"socket_group", [](DaemonConfig& c, const TempDir&) { c.socket_group = "no-such-group-xyz"; },
       "--socket_group='no-such-group-xyz' is neither a group name nor a gid"},
      {"probe_timeout", [](DaemonConfig& c, const TempDir&) { c.probe_timeout = absl::Milliseconds(199); },
       "--probe_timeout must be at least 200ms (e.g. 10s): the probe child gets 60% of it for vendor libraries"},
      {"refresh_interval", [](DaemonConfig& c, const TempDir&) { c.refresh_interval = absl::Seconds(-1); },
       "--refresh_interval must be 0 (off) or positive, e.g. 60s"},
      {"usage_interval", [](DaemonConfig& c, const TempDir&) { c.usage_interval = absl::Milliseconds(99); },
       "--usage_interval must be 0 (only with full probes) or at least 100ms, e.g. 2s"},
      {"shutdown_grace", [](DaemonConfig& c, const TempDir&) { c.shutdown_grace = absl::Seconds(-1); },
       "--shutdown_grace must not be negative"},
      {"refresh_min_interval", [](DaemonConfig& c, const TempDir&) { c.refresh_min_interval = absl::Seconds(-1); },
       "--refresh_min_interval must be 0 (no limit) or positive, e.g. 1s"},
      {"max_receive_low", [](DaemonConfig& c, const TempDir&) { c.max_receive_bytes = 4095; },
       "--max_receive_bytes=4095 is out of range; accepted: 4096..67108864 bytes"},
      {"max_receive_high", [](DaemonConfig& c, const TempDir&) { c.max_receive_bytes = (64 << 20) + 1; },
       "--max_receive_bytes=67108865 is out of range; accepted: 4096..67108864 bytes"},
      {"memory_quota_low", [](DaemonConfig& c, const TempDir&) { c.memory_quota_bytes = (int64_t{16} << 20) - 1; },
       "--memory_quota_bytes=16777215 is out of range; accepted: 16777216..17179869184 bytes"},
      {"memory_quota_high", [](DaemonConfig& c, const TempDir&) { c.memory_quota_bytes = (int64_t{16} << 30) + 1; },
       "--memory_quota_bytes=17179869185 is out of range; accepted: 16777216..17179869184 bytes"},
      {"max_connections_low", [](DaemonConfig& c, const TempDir&) { c.max_connections = 0; },
       "--max_connections=0 is out of range; accepted: 1..1048576"},
      {"max_connections_high", [](DaemonConfig& c, const TempDir&) { c.max_connections = (1 << 20) + 1; },
       "--max_connections=1048577 is out of range; accepted: 1..1048576"},
      {"max_connections_per_peer", [](DaemonConfig& c, const TempDir&) { c.max_connections_per_peer = 0; },
       "--max_connections_per_peer=0 is out of range; accepted: 1..1048576"},
      {"max_queued_calls_per_peer_low", [](DaemonConfig& c, const TempDir&) { c.max_queued_calls_per_peer = 0; },
       "--max_queued_calls_per_peer=0 is out of range; accepted: 1..12800"},
      {"max_queued_calls_per_peer_high", [](DaemonConfig& c, const TempDir&) { c.max_queued_calls_per_peer = 12801; },
       "--max_queued_calls_per_peer=12801 is out of range; accepted: 1..12800"},
      {"max_connection_rate_per_peer_low", [](DaemonConfig& c, const TempDir&) { c.max_connection_rate_per_peer = -1; },
       "--max_connection_rate_per_peer=-1 is out of range; accepted: 0 (no limit)..1048576 per second"},
      {"max_connection_rate_per_peer_high",
       [](DaemonConfig& c, const TempDir&) { c.max_connection_rate_per_peer = (1 << 20) + 1; },
       "--max_connection_rate_per_peer=1048577 is out of range; accepted: 0 (no limit)..1048576 per second"},
      {"handshake_timeout_low", [](DaemonConfig& c, const TempDir&) { c.handshake_timeout = absl::Milliseconds(999); },
       "--handshake_timeout must be within 1s..120s (e.g. 10s)"},
      {"handshake_timeout_high", [](DaemonConfig& c, const TempDir&) { c.handshake_timeout = absl::Seconds(121); },
       "--handshake_timeout must be within 1s..120s (e.g. 10s)"},
      {"max_watches", [](DaemonConfig& c, const TempDir&) { c.max_watches = -1; },
       "--max_watches must be 0 (no limit) or positive"},
      {"max_watches_per_peer", [](DaemonConfig& c, const TempDir&) { c.max_watches_per_peer = -1; },
       "--max_watches_per_peer must be 0 (no limit) or positive"},
      {"keepalive_time_low", [](DaemonConfig& c, const TempDir&) { c.keepalive_time = absl::Milliseconds(999); },
       "--keepalive_time must be within 1s..2h (e.g. 60s)"},
      {"keepalive_time_high", [](DaemonConfig& c, const TempDir&) { c.keepalive_time = absl::Hours(2) + absl::Seconds(1); },
       "--keepalive_time must be within 1s..2h (e.g. 60s)"},
      {"keepalive_timeout_low", [](DaemonConfig& c, const TempDir&) { c.keepalive_timeout = absl::ZeroDuration(); },
       "--keepalive_timeout must be within 1s..10m (e.g. 20s)"},
      {"keepalive_timeout_high", [](DaemonConfig& c, const TempDir&) { c.keepalive_timeout = absl::Minutes(11); },
       "--keepalive_timeout must be within 1s..10m (e.g. 20s)"},
      {"liveness_interval", [](DaemonConfig& c, const TempDir&) { c.liveness_interval = absl::Seconds(-1); },
       "--liveness_interval must be 0 (off) or positive, e.g. 5s"},
      {"liveness_failures_low", [](DaemonConfig& c, const TempDir&) { c.liveness_failures = 0; },
       "--liveness_failures must be within 1..100"},
      {"liveness_failures_high", [](DaemonConfig& c, const TempDir&) { c.liveness_failures = 101; },
       "--liveness_failures must be within 1..100"},
      {"host_root_missing", [](DaemonConfig& c, const TempDir& d) { c.host_root = d.File("nonexistent"); },
       "--host_root=<dir>/nonexistent is not a readable directory"},
      {"host_root_file", [](DaemonConfig& c, const TempDir& d) { c.host_root = d.Write("afile", "x"); },
       "--host_root=<dir>/afile is not a readable directory"},
      // A name the kernel refuses (ENAMETOOLONG) is an error line, not an uncaught filesystem_error.
      {"host_root_name_too_long", [](DaemonConfig& c, const TempDir& d) { c.host_root = d.File(std::string(5000, 'a')); },
       "--host_root=<dir>/" + std::string(5000, 'a') + " is not a readable directory (File name too long)"},
      {"probe_missing", [](DaemonConfig& c, const TempDir& d) { c.probe_command = d.File("no-probe"); },
       "--probe_command: '<dir>/no-probe' is not an executable"},
      {"probe_not_on_path", [](DaemonConfig& c, const TempDir&) { c.probe_command = "no-such-probe-on-path"; },
       "--probe_command: 'no-such-probe-on-path' is not an executable"},
      {"probe_not_executable", [](DaemonConfig& c, const TempDir& d) { c.probe_command = d.Write("afile", "x"); },
       "--probe_command: '<dir>/afile' is not an executable"},
      {"torch_probe_missing", [](DaemonConfig& c, const TempDir& d) { c.torch_probe_command = d.File("no-torch"); },
       "--torch_probe_command: '<dir>/no-torch' is not an executable (\"none\" disables it)"},
      {"lease_file_relative", [](DaemonConfig& c, const TempDir&) { c.lease_state_file = "leases.state"; },
       "--lease_state_file=leases.state: needs an absolute file name in an existing directory (e.g. "
       "/var/lib/devplace/leases.state), or none"},
      {"lease_file_no_directory", [](DaemonConfig& c, const TempDir& d) { c.lease_state_file = d.File("nodir/l"); },
       "--lease_state_file=<dir>/nodir/l: needs an absolute file name in an existing directory (e.g. "
       "/var/lib/devplace/leases.state), or none"},
      {"lease_file_unsafe_directory",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("open/");
         chmod(d.File("open").c_str(), 0777);
         c.lease_state_file = d.File("open/leases.state");
       },
       "--lease_state_file=<dir>/open/leases.state: directory <dir>/open is writable by group or others without the "
       "sticky bit (mode 0777): another user could create or replace the lease table (e.g. make leases.state a "
       "directory, so that no lease could be written); name a file in a directory of devplaced's own (e.g. "
       "/var/lib/devplace/leases.state)"},
      // Sticky is not enough: another user may still create leases.state first.
      {"lease_file_sticky_directory",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("sticky/");
         chmod(d.File("sticky").c_str(), 01777);
         c.lease_state_file = d.File("sticky/leases.state");
       },
       "--lease_state_file=<dir>/sticky/leases.state: directory <dir>/sticky is writable by group or others (mode "
       "1777): another user could create or replace the lease table (e.g. make leases.state a directory, so that no "
       "lease could be written); name a file in a directory of devplaced's own (e.g. /var/lib/devplace/leases.state)"},
      {"lease_file_linked_directory",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("real/");
         symlink(d.File("real").c_str(), d.File("link").c_str());
         c.lease_state_file = d.File("link/leases.state");
       },
       "--lease_state_file=<dir>/link/leases.state: directory <dir>/link is a symbolic link: name the directory "
       "itself (a link could be re-pointed)"},
      {"leased_devices_cap", [](DaemonConfig& c, const TempDir&) { c.max_leased_devices_per_user = -1; },
       "--max_leased_devices_per_user must be within 0 (no cap)..1024"},
      {"waiting_picks", [](DaemonConfig& c, const TempDir&) { c.max_waiting_picks_per_user = 0; },
       "--max_waiting_picks_per_user must be within 1..1024"},
      {"waiting_bytes", [](DaemonConfig& c, const TempDir&) { c.max_waiting_pick_bytes_per_user = 1000; },
       "--max_waiting_pick_bytes_per_user must be within 65536 (64 KiB)..268435456 (256 MiB)"},
      {"waiter_grace", [](DaemonConfig& c, const TempDir&) { c.waiter_restart_grace = absl::Minutes(11); },
       "--waiter_restart_grace must be within 1s..10m"},
      {"nfd_no_directory", [](DaemonConfig& c, const TempDir& d) { c.nfd_features_file = d.File("nodir/features"); },
       "--nfd_features_file=<dir>/nodir/features: needs a file name in an existing directory (e.g. NFD's features.d)"},
      {"nfd_name_too_long",
       [](DaemonConfig& c, const TempDir& d) { c.nfd_features_file = d.File(std::string(5000, 'a') + "/features"); },
       "--nfd_features_file=<dir>/" + std::string(5000, 'a') +
           "/features: needs a file name in an existing directory (e.g. NFD's features.d)"},
      {"nfd_no_file_name",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("features.d/");
         c.nfd_features_file = d.File("features.d/");
       },
       "--nfd_features_file=<dir>/features.d/: needs a file name in an existing directory (e.g. NFD's features.d)"},
      {"nfd_is_directory",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("features.d/");
         c.nfd_features_file = d.File("features.d");
       },
       "--nfd_features_file=<dir>/features.d: is a directory; name a file inside it"},
      {"nfd_directory_writable_by_others",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("features.d/");
         chmod(d.File("features.d").c_str(), 0777);
         c.nfd_features_file = d.File("features.d/devplace");
       },
       "--nfd_features_file=<dir>/features.d/devplace: directory <dir>/features.d is writable by group or others "
       "without the sticky bit (mode 0777): another user could replace the feature file or the directory, and "
       "choose what is written where"},
      {"nfd_directory_is_a_link",
       [](DaemonConfig& c, const TempDir& d) {
         d.Touch("features.d/");
         symlink(d.File("features.d").c_str(), d.File("link").c_str());
         c.nfd_features_file = d.File("link/devplace");
       },
       "--nfd_features_file=<dir>/link/devplace: directory <dir>/link is a symbolic link: name the directory itself "
       "(a link could be re-pointed)"},
      {"nfd_expiry", [](DaemonConfig& c, const TempDir&) { c.nfd_expiry = absl::Seconds(59); },
       "--nfd_expiry must be at least 1m (e.g. 10m)"},
      // Several problems: the first in devplaced's order of checks is the one reported.
      {"first_of_several",
       [](DaemonConfig& c, const TempDir&) {
         c.nfd_expiry = absl::Seconds(1);
         c.probe_timeout = absl::Milliseconds(1);
         c.socket_mode = "0999";
       },
       "--socket_mode='0999' is not an octal permission (e.g. 0660)"},
      {"log_level_first",
       [](DaemonConfig& c, const TempDir&) {
         c.listen = ",";
         c.log_level = "loud";
       },
       "--log_level='loud' is not one of debug, info, warn, error"},
  };
}

class DaemonConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(DaemonConfigBad, IsRefusedWithDevplacedsMessage) {
  TempDir dir;
  DaemonConfig c = GoodConfig(dir);
  GetParam().change(c, dir);
  const absl::StatusOr<ValidConfig> v = ValidateConfig(c);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  std::string expected = GetParam().message;
  for (size_t at; (at = expected.find("<dir>")) != std::string::npos;) expected.replace(at, 5, dir.path());
  EXPECT_EQ(v.status().message(), expected);
}

INSTANTIATE_TEST_SUITE_P(EachSetting, DaemonConfigBad, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(DaemonConfig, DefaultListenIsAUnixSocketAndLoopback) {
  const std::vector<std::string> d = DefaultListen();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_THAT(d[0], HasSubstr("/devplace.sock"));
  EXPECT_EQ(d[0].rfind("unix:/", 0), 0u);
  EXPECT_EQ(d[1], "127.0.0.1:7465");
}

}  // namespace
}  // namespace devplace::daemon
