// server/service/tls: which listen addresses are loopback, the certificate checks (real files made
// by openssl), and what a handler sees of an mTLS peer, over a real gRPC server on loopback built
// with the daemon's own credentials and called through libdevplace.
#include "server/service/tls.h"

#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "devplace/client.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"

namespace devplace::service {
namespace {

using ::devplace::testing::CertFiles;
using ::devplace::testing::MakeCa;
using ::devplace::testing::MakeLeaf;
using ::devplace::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(TlsListenAddress, LoopbackOnlyForAddressesThatStayOnThisMachine) {
  for (const char* address : {"127.0.0.1:7465", "127.1.2.3:0", "localhost:7465", "LocalHost:1", "[::1]:7465",
                              "[::ffff:127.0.0.1]:1"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:7465", "[::]:7465", "10.0.0.5:7465", "node1:7465", "[::ffff:10.0.0.1]:1",
                              "128.0.0.1:1", "localhost.example:1", "ipv4:127.0.0.1:1", "[::1:1"}) {
    EXPECT_FALSE(IsLoopbackListenAddress(address)) << address;
  }
}

struct Pki {
  explicit Pki(const TempDir& dir)
      : ca(MakeCa(dir.path(), "ca")),
        server(MakeLeaf(dir.path(), ca, "server", "IP:127.0.0.1,DNS:localhost", false)),
        client(MakeLeaf(dir.path(), ca, "client1", "", true)),
        named_client(MakeLeaf(dir.path(), ca, "client2", "DNS:scheduler.example,DNS:scheduler2.example", true)) {}
  CertFiles ca, server, client, named_client;
};

TEST(TlsMaterial, ReadsAndDescribesTheFiles) {
  TempDir dir;
  Pki pki(dir);
  absl::StatusOr<TlsMaterial> m = LoadTlsMaterial({pki.server.cert, pki.server.key, pki.ca.cert});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->subject, "CN=server");
  EXPECT_THAT(m->not_after, HasSubstr("GMT"));
  EXPECT_EQ(m->client_ca_count, 1);
  EXPECT_THAT(m->cert_chain, StartsWith("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(m->private_key, HasSubstr("PRIVATE KEY-----"));
  m = LoadTlsMaterial({pki.server.cert, pki.server.key, ""});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->client_ca_count, 0);
  // A bundle of two CAs.
  const std::string bundle =
      dir.Write("bundle.pem", testing::ReadFile(pki.ca.cert) + testing::ReadFile(MakeCa(dir.path(), "other").cert));
  m = LoadTlsMaterial({pki.server.cert, pki.server.key, bundle});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->client_ca_count, 2);
}

TEST(TlsMaterial, ErrorsNameTheFlag) {
  TempDir dir;
  Pki pki(dir);
  const std::string empty = dir.Write("empty.pem", "");
  const std::string truncated =
      dir.Write("truncated.pem", testing::ReadFile(pki.ca.cert).substr(0, 120) + "\n-----END CERTIFICATE-----\n");
  struct Case {
    TlsFiles files;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"", pki.server.key, ""}, "--tls_cert is required"},
      {{pki.server.cert, "", ""}, "--tls_key is required"},
      {{empty, pki.server.key, ""}, "--tls_cert=" + empty + ": the file is empty"},
      {{truncated, pki.server.key, ""}, "--tls_cert=" + truncated + ": a PEM certificate does not parse"},
      {{pki.server.cert, pki.client.key, ""}, "--tls_key=" + pki.client.key + ": the private key does not belong"},
      {{pki.server.cert, dir.File("missing.key"), ""}, "--tls_key=" + dir.File("missing.key") + ": cannot read"},
      {{pki.server.cert, pki.server.key, empty}, "--tls_client_ca=" + empty + ": the file is empty"},
      {{pki.server.cert, pki.server.key, truncated}, "--tls_client_ca=" + truncated + ": a PEM certificate"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TlsMaterial> m = LoadTlsMaterial(c.files);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(m.status().message()), StartsWith(c.message));
  }
}

