// Remote listeners: the real devplaced with a tls: listener and certificates made by openssl in the
// test, called through libdevplace and the CLI. Mutual TLS serves only clients with a certificate
// from --tls_client_ca; SIGHUP swaps the server certificate for new connections; plaintext
// listeners on non-loopback addresses need --allow_insecure_remote; bad TLS flags exit 2.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "devplace/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

CommandResult Daemon(const std::string& flags) {
  return RunCommand(absl::StrCat("timeout 20 ", ShellQuote(DEVPLACE_DAEMON_BINARY), " ", flags));
}

// The bound port of the listener logged as `event=listening address=<prefix><port>` (waits for it:
// the daemon logs its listeners one after the other).
std::string LoggedPort(DaemonProcess& daemon, const std::string& prefix) {
  const std::string needle = "event=listening address=" + prefix;
  if (!daemon.WaitForLog(needle, absl::Seconds(10))) return "";
  const std::string log = daemon.Log();
  const size_t at = log.find(needle) + needle.size();
  return log.substr(at, log.find_first_not_of("0123456789", at) - at);
}

// A CA with a server certificate for 127.0.0.1/localhost and a client certificate; a second,
// unrelated CA with its own client certificate.
struct Pki {
  explicit Pki(const std::string& dir)
      : ca(MakeCa(dir, "ca1")),
        server(MakeLeaf(dir, ca, "server", "IP:127.0.0.1,DNS:localhost", false)),
        client(MakeLeaf(dir, ca, "client1", "", true)),
        other_ca(MakeCa(dir, "ca2")),
        other_client(MakeLeaf(dir, other_ca, "intruder", "", true)) {}
  CertFiles ca, server, client, other_ca, other_client;
};

// A daemon with a unix socket, 127.0.0.1:0 and a mutual-TLS listener on tls:127.0.0.1:0.
struct TlsDaemon {
  TlsDaemon(const TempDir& dir, const Pki& pki, const std::vector<std::string>& extra = {})
      : daemon(dir.path(), Flags(dir, pki, extra)), tls_target("127.0.0.1:" + LoggedPort(daemon, "tls:127.0.0.1:")) {}
  static std::vector<std::string> Flags(const TempDir& dir, const Pki& pki, const std::vector<std::string>& extra) {
    std::vector<std::string> flags = {"--listen=unix:" + dir.File("d.sock") + ",127.0.0.1:0,tls:127.0.0.1:0",
                                      "--host_root=" + FixtureHost("nvidia-2x-h100"), "--tls_cert=" + pki.server.cert,
                                      "--tls_key=" + pki.server.key, "--tls_client_ca=" + pki.ca.cert};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }
  DaemonProcess daemon;
  std::string tls_target;
};

ConnectOptions Tls(const std::string& target, const std::string& ca, const CertFiles* client) {
  ConnectOptions options;
  options.address = target;
  options.timeout = absl::Seconds(10);
  options.tls_ca = ca;
  if (client != nullptr) {
    options.tls_cert = client->cert;
    options.tls_key = client->key;
  }
  return options;
}

// `devplace --address=TARGET` (under a 30 s timeout), for more words.
std::string CliAt(const std::string& target) {
  return absl::StrCat("timeout 30 ", ShellQuote(DEVPLACE_CLI_BINARY), " --address=", target);
}

// GetInventory over a fresh connection with `options`.
absl::StatusOr<v1::Inventory> InventoryWith(const ConnectOptions& options) {
  absl::StatusOr<Client> client = Client::Connect(options);
  if (!client.ok()) return client.status();
  return client->Inventory();
}

// Waits until the first inventory is there (health SERVING over the unix socket).
void WaitServing(DaemonProcess& daemon) {
  ConnectOptions options;
  options.address = daemon.unix_target();
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<bool> serving = client->Health();
    if (serving.ok() && *serving) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  FAIL() << "daemon never became SERVING; log:\n" << daemon.Log();
}

