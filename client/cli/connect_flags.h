// The devplace CLI's connection flags (--address, --timeout, --tls_ca, --tls_cert, --tls_key,
// --tls_server_name) turned into libdevplace ConnectOptions, in one place for every command that
// talks to daemons (the single-daemon commands, and `fleet`), and WithClient() that connects
// with them.
#ifndef DEVPLACE_CLIENT_CLI_CONNECT_FLAGS_H_
#define DEVPLACE_CLIENT_CLI_CONNECT_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/client.h"

ABSL_DECLARE_FLAG(std::string, address);  // empty: DefaultTarget()

namespace devplace::cli {

// What --address and `fleet --targets` accept (ParseAddress with AddressUse::kDial,
// server/common/address.h), for their error lines.
inline constexpr const char* kTargetForms = "want host:port, [v6]:port (port 1..65535) or unix:/absolute/path";

// The longest --timeout accepted: a day. A call to a per-host daemon answers in milliseconds, a pick
// waits on its own --wait; a longer deadline is a typo (1h99999999h), and 0 is the way to ask for none.
inline constexpr absl::Duration kMaxTimeout = absl::Hours(24);

// The usage error for a parsed --timeout (written `typed`) outside 0 (none) or (0, kMaxTimeout], e.g.
// "-1s", which would wait without end on a daemon that is down, or "" when it is in range.
std::string TimeoutFlagError(const std::string& typed);

// The names of the connection flags, for help texts and the per-command allowed-flag check.
const std::vector<const char*>& ConnectFlagNames();

// ConnectOptions from the parsed flags: address (empty = DefaultTarget()), timeout, tls_ca,
// tls_cert, tls_key, tls_server_name. Empty TLS flags are left for DEVPLACE_TLS_* to fill (see
// ConnectOptions); nothing is read or checked here: Client::Connect checks the files.
ConnectOptions ConnectOptionsFromFlags();

// The usage-error text for a Client::Connect error caused by these options, naming the flag:
// "--tls_ca=/x.pem: cannot read: No such file or directory", "DEVPLACE_TLS_KEY=/k.pem: ..." (a
// value from the environment), or "--address: ..." for a malformed address.
std::string ConnectFlagError(const absl::Status& connect_error);

// Connects a Client with ConnectOptionsFromFlags() and returns `command`'s exit status on it.
// Before any call: UsageError() (exit 2) for a malformed --address or an unusable TLS file, named
// by ConnectFlagError(); Fail() (exit 1) for another Connect error (e.g. an unsafe unix socket).
int WithClient(absl::FunctionRef<int(Client&)> command);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_CONNECT_FLAGS_H_
