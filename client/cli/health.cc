// `devplace health`: SERVING or NOT_SERVING (grpc.health.v1), exit status 0 only when serving.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "devplace/client.h"

namespace devplace::cli {
namespace {

int RunHealth() {
  return WithClient([](Client& client) {
    absl::StatusOr<bool> serving = client.Health();
    if (!serving.ok()) return Fail(serving.status());
    const char* word = *serving ? "SERVING" : "NOT_SERVING";
    if (absl::GetFlag(FLAGS_json)) {
      if (const int printed = PrintJsonObject({{"status", word}}); printed != 0) return printed;
    } else {
      std::printf("%s\n", word);
    }
    return *serving ? 0 : kExitError;
  });
}

}  // namespace

Command HealthCommand() {
  return {"health", "Print SERVING or NOT_SERVING; exit status 0 only when serving.", "devplace health",
          "Calls grpc.health.v1.Health/Check for the whole server (service \"\").", {}, &RunHealth};
}

}  // namespace devplace::cli
