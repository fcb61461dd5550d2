// Addresses as devplace writes them, parsed in one place for every user: devplaced's --listen
// and --metrics_listen, the CLI's --address and `fleet --targets`, and the loopback test behind
// the daemon's refusal of plaintext remote listeners and remote /metrics. The forms (no scheme, no gRPC URI prefixes such as dns:):
//   unix:/absolute/path.sock          a unix-domain socket
//   host:port                         host: a name or IPv4 address (letters, digits, '.', '-', '_')
//   [ipv6]:port                       e.g. [::1]:7465, [fe80::1%eth0]:7465
// Ports are decimal: 1..65535 to dial, 0..65535 to listen (0: the kernel picks a free port).
#ifndef DEVPLACE_SERVER_COMMON_ADDRESS_H_
#define DEVPLACE_SERVER_COMMON_ADDRESS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace devplace {

struct Address {
  bool is_unix = false;
  std::string path;    // is_unix: the absolute socket path
  std::string host;    // otherwise: the host as written, IPv6 without its brackets
  bool ipv6 = false;   // the host was written in brackets
  int port = 0;        // 0..65535
};

enum class AddressUse {
  kListen,  // port 0..65535; the unix path must start with exactly one '/'
  kDial,    // port 1..65535; gRPC's unix:///absolute/path is accepted and means unix:/absolute/path
};

// The address `text` names, or nullopt when it is none of the forms above for `use`.
std::optional<Address> ParseAddress(absl::string_view text, AddressUse use);

// Whether a TCP listener could bind `address` (host:port, as ParseAddress reads it) now: binds a
// socket (SO_REUSEADDR, as gRPC and civetweb do) to each address the host resolves to and closes
// it. OK for port 0. Otherwise UNAVAILABLE "cannot bind HOST:PORT: <errno text>" (e.g. "Address
// already in use", "Permission denied" for a privileged port), or "cannot resolve HOST: ...". Lets a
// daemon report a busy port as one line of its own before a library tries and logs its own text.
absl::Status CheckTcpBindable(const Address& address);

// Whether a TCP address's host can only be reached from this machine: "localhost" (any case),
// 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. Names other than localhost are not resolved: false.
bool IsLoopbackHost(absl::string_view host);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_ADDRESS_H_