TEST(Tls, MutualTlsServesOnlyClientsWithACertificateFromTheClientCa) {
  TempDir dir;
  Pki pki(dir.path());
  TlsDaemon d(dir, pki);
  ASSERT_NE(d.tls_target, "127.0.0.1:");
  EXPECT_THAT(d.daemon.Log(), HasSubstr("event=tls mode=mutual"));
  WaitServing(d.daemon);

  // The right client certificate: served, every read RPC.
  absl::StatusOr<Client> client = Client::Connect(Tls(d.tls_target, pki.ca.cert, &pki.client));
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::Inventory> inv = client->Inventory();
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_GE(inv->backends_size(), 2);  // cpu + the fixture's NVIDIA row
  absl::StatusOr<bool> serving = client->Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  ResolveOptions resolve;
  resolve.workload = v1::WORKLOAD_INFERENCE;
  resolve.device_map = "auto";
  resolve.job_device_nodes.reset();
  absl::StatusOr<v1::ResolveDeviceResponse> answer = client->Resolve(resolve);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->device(), "cuda:0");
  absl::StatusOr<v1::ListBackendsResponse> table = client->Backends();
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->backends_size(), 12);
  int seen = 0;
  EXPECT_TRUE(client->Watch(0, [&](const v1::Inventory&) { return ++seen < 1; }).ok());
  EXPECT_EQ(seen, 1);
  // "localhost" is in the certificate's SAN too.
  ConnectOptions by_name = Tls("localhost:" + d.tls_target.substr(10), pki.ca.cert, &pki.client);
  EXPECT_TRUE(InventoryWith(by_name).ok());

  // No client certificate: the handshake fails.
  absl::StatusOr<v1::Inventory> refused = InventoryWith(Tls(d.tls_target, pki.ca.cert, nullptr));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // A client certificate from another CA: refused.
  refused = InventoryWith(Tls(d.tls_target, pki.ca.cert, &pki.other_client));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // Plaintext to the TLS port: refused.
  ConnectOptions plaintext;
  plaintext.address = d.tls_target;
  refused = InventoryWith(plaintext);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // A client that does not trust the daemon's CA: refused (by the client).
  refused = InventoryWith(Tls(d.tls_target, pki.other_ca.cert, &pki.other_client));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();

  // The local listeners stay plaintext.
  plaintext.address = d.daemon.tcp_target();
  EXPECT_TRUE(InventoryWith(plaintext).ok());
  plaintext.address = d.daemon.unix_target();
  EXPECT_TRUE(InventoryWith(plaintext).ok());
}

TEST(Tls, ServerOnlyTlsWithoutClientCa) {
  TempDir dir;
  Pki pki(dir.path());
  DaemonProcess daemon(dir.path(), {"--listen=unix:" + dir.File("d.sock") + ",127.0.0.1:0,tls:127.0.0.1:0",
                                    "--host_root=" + FixtureHost("cpu-only"), "--tls_cert=" + pki.server.cert,
                                    "--tls_key=" + pki.server.key});
  const std::string target = "127.0.0.1:" + LoggedPort(daemon, "tls:127.0.0.1:");
  EXPECT_THAT(daemon.Log(), HasSubstr("event=tls mode=server_only"));
  WaitServing(daemon);
  EXPECT_TRUE(InventoryWith(Tls(target, pki.ca.cert, nullptr)).ok());
  ConnectOptions plaintext;
  plaintext.address = target;
  EXPECT_EQ(InventoryWith(plaintext).status().code(), absl::StatusCode::kUnavailable);
}

// RefreshInventory over TLS: a client whose certificate the daemon verified (mutual TLS) may
// re-probe, rate-limited like everyone; a server-only-TLS client has no identity and is refused.
TEST(Tls, RefreshInventoryIsForVerifiedClientsAndRateLimited) {
  TempDir dir;
  Pki pki(dir.path());
  TlsDaemon d(dir, pki, {"--refresh_min_interval=1h"});
  WaitServing(d.daemon);
  absl::StatusOr<Client> client = Client::Connect(Tls(d.tls_target, pki.ca.cert, &pki.client));
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::Inventory> refreshed = client->Refresh();
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  EXPECT_GE(refreshed->backends_size(), 2);
  // The second within the hour: the limit holds for remote callers too.
  EXPECT_EQ(client->Refresh().status().code(), absl::StatusCode::kResourceExhausted);

  TempDir dir2;
  DaemonProcess server_only(dir2.path(), {"--listen=unix:" + dir2.File("d.sock") + ",127.0.0.1:0,tls:127.0.0.1:0",
                                          "--host_root=" + FixtureHost("cpu-only"), "--tls_cert=" + pki.server.cert,
                                          "--tls_key=" + pki.server.key, "--refresh_min_interval=0"});
  const std::string target = "127.0.0.1:" + LoggedPort(server_only, "tls:127.0.0.1:");
  WaitServing(server_only);
  absl::StatusOr<Client> anonymous = Client::Connect(Tls(target, pki.ca.cert, nullptr));
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_TRUE(anonymous->Inventory().ok());
  EXPECT_EQ(anonymous->Refresh().status().code(), absl::StatusCode::kPermissionDenied);
}

// Replaces `to`'s content with `from`'s by a rename, as a certificate renewal tool would.
void Replace(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".new";
  ASSERT_EQ(RunCommand("cp '" + from + "' '" + tmp + "' && mv '" + tmp + "' '" + to + "'").exit_code, 0);
}

