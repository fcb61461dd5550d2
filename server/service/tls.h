// TLS for devplaced's remote listeners: which --listen addresses are loopback, the certificate
// files checked with OpenSSL before they are used, and server credentials whose certificates are
// swapped on SIGHUP.
//
// Reload design (gRPC 1.51): the only certificate providers in its public API are
// StaticDataCertificateProvider (fixed data) and FileWatcherCertificateProvider (re-reads files
// every N >= 1 seconds); the distributor that feeds new certificates to live listeners is not
// public. So the daemon keeps the *checked* PEM data in memory files (memfd) and points a
// FileWatcherCertificateProvider at /proc/self/fd/N with a 1 s interval. Reload() checks the
// configured files again and, only when they are valid, atomically swaps the memory file under
// that descriptor (dup3); gRPC picks the new data up within about a second, and new connections
// use it (established connections keep theirs). Editing the files without a SIGHUP changes
// nothing, and a broken renewal keeps the old certificate serving.
#ifndef DEVPLACE_SERVER_SERVICE_TLS_H_
#define DEVPLACE_SERVER_SERVICE_TLS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/server_credentials.h"

namespace devplace::service {

// Whether the host part of a `host:port` listen address (`[v6]:port` too) only accepts
// connections from this machine: `localhost`, 127.0.0.0/8, ::1 and ::ffff:127.x.y.z. Everything
// else (0.0.0.0, [::], a LAN address, another host name) is remote.
bool IsLoopbackListenAddress(absl::string_view host_port);

// The certificate files of a TLS listener (paths as given on the command line).
struct TlsFiles {
  std::string cert;       // --tls_cert: PEM certificate chain, the daemon's own certificate first
  std::string key;        // --tls_key: PEM private key of that certificate
  std::string client_ca;  // --tls_client_ca: PEM bundle of CAs that sign client certificates;
                          // empty = server-only TLS (clients are not asked for a certificate)
};

// The checked contents of TlsFiles.
struct TlsMaterial {
  std::string cert_chain, private_key, client_ca;  // PEM text as read
  std::string subject;    // the daemon certificate's subject, one line (RFC 2253)
  std::string not_after;  // its expiry, e.g. "Nov 30 19:00:00 2027 GMT"
  int client_ca_count = 0;
};

// Reads and checks the files: each readable; --tls_cert holds at least one PEM certificate (the
// first one is the daemon's), --tls_key a PEM private key that belongs to that certificate,
// --tls_client_ca (when set) at least one PEM certificate and nothing unparsable. Errors are
// INVALID_ARGUMENT with a one-line message that starts with the flag, e.g.
// "--tls_key=/etc/k.pem: the private key does not belong to the certificate in --tls_cert".
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files);

// Server credentials for TLS listeners that re-read their certificates on Reload().
class ReloadableTlsCredentials {
 public:
  // Checks `files` (LoadTlsMaterial) and builds the credentials: with files.client_ca set,
  // mutual TLS (clients must present a certificate signed by one of those CAs, verified; others
  // fail the handshake); without it, server-only TLS.
  static absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> Create(const TlsFiles& files);
  // The same from `material`, what LoadTlsMaterial(files) returned (devplaced checks the files
  // when it validates its flags and starts from what it read then): the files are not read again
  // until Reload().
  static absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> Create(const TlsFiles& files,
                                                                           TlsMaterial material);
  ~ReloadableTlsCredentials();

  // For ServerBuilder::AddListeningPort; every TLS listener shares them.
  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  bool mutual() const { return !files_.client_ca.empty(); }
  const TlsFiles& files() const { return files_; }

  // Re-reads and checks the files; when they are valid, new connections get them within about a
  // second (the provider's poll interval) and the new material is returned. Otherwise the error
  // (as LoadTlsMaterial) and the previous certificates stay in use.
  absl::StatusOr<TlsMaterial> Reload();

  // The material in use (as of the last successful Create/Reload).
  TlsMaterial current() const;

 private:
  explicit ReloadableTlsCredentials(TlsFiles files) : files_(std::move(files)) {}
  absl::Status Publish(const TlsMaterial& material) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TlsFiles files_;
  mutable absl::Mutex mu_;
  TlsMaterial current_ ABSL_GUARDED_BY(mu_);
  int identity_fd_ = -1;  // key + certificate chain, one PEM file (read atomically by gRPC)
  int ca_fd_ = -1;        // client CA bundle (mutual TLS only)
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

// The identity of a peer whose client certificate the daemon verified (a connection to a
// mutual-TLS listener): the certificate's subject alternative names joined with "," or, without
// them, its common name. nullopt for every other peer (unix socket, plaintext TCP, server-only
// TLS). This is how a handler tells an mTLS-authenticated remote caller:
//   MutualTlsPeerIdentity(*context->auth_context())
std::optional<std::string> MutualTlsPeerIdentity(const grpc::AuthContext& auth);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_TLS_H_
