// Why a daemon could not be reached: see connect_diagnosis.h. The TLS half repeats the handshake
// with OpenSSL (the library gRPC itself uses on Debian), keeping what gRPC does not report: the
// peer's verification result and names, whether it asked for a client certificate, and the alert
// it sent back.
#include "client/connect_diagnosis.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace devplace::internal {
namespace {

// What to do about a daemon that does not answer: root may start it; an ordinary user cannot, and
// is told who can.
std::string StartHint() {
  if (::geteuid() == 0) {
    return "devplaced is probably not running: start it with `sudo systemctl start devplaced` (the package's unit) "
           "or run `devplaced`";
  }
  return "devplaced is not answering there (it is stopped, or restarting as a package upgrade does): try again in a "
         "moment, or ask the host's operator to check it";
}

}  // namespace

std::string NoAnswer(const std::string& target, absl::Duration waited) { return NoAnswer(target, waited, ::geteuid() == 0); }

std::string NoAnswer(const std::string& target, absl::Duration waited, bool root) {
  // Root may read the daemon's journal where it runs as the package's unit; an ordinary user
  // usually may not, and a daemon named by --address or DEVPLACE_ADDRESS may not run under systemd.
  const char* check = root ? "check it (`systemctl status devplaced` and `journalctl -u devplaced` where it runs as the "
                             "package's unit, else the log of whatever started it)"
                           : "ask the host's operator to check it";
  return absl::StrCat("devplaced at ", target, " did not answer within ", absl::FormatDuration(waited),
                      ": the daemon is not answering (stopped, hung or overloaded) or its host cannot be reached; ",
                      check,
                      ", check that it is the daemon meant (devplace --address, DEVPLACE_ADDRESS; "
                      "ConnectOptions::address), or allow more time (devplace --timeout=D; ConnectOptions::timeout)");
}

namespace {

// Blocks SIGPIPE in this thread while it lives and discards one raised meanwhile: OpenSSL writes
// with write(2), and a daemon that closed the connection must not kill the calling process.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int TimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout > absl::Seconds(3)) return 3000;
  return static_cast<int>(absl::ToInt64Milliseconds(timeout));
}

// The group `gid` by name, else by number.
std::string GroupName(gid_t gid) {
  group entry{}, *found = nullptr;
  std::vector<char> buffer(16384);
  if (::getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) return entry.gr_name;
  return absl::StrCat(gid);
}

}  // namespace

std::string PermissionFix(const std::string& fix) {
  return absl::StrCat(fix, "; meanwhile --address=127.0.0.1:7465 (DEVPLACE_ADDRESS) reaches the daemon over loopback "
                      "TCP where it listens there, as by default (a pick there needs --ttl)");
}

namespace {

std::string DiagnoseUnix(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {  // EACCES: CheckUnixSocket (trust.cc) said why before any call
    if (errno != ENOENT) return "";
    return absl::StrCat("no socket at ", path, ": ", StartHint());
  }
  Fd s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (s.fd < 0 || path.size() >= sizeof(addr.sun_path)) return "";
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return "";
  if (errno == EACCES) {
    const std::string group = GroupName(st.st_gid);
    return absl::StrCat("permission denied: the socket ", path, " (mode ", absl::StrFormat("%04o", st.st_mode & 07777),
                        ", owner uid ", st.st_uid, ", group ", group, ") does not let this user (uid ", ::geteuid(),
                        ") connect; ",
                        PermissionFix(absl::StrCat(
                            // Group root: nobody should be added to it; a group of the socket's own is the fix.
                            st.st_gid == 0 ? "the host's operator runs devplaced with --socket_group=GROUP (a group "
                                             "for devplace's users; the socket's group is root now) and adds the "
                                             "user to GROUP"
                                           : absl::StrCat("the host's operator adds the user to group ", group),
                            " (effective at the next login) or runs devplaced with --socket_mode=0666, its default")));
  }
  if (errno != ECONNREFUSED) return "";
  return absl::StrCat(path, " is a socket nobody accepts on (left behind by a devplaced that stopped): ", StartHint());
}

// host and port of a host:port / [v6]:port target (gRPC's dns:, ipv4:, ipv6: prefixes allowed).
bool SplitHostPort(absl::string_view target, std::string* host, std::string* port) {
  for (absl::string_view prefix : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, prefix)) break;
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == target.size()) return false;
  absl::string_view h = target.substr(0, colon);
  if (absl::ConsumePrefix(&h, "[")) absl::ConsumeSuffix(&h, "]");
  *host = std::string(h);
  *port = std::string(target.substr(colon + 1));
  return !host->empty();
}

