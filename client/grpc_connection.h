// libdevplace's internal interface between Client::Connect (client.cc) and the gRPC Connection
// (grpc_connection.cc). Not installed: the public API is include/devplace/client.h.
#ifndef DEVPLACE_CLIENT_GRPC_CONNECTION_H_
#define DEVPLACE_CLIENT_GRPC_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devplace/client.h"

namespace devplace::internal {

// The note appended to UNAVAILABLE errors: the target, where it came from (`origin`), and the
// default candidates passed over (`notes`, from DefaultTarget), with a leading space, naming the
// caller's way to choose the daemon (`address_option`: ConnectOptions::address, or the CLI's --address):
// " [devplace target T (ORIGIN); passed over: ...; set DEVPLACE_ADDRESS or OPTION to choose the daemon]".
std::string TargetNote(const std::string& target, const std::string& origin, const std::vector<std::string>& notes,
                       const std::string& address_option);

// A gRPC Connection to `target` as given (no socket check here): plaintext for unix: targets,
// TLS for host:port when ConnectOptions' tls_ca or tls_cert (each empty field filled from its
// DEVPLACE_TLS_* variable) is set; unary calls under options.timeout, watches under
// options.watch_timeout. `note` is appended to UNAVAILABLE errors when the daemon could not be
// reached. INVALID_ARGUMENT for unusable TLS settings (a file unreadable or without its PEM
// block, a certificate without its key), the message starting with the option or the variable
// (`tls_ca=PATH: ...`, `DEVPLACE_TLS_CA=PATH: ...`); nothing is dialled before the first call.
absl::StatusOr<std::shared_ptr<Connection>> ConnectGrpc(const std::string& target, const ConnectOptions& options,
                                                        std::string note);

}  // namespace devplace::internal

#endif  // DEVPLACE_CLIENT_GRPC_CONNECTION_H_
