#include "server/service/tls.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/common/address.h"
#include "server/common/host_file.h"

namespace devplace::service {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, PkeyFree>;

absl::Status Bad(absl::string_view flag, absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": ", what));
}

absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Bad(flag, path, absl::StrCat("cannot read: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return Bad(flag, path, "not a regular file");
  // At most kHostFileMaxBytes (1 MiB: a CA bundle of every public root is about 200 KiB).
  absl::StatusOr<std::string> content = ReadHostFile(path);
  if (!content.ok()) return Bad(flag, path, content.status().message());
  if (content->empty()) return Bad(flag, path, "the file is empty; want PEM");
  return content;
}

// Every PEM certificate in `pem`, in order; an error when there is none or a block is broken.
absl::StatusOr<std::vector<Cert>> ParseCertificates(absl::string_view flag, const std::string& path,
                                                    const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<Cert> certs;
  ERR_clear_error();
  for (;;) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    certs.push_back(std::move(cert));
  }
  const unsigned long error = ERR_peek_last_error();
  ERR_clear_error();
  // Running out of blocks ends the loop with PEM_R_NO_START_LINE; anything else is a broken one.
  if (error != 0 && !(ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE)) {
    return Bad(flag, path, absl::StrCat("a PEM certificate does not parse (", ERR_reason_error_string(error), ")"));
  }
  if (certs.empty()) return Bad(flag, path, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  return certs;
}

std::string Subject(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string NotAfter(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), X509_get0_notAfter(cert));
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// A close-on-exec memory file holding `content`, its mtime distinct from every earlier one (gRPC's
// file watcher compares mtimes, in seconds, before and after reading to detect a swap).
absl::StatusOr<int> MemoryFile(const char* name, const std::string& content, int64_t generation) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("writing a memory file: ", std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  const struct timespec times[2] = {{static_cast<time_t>(generation), 0}, {static_cast<time_t>(generation), 0}};
  ::futimens(fd, times);
  return fd;
}

std::string FdPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

}  // namespace

bool IsLoopbackListenAddress(absl::string_view host_port) {
  const std::optional<Address> address = ParseAddress(host_port, AddressUse::kListen);
  return address.has_value() && !address->is_unix && IsLoopbackHost(address->host);
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(files.cert.empty() ? "--tls_cert" : "--tls_key",
                                                   " is required for a TLS listener (PEM file)"));
  }
  TlsMaterial material;
  absl::StatusOr<std::string> cert_pem = ReadPem("tls_cert", files.cert);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::vector<Cert>> chain = ParseCertificates("tls_cert", files.cert, *cert_pem);
  if (!chain.ok()) return chain.status();
  X509* leaf = chain->front().get();
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    return Bad("tls_cert", files.cert, absl::StrCat("the certificate expired (", NotAfter(leaf), ")"));
  }

  absl::StatusOr<std::string> key_pem = ReadPem("tls_key", files.key);
  if (!key_pem.ok()) return key_pem.status();
  Bio key_bio(BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size())));
  // An empty passphrase callback: an encrypted key fails here instead of prompting on the tty.
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return Bad("tls_key", files.key, "holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return Bad("tls_key", files.key,
               absl::StrCat("the private key does not belong to the certificate in --tls_cert=", files.cert));
  }
  material.cert_chain = *std::move(cert_pem);
  material.private_key = *std::move(key_pem);
  material.subject = Subject(leaf);
  material.not_after = NotAfter(leaf);

  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadPem("tls_client_ca", files.client_ca);
    if (!ca_pem.ok()) return ca_pem.status();
    absl::StatusOr<std::vector<Cert>> cas = ParseCertificates("tls_client_ca", files.client_ca, *ca_pem);
    if (!cas.ok()) return cas.status();
    material.client_ca_count = static_cast<int>(cas->size());
    material.client_ca = *std::move(ca_pem);
  }
  return material;
}

absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> ReloadableTlsCredentials::Create(const TlsFiles& files) {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(files);
  if (!material.ok()) return material.status();
  return Create(files, *std::move(material));
}

absl::StatusOr<std::unique_ptr<ReloadableTlsCredentials>> ReloadableTlsCredentials::Create(const TlsFiles& files,
                                                                                           TlsMaterial material) {
  std::unique_ptr<ReloadableTlsCredentials> tls(new ReloadableTlsCredentials(files));
  {
    absl::MutexLock lock(&tls->mu_);
    if (absl::Status s = tls->Publish(material); !s.ok()) return s;
  }
  // One file holds key and chain, so the watcher never pairs a new key with an old certificate.
  const std::string identity = FdPath(tls->identity_fd_);
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      identity, identity, tls->ca_fd_ >= 0 ? FdPath(tls->ca_fd_) : std::string(), /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (tls->mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  tls->credentials_ = grpc::experimental::TlsServerCredentials(options);
  return tls;
}

ReloadableTlsCredentials::~ReloadableTlsCredentials() {
  credentials_.reset();
  if (identity_fd_ >= 0) ::close(identity_fd_);
  if (ca_fd_ >= 0) ::close(ca_fd_);
}

absl::Status ReloadableTlsCredentials::Publish(const TlsMaterial& material) {
  // mtimes strictly increase from now on (seconds).
  generation_ = std::max(generation_ + 1, absl::ToUnixSeconds(absl::Now()));
  absl::StatusOr<int> identity =
      MemoryFile("devplace-tls-identity", absl::StrCat(material.private_key, "\n", material.cert_chain), generation_);
  if (!identity.ok()) return identity.status();
  absl::StatusOr<int> ca = -1;
  if (!material.client_ca.empty()) {
    ca = MemoryFile("devplace-tls-client-ca", material.client_ca, generation_);
    if (!ca.ok()) {
      ::close(*identity);
      return ca.status();
    }
  }
  // dup3 replaces the descriptor atomically: an open of /proc/self/fd/N sees the old file or the new one.
  auto install = [](int fresh, int& slot) {
    if (slot < 0) {
      slot = fresh;
      return;
    }
    ::dup3(fresh, slot, O_CLOEXEC);
    ::close(fresh);
  };
  install(*identity, identity_fd_);
  if (*ca >= 0) install(*ca, ca_fd_);
  current_ = material;
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> ReloadableTlsCredentials::Reload() {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(files_);
  if (!material.ok()) return material.status();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Publish(*material); !s.ok()) return s;
  return material;
}

TlsMaterial ReloadableTlsCredentials::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::optional<std::string> MutualTlsPeerIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return std::nullopt;
  const std::vector<grpc::string_ref> type = auth.FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  // TlsServerCredentials say "tls"; SslServerCredentials "ssl".
  if (type.empty() || (type.front() != GRPC_TLS_TRANSPORT_SECURITY_TYPE && type.front() != GRPC_SSL_TRANSPORT_SECURITY_TYPE)) {
    return std::nullopt;
  }
  if (auth.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty()) return std::nullopt;
  std::vector<std::string> names;
  for (const grpc::string_ref& name : auth.GetPeerIdentity()) names.emplace_back(name.data(), name.size());
  return absl::StrJoin(names, ",");
}

}  // namespace devplace::service
