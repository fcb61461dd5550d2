#include "server/service/liveness.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace devplace::service {

std::string LoopbackTarget(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return address;
  const std::string host = address.substr(0, colon);
  if (host == "0.0.0.0" || host.empty()) return absl::StrCat("127.0.0.1", address.substr(colon));
  if (host == "[::]") return absl::StrCat("[::1]", address.substr(colon));
  return address;
}

ListenerLiveness::ListenerLiveness(LivenessOptions options) : options_(std::move(options)) {}

ListenerLiveness::~ListenerLiveness() { Stop(); }

void ListenerLiveness::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void ListenerLiveness::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

namespace {

// One Health/Check over a connection of its own (a local subchannel pool: never a connection
// another channel already holds). Any answer, NOT_SERVING included, proves the listener accepts.
grpc::Status CheckOnce(const std::string& target, absl::Duration timeout) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  ctx.set_wait_for_ready(true);  // a refused connection is retried until the deadline, not failed at once
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response);
}

}  // namespace

void ListenerLiveness::Loop() {
  std::map<std::string, int> failures;
  bool dead = false;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval)) return;
    }
    for (const std::string& target : options_.targets) {
      const grpc::Status status = CheckOnce(target, options_.timeout);
      if (status.ok()) {
        failures[target] = 0;
        continue;
      }
      const std::string error =
          absl::StrCat(status.error_code(), " ", status.error_message());
      if (options_.on_failure) options_.on_failure(target, error);
      if (++failures[target] >= options_.max_failures && !dead) {
        dead = true;
        if (options_.on_dead) options_.on_dead(target, error);
      }
    }
  }
}

}  // namespace devplace::service
