// The connection flags (--address, --timeout, --tls_*) and the Client they describe.
#include "client/cli/connect_flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "server/common/address.h"

ABSL_FLAG(std::string, address, "",
          "The daemon's gRPC target: unix:/path/to.sock or host:port. Default: env DEVPLACE_ADDRESS, "
          "else the first of unix:/run/devplace/devplace.sock, unix:$XDG_RUNTIME_DIR/devplace.sock and "
          "unix:/tmp/devplace-<uid>/devplace.sock that exists and is safe, else 127.0.0.1:7465. A unix socket "
          "is used only when its directory is owned by root or you and not writable by others (unless "
          "sticky), and the socket is owned by root or you; DEVPLACE_ADDRESS and --address are checked too");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "Deadline of each call to the daemon, e.g. 200ms, 5s, up to 24h (0 = none; watch never has one)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signs the daemon's certificate: talk TLS to a tls: listener (host:port targets "
          "only; unix sockets stay plaintext). Default: env DEVPLACE_TLS_CA; with only --tls_cert, gRPC's "
          "default roots");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for mutual TLS (with --tls_key). Default: env DEVPLACE_TLS_CERT");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert. Default: env DEVPLACE_TLS_KEY");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the daemon's certificate must carry when it differs from the --address host (e.g. node1 when "
          "dialling 10.0.0.5:7466). Default: env DEVPLACE_TLS_SERVER_NAME, else the address's host");

namespace devplace::cli {

const std::vector<const char*>& ConnectFlagNames() {
  static const std::vector<const char*>* const kNames =
      new std::vector<const char*>{"address", "timeout", "tls_ca", "tls_cert", "tls_key", "tls_server_name"};
  return *kNames;
}

std::string TimeoutFlagError(const std::string& typed) {
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout >= absl::ZeroDuration() && timeout <= kMaxTimeout) return "";
  return absl::StrCat("--timeout=", typed, ": want 0 (no deadline) or a positive duration up to ",
                      absl::FormatDuration(kMaxTimeout), ", e.g. 200ms, 5s, 1m");
}

ConnectOptions ConnectOptionsFromFlags() {
  ConnectOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.address_option = "--address";  // the CLI's users choose the daemon with the flag
  return options;
}

std::string ConnectFlagError(const absl::Status& connect_error) {
  const std::string message(connect_error.message());
  // libdevplace starts TLS errors with the option's name, which is the flag's name here.
  if (absl::StartsWith(message, "tls_")) return absl::StrCat("--", message);
  if (absl::StartsWith(message, "DEVPLACE_TLS_")) return message;
  return absl::StrCat("--address: ", message);
}

int WithClient(absl::FunctionRef<int(Client&)> command) {
  if (const std::string address = absl::GetFlag(FLAGS_address); !address.empty() && !ParseAddress(address, AddressUse::kDial)) {
    return UsageError(g_command, absl::StrCat("--address=", address, ": ", kTargetForms));
  }
  // The variable that stands for --address is checked as strictly (a bare path is no DNS name).
  if (const char* env = std::getenv("DEVPLACE_ADDRESS");
      absl::GetFlag(FLAGS_address).empty() && env != nullptr && *env != '\0' && !ParseAddress(env, AddressUse::kDial)) {
    return UsageError(g_command, absl::StrCat("DEVPLACE_ADDRESS=", env, " (from the environment): ", kTargetForms));
  }
  absl::StatusOr<Client> client = Client::Connect(ConnectOptionsFromFlags());
  if (!client.ok() && client.status().code() == absl::StatusCode::kInvalidArgument) {
    return UsageError(g_command, ConnectFlagError(client.status()));
  }
  if (!client.ok()) return Fail(client.status());  // e.g. an unsafe unix socket refused
  return command(*client);
}

}  // namespace devplace::cli