TEST(Tls, SighupMakesNewConnectionsUseTheNewServerCertificate) {
  TempDir dir;
  Pki pki(dir.path());
  // The daemon reads its certificate from files the test replaces.
  const std::string cert = dir.File("live.pem"), key = dir.File("live.key");
  Replace(pki.server.cert, cert);
  Replace(pki.server.key, key);
  const CertFiles renewed_ca = MakeCa(dir.path(), "ca3");
  const CertFiles renewed = MakeLeaf(dir.path(), renewed_ca, "server3", "IP:127.0.0.1,DNS:localhost", false);
  TlsDaemon d(dir, pki, {"--tls_cert=" + cert, "--tls_key=" + key});
  WaitServing(d.daemon);
  const ConnectOptions trusts_old = Tls(d.tls_target, pki.ca.cert, &pki.client);
  const ConnectOptions trusts_new = Tls(d.tls_target, renewed_ca.cert, &pki.client);
  ASSERT_TRUE(InventoryWith(trusts_old).ok());
  ASSERT_EQ(InventoryWith(trusts_new).status().code(), absl::StatusCode::kUnavailable);

  // New files without a SIGHUP change nothing (gRPC's provider polls every second: wait longer).
  Replace(renewed.cert, cert);
  Replace(renewed.key, key);
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_TRUE(InventoryWith(trusts_old).ok());
  EXPECT_EQ(InventoryWith(trusts_new).status().code(), absl::StatusCode::kUnavailable);

  // SIGHUP: checked, swapped; new connections get the new certificate within about a second.
  d.daemon.Signal(SIGHUP);
  ASSERT_TRUE(d.daemon.WaitForLog("event=tls_reload result=ok subject=\"CN=server3\"", absl::Seconds(10)))
      << d.daemon.Log();
  bool switched = false;
  for (int i = 0; i < 100 && !switched; ++i) {
    switched = InventoryWith(trusts_new).ok();
    if (!switched) absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_TRUE(switched) << d.daemon.Log();
  EXPECT_EQ(InventoryWith(trusts_old).status().code(), absl::StatusCode::kUnavailable);

  // A broken renewal is refused and logged; the certificate in use stays.
  ASSERT_EQ(RunCommand("echo garbage > '" + cert + "'").exit_code, 0);
  d.daemon.Signal(SIGHUP);
  ASSERT_TRUE(d.daemon.WaitForLog("event=tls_reload result=error", absl::Seconds(10))) << d.daemon.Log();
  EXPECT_THAT(d.daemon.Log(), HasSubstr("--tls_cert=" + cert + ": holds no PEM certificate"));
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_TRUE(InventoryWith(trusts_new).ok());
}

TEST(Tls, CliOverTls) {
  TempDir dir;
  Pki pki(dir.path());
  TlsDaemon d(dir, pki);
  WaitServing(d.daemon);
  const std::string cli = absl::StrCat("timeout 30 ", ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.tls_target);
  const std::string tls_flags =
      " --tls_ca=" + pki.ca.cert + " --tls_cert=" + pki.client.cert + " --tls_key=" + pki.client.key;

  CommandResult r = RunCommand(cli + tls_flags + " inventory --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"ROW_CUDA_NVIDIA\""));
  r = RunCommand(cli + tls_flags + " resolve --workload=inference --device_map=auto --no_environment");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");
  // The same from DEVPLACE_TLS_*.
  r = RunCommand("DEVPLACE_TLS_CA=" + pki.ca.cert + " DEVPLACE_TLS_CERT=" + pki.client.cert +
                 " DEVPLACE_TLS_KEY=" + pki.client.key + " " + cli + " health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
  // A flag wins over its variable: a bad DEVPLACE_TLS_CERT is not used when --tls_cert is given.
  r = RunCommand("DEVPLACE_TLS_CERT=/no/such.pem " + cli + tls_flags + " backends");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // --tls_server_name replaces the address's host in the certificate check.
  r = RunCommand(cli + tls_flags + " --tls_server_name=node1.example health");
  EXPECT_EQ(r.exit_code, 1) << r.err;  // the certificate names 127.0.0.1 and localhost only
  r = RunCommand(cli + tls_flags + " --tls_server_name=localhost health");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // Refused handshakes are errors from the work (exit 1), one line.
  r = RunCommand(cli + " --tls_ca=" + pki.ca.cert + " inventory");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("devplace: inventory: UNAVAILABLE: "));
  r = RunCommand(cli + " inventory");  // plaintext to the TLS port
  EXPECT_EQ(r.exit_code, 1);

  // Bad TLS flags: usage errors naming the flag.
  TempDir files;
  const std::string garbage = files.Write("garbage.pem", "not pem\n");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {" --tls_ca=/no/such/ca.pem", "--tls_ca=/no/such/ca.pem: cannot read"},
      {" --tls_ca=" + garbage, "--tls_ca=" + garbage + ": holds no PEM certificate"},
      {" --tls_ca=" + files.path(), "is a directory"},
      {" --tls_cert=" + pki.client.cert, "--tls_cert is set without tls_key"},
      {" --tls_cert=" + pki.client.key + " --tls_key=" + pki.client.key, "--tls_cert=" + pki.client.key},
      {" --tls_cert=" + pki.client.cert + " --tls_key=" + pki.client.cert, "holds no PEM private key"},
  };
  for (const auto& [flags, words] : bad) {
    SCOPED_TRACE(flags);
    r = RunCommand(cli + flags + " inventory");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(words));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  r = RunCommand("DEVPLACE_TLS_KEY=" + garbage + " " + cli + " --tls_cert=" + pki.client.cert + " inventory");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("DEVPLACE_TLS_KEY=" + garbage + ": holds no PEM private key"));
  // --help lists the TLS flags.
  r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --help"));
  for (const char* flag : {"--tls_ca", "--tls_cert", "--tls_key", "--tls_server_name"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

// Each TLS mistake gets a message of its own naming the flag that fixes it (the client dials the
// target again with OpenSSL to find out), from libdevplace and on the CLI's one error line.
TEST(Tls, EachMistakeNamesItsCauseAndTheFlagThatFixesIt) {
  TempDir dir;
  Pki pki(dir.path());
  TlsDaemon d(dir, pki);
  const std::string cli = CliAt(d.tls_target);
  WaitServing(d.daemon);
  const std::string ca = " --tls_ca=" + pki.ca.cert;
  const std::string mine = " --tls_cert=" + pki.client.cert + " --tls_key=" + pki.client.key;
  const std::string stranger = " --tls_cert=" + pki.other_client.cert + " --tls_key=" + pki.other_client.key;
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"", {d.tls_target + " is a TLS listener", "this client spoke plaintext: pass --tls_ca"}},
      {ca, {"requires a client certificate (mutual TLS) and none was given: pass --tls_cert and --tls_key"}},
      {ca + stranger,
       {"refused the client certificate --tls_cert=" + pki.other_client.cert, "subject CN=intruder, issued by CN=ca2",
        "the daemon's --tls_client_ca"}},
      {" --tls_ca=" + pki.other_ca.cert + mine,
       {"the daemon's certificate (subject CN=server, issued by CN=ca1) is not trusted",
        "with --tls_ca=" + pki.other_ca.cert + "; pass the CA that signed it"}},
      {ca + mine + " --tls_server_name=node1.example",
       {"the daemon's certificate names IP:127.0.0.1, DNS:localhost, not node1.example",
        "pass --tls_server_name=NAME"}},
      // Before: gRPC's "empty address list" alone.
      {ca + " --tls_cert=" + pki.client.cert + " --tls_key=" + pki.other_client.key,
       {"the private key --tls_key=" + pki.other_client.key + " does not belong to the client certificate --tls_cert=" +
            pki.client.cert + " (subject CN=client1, issued by CN=ca1): pass the key that was made with that certificate"}},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    const CommandResult r = RunCommand(cli + flags + " health");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, StartsWith("devplace: health: UNAVAILABLE: "));
    for (const std::string& w : words) EXPECT_THAT(r.err, HasSubstr(w));
    EXPECT_THAT(r.err, HasSubstr("(gRPC: "));  // gRPC's own text is kept, after the cause
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // no gRPC log lines
  }
  // TLS to the plaintext TCP listener.
  CommandResult r = RunCommand(CliAt(d.daemon.tcp_target()) + ca + mine + " health");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(d.daemon.tcp_target() + " did not answer the TLS handshake: it is probably a "
                               "plaintext listener"));
  // A host name that does not resolve (.invalid never does, RFC 6761); before, only gRPC's text.
  r = RunCommand(CliAt("nosuchhost.invalid:7466") + ca + " --timeout=20s health");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("devplace: health: UNAVAILABLE: the host name nosuchhost.invalid does not resolve ("));
  EXPECT_THAT(r.err, HasSubstr("dial the daemon's IP address (--address, DEVPLACE_ADDRESS) (gRPC: "));
  // The library says the same.
  absl::StatusOr<v1::Inventory> refused = InventoryWith(Tls(d.tls_target, pki.ca.cert, nullptr));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("requires a client certificate"));
  // Right settings: no diagnosis needed.
  r = RunCommand(cli + ca + mine + " health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(Tls, PlaintextRemoteListenerNeedsAllowInsecureRemote) {
  TempDir dir;
  for (const std::string address : {"0.0.0.0:0", "[::]:0", "10.1.2.3:7465", "node1.example:7465"}) {
    SCOPED_TRACE(address);
    const CommandResult r = Daemon("--listen=" + address + " --host_root=" + ShellQuote(FixtureHost("cpu-only")));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("--listen: '" + address + "' is plaintext and reachable from other hosts"));
    EXPECT_THAT(r.err, HasSubstr("--allow_insecure_remote"));
  }
  // Loopback addresses are fine without it.
  DaemonProcess loopback(dir.path(), {"--listen=unix:" + dir.File("d.sock") + ",127.0.0.1:0,[::1]:0,localhost:0",
                                      "--host_root=" + FixtureHost("cpu-only")});
  EXPECT_THAT(loopback.Log(), ::testing::Not(HasSubstr("insecure_remote_listener")));
  loopback.Signal(SIGTERM);
  EXPECT_EQ(loopback.WaitExit(absl::Seconds(10)), 0);

  // Allowed and warned about with the flag; reached here through loopback only.
  TempDir dir2;
  DaemonProcess remote(dir2.path(), {"--listen=unix:" + dir2.File("d.sock") + ",127.0.0.1:0,0.0.0.0:0",
                                     "--host_root=" + FixtureHost("cpu-only"), "--allow_insecure_remote"});
  EXPECT_THAT(remote.Log(), HasSubstr("event=insecure_remote_listener address=0.0.0.0:0"));
  const std::string port = LoggedPort(remote, "0.0.0.0:");
  ASSERT_FALSE(port.empty()) << remote.Log();
  WaitServing(remote);
  ConnectOptions options;
  options.address = "127.0.0.1:" + port;
  EXPECT_TRUE(InventoryWith(options).ok());
}

