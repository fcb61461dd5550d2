#include "server/service/liveness.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/common/address.h"

namespace devplace::service {

std::string LoopbackTarget(const std::string& address) {
  if (absl::StartsWith(address, "tls:")) return absl::StrCat("tls:", LoopbackTarget(address.substr(4)));
  const std::optional<Address> parsed = ParseAddress(address, AddressUse::kListen);
  if (!parsed.has_value() || parsed->is_unix) return address;
  if (parsed->host == "0.0.0.0") return absl::StrCat("127.0.0.1:", parsed->port);
  if (parsed->ipv6 && parsed->host == "::") return absl::StrCat("[::1]:", parsed->port);
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

// A TLS listener ("tls:host:port") cannot be asked for its health without a client certificate
// the daemon does not have, so it is checked one level down: connect, send bytes that are not a
// TLS handshake, and wait for the server to close the connection. A listener whose accept loop
// still runs reads them, fails the handshake and closes at once; one whose accept loop gave up
// leaves the connection in the kernel's backlog, unread, until the timeout.
grpc::Status CheckTlsOnce(const std::string& host_port, absl::Duration timeout) {
  const size_t colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), host_port.substr(colon + 1).c_str(), &hints, &found) != 0 || found == nullptr) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "cannot resolve " + host_port);
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int connect_errno = errno;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("connect: ", strerror(connect_errno)));
  }
  static constexpr char kNotAHandshake[] = "devplace-liveness\r\n\r\n";
  (void)!send(fd, kNotAHandshake, sizeof kNotAHandshake - 1, MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  char byte;
  const bool closed = ready > 0 && recv(fd, &byte, 1, 0) <= 0;
  close(fd);
  return closed ? grpc::Status::OK
                : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                               "the TLS listener accepted nothing: the connection stayed unread in the backlog");
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
      const grpc::Status status = absl::StartsWith(target, "tls:") ? CheckTlsOnce(target.substr(4), options_.timeout)
                                                                    : CheckOnce(target, options_.timeout);
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
