// libdevplace, internal: why a daemon could not be reached, found out by trying it directly after
// gRPC reported UNAVAILABLE (gRPC's own text says "Socket closed" for most TLS mistakes). Not
// installed.
#ifndef DEVPLACE_CLIENT_CONNECT_DIAGNOSIS_H_
#define DEVPLACE_CLIENT_CONNECT_DIAGNOSIS_H_

#include <string>

#include "absl/time/time.h"

namespace devplace::internal {

// The TLS settings a channel was made with, after the DEVPLACE_TLS_* fill; `tls` false for a
// plaintext channel.
struct TlsSettings {
  bool tls = false;
  std::string ca, cert, key, server_name;
};

// One sentence naming why `target` did not answer and what fixes it, or "" when no cause is found
// (the daemon answered after all, or the target is not a unix: or host:port target). It dials the
// target once (a unix socket: connect(); host:port: a TCP connection and, where it helps, a TLS
// handshake with OpenSSL, within `timeout`) and tells apart:
//   - a host name that does not resolve (DNS);
//   - a client key that does not belong to the client certificate (checked before dialling);
//   - nothing listening (no socket file, a stale socket, connection refused): for root, devplaced
//     is probably not running, and the command that starts it; for any other user, that devplaced
//     is not answering there and to ask the host's operator (such a user cannot start it);
//   - a unix socket this user may not connect to: the socket's mode, owner and group, then the
//     fixes (the group, --socket_mode, loopback TCP);
//   - a plaintext client at a TLS listener: --tls_ca (DEVPLACE_TLS_CA);
//   - a TLS client at a plaintext listener;
//   - a daemon certificate not signed by a CA in tls_ca (or the system roots): --tls_ca;
//   - a daemon certificate that does not name the host dialled: --tls_server_name;
//   - a daemon that requires a client certificate and got none: --tls_cert / --tls_key;
//   - a daemon that refused the client certificate given (not from its --tls_client_ca).
std::string DiagnoseUnreachable(const std::string& target, const TlsSettings& tls, absl::Duration timeout);

// One sentence for a call to `target` that got no answer within `waited` (its deadline passed:
// gRPC's bare "Deadline Exceeded"): the daemon is stopped (SIGSTOP), hung or overloaded, or the host
// cannot be reached; then what to do: for root (`root`, by default geteuid() == 0), check it with
// `systemctl status devplaced` and its journal; for any other user, who usually may not read that
// journal, ask the host's operator (as DiagnoseUnreachable's start hint); for both, check the address
// (--address, DEVPLACE_ADDRESS) or allow more time (--timeout). The Python client says the same in
// its own terms (_connect_diagnosis.no_answer: address=, timeout=).
std::string NoAnswer(const std::string& target, absl::Duration waited);
std::string NoAnswer(const std::string& target, absl::Duration waited, bool root);

// `fix` (what the host's operator can change so that this user may connect to a unix socket), then
// what works meanwhile: loopback TCP, where a pick needs --ttl. For DiagnoseUnreachable and
// CheckUnixSocket (trust.cc); the Python client says the same (_connect_diagnosis.permission_fix).
std::string PermissionFix(const std::string& fix);

}  // namespace devplace::internal

#endif  // DEVPLACE_CLIENT_CONNECT_DIAGNOSIS_H_
