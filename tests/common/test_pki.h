// Certificates for TLS tests, made by the real `openssl` binary in a test's temporary directory:
// CAs and the server and client certificates they sign (EC P-256, valid for a day or two).
#ifndef DEVPLACE_TESTS_COMMON_TEST_PKI_H_
#define DEVPLACE_TESTS_COMMON_TEST_PKI_H_

#include <string>

namespace devplace::testing {

// A certificate and its private key, as PEM files.
struct CertFiles {
  std::string cert;  // <dir>/<name>.pem
  std::string key;   // <dir>/<name>.key
};

// Makes a self-signed CA `name` (CN=name) in `dir`. Aborts the test binary when openssl fails.
CertFiles MakeCa(const std::string& dir, const std::string& name);

// Makes `name` (CN=name) in `dir`, signed by `ca`: a server certificate (serverAuth) with the
// subject alternative names `san` (OpenSSL syntax, e.g. "IP:127.0.0.1,DNS:localhost"), or with
// `client` a client certificate (clientAuth; `san` may be empty). Aborts when openssl fails.
CertFiles MakeLeaf(const std::string& dir, const CertFiles& ca, const std::string& name, const std::string& san,
                   bool client);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_TEST_PKI_H_