// A connected TCP socket, or -1 with `why` set ("" when the cause is not one to report).
int DialTcp(const std::string& host, const std::string& port, int timeout_ms, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0 || found == nullptr) {
    if (error == EAI_NONAME || error == EAI_NODATA || error == EAI_AGAIN || error == EAI_FAIL) {
      *why = absl::StrCat("the host name ", host, " does not resolve (", ::gai_strerror(error), "): ",
                          error == EAI_AGAIN ? "the name server did not answer; try again, or " : "check the name, or ",
                          "dial the daemon's IP address (--address, DEVPLACE_ADDRESS)");
    }
    if (found != nullptr) ::freeaddrinfo(found);
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  const std::string where = absl::StrCat(host, ":", port);
  int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int error = 0;
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) != 1) {
        ::close(fd);
        *why = absl::StrCat(where, " accepted no connection within ", timeout_ms, " ms (a firewall, or the wrong host?)");
        return -1;
      }
      socklen_t len = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    }
  }
  if (error != 0) {
    ::close(fd);
    if (error == ECONNREFUSED) {
      *why = absl::StrCat("nothing listens on ", where, " (connection refused): ", StartHint(),
                          ", or it listens elsewhere (its --listen)");
    }
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// What a certificate says about itself: "subject CN=x, issued by CN=y".
std::string Describe(X509* cert) {
  char subject[256], issuer[256];
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
  X509_NAME_oneline(X509_get_issuer_name(cert), issuer, sizeof(issuer));
  return absl::StrCat("subject ", absl::StripPrefix(subject, "/"), ", issued by ", absl::StripPrefix(issuer, "/"));
}

// The certificate's DNS and IP subject alternative names ("DNS:localhost", "IP:127.0.0.1").
std::string Names(X509* cert) {
  std::vector<std::string> names;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type == GEN_DNS) {
      names.push_back(absl::StrCat("DNS:", reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.dNSName))));
    } else if (name->type == GEN_IPADD) {
      char text[INET6_ADDRSTRLEN] = "?";
      const int length = ASN1_STRING_length(name->d.iPAddress);
      ::inet_ntop(length == 16 ? AF_INET6 : AF_INET, ASN1_STRING_get0_data(name->d.iPAddress), text, sizeof(text));
      names.push_back(absl::StrCat("IP:", text));
    }
  }
  GENERAL_NAMES_free(sans);
  return names.empty() ? "no subject alternative names" : absl::StrJoin(names, ", ");
}

// The TLS alert the peer sent (its description code), or -1, from OpenSSL's error queue.
int ReceivedAlert() {
  int alert = -1;
  while (const unsigned long e = ERR_get_error()) {
    const int reason = ERR_GET_REASON(e);
    if (ERR_GET_LIB(e) == ERR_LIB_SSL && reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
      alert = reason - SSL_AD_REASON_OFFSET;
    }
  }
  return alert;
}

// Whether the daemon took the connection: it answers HTTP/2's client preface with its SETTINGS.
bool Accepted(SSL* ssl) {
  static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  char buffer[64];
  return SSL_write(ssl, kPreface, sizeof(kPreface) - 1) > 0 && SSL_read(ssl, buffer, sizeof(buffer)) > 0;
}

int NoteCertificateRequest(SSL* ssl, X509**, EVP_PKEY**) {
  *static_cast<bool*>(SSL_get_app_data(ssl)) = true;
  return 0;  // no certificate to offer
}