TEST(Tls, BadTlsFlagsAreUsageErrorsNamingTheFlag) {
  TempDir dir;
  Pki pki(dir.path());
  const std::string garbage = dir.Write("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n");
  const std::string base = "--host_root=" + ShellQuote(FixtureHost("cpu-only")) + " --listen=unix:" + dir.File("s.sock") + ",tls:127.0.0.1:0";
  const std::string cert = " --tls_cert=" + pki.server.cert, key = " --tls_key=" + pki.server.key;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base, "--tls_cert is required for a TLS listener"},
      {base + cert, "--tls_key is required for a TLS listener"},
      {base + " --tls_cert=/no/such.pem" + key, "--tls_cert=/no/such.pem: cannot read: No such file or directory"},
      {base + " --tls_cert=" + dir.path() + key, "--tls_cert=" + dir.path() + ": not a regular file"},
      {base + " --tls_cert=" + pki.server.key + key, "--tls_cert=" + pki.server.key + ": holds no PEM certificate"},
      {base + " --tls_cert=" + garbage + key, "--tls_cert=" + garbage + ": a PEM certificate does not parse"},
      {base + cert + " --tls_key=" + pki.server.cert, "--tls_key=" + pki.server.cert + ": holds no unencrypted PEM"},
      {base + cert + " --tls_key=" + pki.client.key, "--tls_key=" + pki.client.key + ": the private key does not belong"},
      {base + cert + key + " --tls_client_ca=/no/ca.pem", "--tls_client_ca=/no/ca.pem: cannot read"},
      {base + cert + key + " --tls_client_ca=" + pki.ca.key, "--tls_client_ca=" + pki.ca.key + ": holds no PEM"},
      {"--host_root=" + ShellQuote(FixtureHost("cpu-only")) + " --listen=unix:" + dir.File("s.sock") + cert + key,
       "no --listen address is tls:host:port"},
      {"--host_root=" + ShellQuote(FixtureHost("cpu-only")) + " --listen=tls:unix:" + dir.File("s.sock") + cert + key,
       "--listen: 'tls:unix:"},
      {"--host_root=" + ShellQuote(FixtureHost("cpu-only")) + " --listen=tls:127.0.0.1:70000" + cert + key, "--listen: 'tls:127.0.0.1:70000'"},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    const CommandResult r = Daemon(flags);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(words));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const CommandResult help = Daemon("--help");
  for (const char* flag : {"--tls_cert", "--tls_key", "--tls_client_ca", "--allow_insecure_remote", "tls:0.0.0.0:7466"}) {
    EXPECT_THAT(help.out + help.err, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace devplace::testing