// GetInventory answers with the caller's mTLS identity (or "-") as the hostname.
class WhoAmI final : public v1::DevicePlacement::CallbackService {
  grpc::ServerUnaryReactor* GetInventory(grpc::CallbackServerContext* context, const v1::GetInventoryRequest*,
                                         v1::Inventory* response) override {
    const std::optional<std::string> identity = MutualTlsPeerIdentity(*context->auth_context());
    response->mutable_host()->set_hostname(identity.value_or("-"));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

absl::StatusOr<std::string> Hostname(const std::string& target, const std::string& ca, const CertFiles* client) {
  ConnectOptions options;
  options.timeout = absl::Seconds(10);
  options.tls_ca = ca;
  if (client != nullptr) {
    options.tls_cert = client->cert;
    options.tls_key = client->key;
  }
  absl::StatusOr<v1::Inventory> inv = MakeGrpcConnection(target, options)->GetInventory();
  if (!inv.ok()) return inv.status();
  return inv->host().hostname();
}

TEST(TlsPeer, AHandlerTellsAVerifiedClientCertificateFromEveryOtherPeer) {
  TempDir dir;
  Pki pki(dir);
  absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> mutual =
      ReloadableTlsCredentials::Create({pki.server.cert, pki.server.key, pki.ca.cert});
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> server_only =
      ReloadableTlsCredentials::Create({pki.server.cert, pki.server.key, ""});
  ASSERT_TRUE(server_only.ok()) << server_only.status();
  EXPECT_TRUE((*mutual)->mutual());
  EXPECT_FALSE((*server_only)->mutual());

  WhoAmI service;
  grpc::ServerBuilder builder;
  int mtls_port = 0, tls_port = 0, plain_port = 0;
  builder.AddListeningPort("127.0.0.1:0", (*mutual)->credentials(), &mtls_port);
  builder.AddListeningPort("127.0.0.1:0", (*server_only)->credentials(), &tls_port);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &plain_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  const std::string mtls = absl::StrCat("127.0.0.1:", mtls_port);
  absl::StatusOr<std::string> who = Hostname(mtls, pki.ca.cert, &pki.client);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "client1");  // no SAN: the common name
  who = Hostname(mtls, pki.ca.cert, &pki.named_client);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "scheduler.example,scheduler2.example");
  EXPECT_EQ(Hostname(mtls, pki.ca.cert, nullptr).status().code(), absl::StatusCode::kUnavailable);
  // A certificate from the client CA whose extended key usage leaves out clientAuth (the daemon's
  // own serverAuth one) is no client identity: the handshake fails (OpenSSL checks the client
  // purpose of the peer's leaf certificate).
  EXPECT_EQ(Hostname(mtls, pki.ca.cert, &pki.server).status().code(), absl::StatusCode::kUnavailable);

  // Server-only TLS: a client certificate is not asked for, so nobody is authenticated.
  who = Hostname(absl::StrCat("127.0.0.1:", tls_port), pki.ca.cert, &pki.client);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "-");
  who = Hostname(absl::StrCat("127.0.0.1:", plain_port), "", nullptr);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "-");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

TEST(TlsClientOptions, UnusableFilesAreInvalidArgumentNamingTheOptionOrVariable) {
  for (const char* name : {"DEVPLACE_TLS_CA", "DEVPLACE_TLS_CERT", "DEVPLACE_TLS_KEY", "DEVPLACE_TLS_SERVER_NAME"}) {
    unsetenv(name);
  }
  TempDir dir;
  const CertFiles ca = MakeCa(dir.path(), "ca");
  const std::string garbage = dir.Write("garbage.pem", "hello\n");
  ConnectOptions options;
  options.address = "127.0.0.1:1";
  options.tls_ca = dir.File("missing.pem");
  absl::StatusOr<Client> client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(client.status().message()), StartsWith("tls_ca=" + dir.File("missing.pem") + ": cannot read"));
  // MakeGrpcConnection never fails: its calls carry the error.
  absl::StatusOr<v1::Inventory> inv = MakeGrpcConnection(options.address, options)->GetInventory();
  EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(inv.status().message()), StartsWith("tls_ca="));
  // unix: targets are plaintext; the TLS options are not used there.
  options.address = "unix:" + dir.File("no.sock");
  EXPECT_TRUE(Client::Connect(options).ok());

  // A variable fills an empty option and is named in its error; an option wins over it.
  ASSERT_EQ(setenv("DEVPLACE_TLS_CERT", garbage.c_str(), 1), 0);
  options = ConnectOptions();
  options.address = "127.0.0.1:1";
  options.tls_ca = ca.cert;
  options.tls_key = ca.key;
  client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(client.status().message()), StartsWith("DEVPLACE_TLS_CERT=" + garbage + ": holds no PEM"));
  options.tls_cert = ca.cert;
  EXPECT_TRUE(Client::Connect(options).ok());
  options.tls_key.clear();  // DEVPLACE_TLS_KEY unset: a certificate without its key
  client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(client.status().message()), StartsWith("tls_cert is set without tls_key"));
  unsetenv("DEVPLACE_TLS_CERT");
}

}  // namespace
}  // namespace devplace::service