std::string DiagnoseTls(const std::string& host, const std::string& port, const TlsSettings& tls, int fd) {
  const std::string where = absl::StrCat(host, ":", port);
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr) return "";
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);  // verified below, to say what is wrong
  if (tls.ca.empty() ? SSL_CTX_set_default_verify_paths(ctx.get()) != 1
                     : SSL_CTX_load_verify_locations(ctx.get(), tls.ca.c_str(), nullptr) != 1) {
    return "";
  }
  if (!tls.cert.empty() && (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1 ||
                            SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1)) {
    return "";
  }
  bool asked_for_certificate = false;
  SSL_CTX_set_client_cert_cb(ctx.get(), &NoteCertificateRequest);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
  if (ssl == nullptr) return "";
  SSL_set_app_data(ssl.get(), &asked_for_certificate);
  static const unsigned char kAlpn[] = {2, 'h', '2'};  // gRPC servers insist on ALPN h2
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  const std::string sni = tls.server_name.empty() ? host : tls.server_name;
  in6_addr ip;
  const bool host_is_ip = ::inet_pton(AF_INET, host.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), &ip) == 1;
  if (!tls.server_name.empty() || !host_is_ip) SSL_set_tlsext_host_name(ssl.get(), sni.c_str());
  SSL_set_fd(ssl.get(), fd);
  ERR_clear_error();

  const std::string cert_fix =
      "pass --tls_cert and --tls_key (DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY): a client certificate issued by the CA "
      "in the daemon's --tls_client_ca";
  const bool handshake = SSL_connect(ssl.get()) == 1;
  const int handshake_alert = handshake ? -1 : ReceivedAlert();
  if (!tls.tls) {
    if (!handshake && handshake_alert < 0) return "";  // not a TLS listener either
    const bool wants_certificate = asked_for_certificate || !handshake || !Accepted(ssl.get());
    return absl::StrCat(where, " is a TLS listener (devplaced --listen=tls:...) and this client spoke plaintext: ",
                        "pass --tls_ca (DEVPLACE_TLS_CA), the CA that signed the daemon's certificate",
                        wants_certificate ? absl::StrCat("; the daemon also wants a client certificate: ", cert_fix)
                                          : "");
  }
  if (!handshake) {
    if (asked_for_certificate && tls.cert.empty()) {
      return absl::StrCat("the daemon at ", where, " requires a client certificate (mutual TLS) and none was given: ",
                          cert_fix);
    }
    if (handshake_alert >= 0) {
      return absl::StrCat("the daemon at ", where, " ended the TLS handshake (TLS alert: ",
                          SSL_alert_desc_string_long(handshake_alert), ")");
    }
    return absl::StrCat(where, " did not answer the TLS handshake: it is probably a plaintext listener; dial the "
                        "daemon's tls: listener, or leave out --tls_ca/--tls_cert (and DEVPLACE_TLS_*) for this one");
  }
  X509* peer = SSL_get0_peer_certificate(ssl.get());
  if (peer == nullptr) return "";
  if (const long verified = SSL_get_verify_result(ssl.get()); verified != X509_V_OK) {
    return absl::StrCat(
        "the daemon's certificate (", Describe(peer), ") is not trusted: ", X509_verify_cert_error_string(verified),
        tls.ca.empty() ? "; pass --tls_ca (DEVPLACE_TLS_CA), the CA that signed it"
                       : absl::StrCat(" with --tls_ca=", tls.ca, "; pass the CA that signed it (DEVPLACE_TLS_CA)"));
  }
  const bool named = !tls.server_name.empty() || !host_is_ip
                         ? X509_check_host(peer, sni.data(), sni.size(), 0, nullptr) == 1
                         : X509_check_ip_asc(peer, host.c_str(), 0) == 1;
  if (!named) {
    return absl::StrCat("the daemon's certificate names ", Names(peer), ", not ", sni,
                        ": dial one of those names, or pass --tls_server_name=NAME (DEVPLACE_TLS_SERVER_NAME) "
                        "with a name it carries");
  }
  // TLS 1.3 settles client certificates after the client's side of the handshake: speak HTTP/2.
  // A gRPC daemon that accepts answers with its SETTINGS frame; one that refuses the client's
  // certificate closes the connection (gRPC does not always send the alert first).
  if (Accepted(ssl.get())) return "";
  const int alert = ReceivedAlert();
  const std::string told = alert >= 0 ? absl::StrCat(", TLS alert: ", SSL_alert_desc_string_long(alert)) : "";
  if (tls.cert.empty()) {
    return absl::StrCat("the daemon at ", where, " requires a client certificate (mutual TLS) and none was given: ",
                        cert_fix);
  }
  std::string described;
  if (X509* mine = SSL_get_certificate(ssl.get()); mine != nullptr) described = absl::StrCat(" (", Describe(mine), ")");
  return absl::StrCat("the daemon at ", where, " refused the client certificate --tls_cert=", tls.cert, described, told,
                      "; use one issued by the CA in the daemon's --tls_client_ca");
}

// Whether the client certificate and key given go together; "" when they do (or cannot be read:
// Client::Connect reported that), else the sentence that says they do not.
std::string CheckClientKeyPair(const TlsSettings& tls) {
  if (tls.cert.empty() || tls.key.empty()) return "";
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr || SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1) return "";
  ERR_clear_error();
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) == 1) return "";
  bool mismatch = false;
  while (const unsigned long e = ERR_get_error()) {
    mismatch = mismatch || (ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH);
  }
  if (!mismatch) return "";
  X509* cert = SSL_CTX_get0_certificate(ctx.get());
  return absl::StrCat("the private key --tls_key=", tls.key, " does not belong to the client certificate --tls_cert=",
                      tls.cert, cert != nullptr ? absl::StrCat(" (", Describe(cert), ")") : "",
                      ": pass the key that was made with that certificate (DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY)");
}

}  // namespace

std::string DiagnoseUnreachable(const std::string& target, const TlsSettings& tls, absl::Duration timeout) {
  absl::string_view rest = target;
  if (absl::ConsumePrefix(&rest, "unix:")) {
    if (absl::StartsWith(rest, "//")) rest.remove_prefix(2);
    return DiagnoseUnix(std::string(rest));
  }
  if (absl::StartsWith(rest, "unix-abstract:")) return "";
  std::string host, port, why;
  if (!SplitHostPort(rest, &host, &port)) return "";
  if (tls.tls) {
    if (std::string mismatch = CheckClientKeyPair(tls); !mismatch.empty()) return mismatch;
  }
  Fd fd{DialTcp(host, port, TimeoutMs(timeout), &why)};
  if (fd.fd < 0) return why;
  NoSigpipe no_sigpipe;
  return DiagnoseTls(host, port, tls, fd.fd);
}

}  // namespace devplace::internal
