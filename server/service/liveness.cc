#include "server/service/liveness.h"

#include <netdb.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel_posix.h"
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

// A connected socket to `target` ("unix:/path" or host:port), made within `timeout`; its local
// port is registered in `self` (TCP) until the returned guard is destroyed.
class OwnConnection {
 public:
  OwnConnection(const std::string& target, absl::Duration timeout, SelfConnections* self) : self_(self) {
    int family = AF_UNIX;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (absl::StartsWith(target, "unix:")) {
      auto* un = reinterpret_cast<sockaddr_un*>(&ss);
      un->sun_family = AF_UNIX;
      const std::string path = target.substr(5);
      if (path.size() >= sizeof un->sun_path) {
        error_ = "socket path too long";
        return;
      }
      std::memcpy(un->sun_path, path.c_str(), path.size() + 1);
      len = sizeof *un;
    } else {
      const size_t colon = target.rfind(':');
      std::string host = target.substr(0, colon);
      if (absl::StartsWith(host, "[")) host = host.substr(1, host.size() - 2);
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      if (getaddrinfo(host.c_str(), target.substr(colon + 1).c_str(), &hints, &found) != 0 || found == nullptr) {
        error_ = "cannot resolve " + target;
        return;
      }
      family = found->ai_family;
      std::memcpy(&ss, found->ai_addr, found->ai_addrlen);
      len = found->ai_addrlen;
      freeaddrinfo(found);
    }
    fd_ = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) {
      error_ = absl::StrCat("socket: ", strerror(errno));
      return;
    }
    if (family != AF_UNIX) {  // bind first, so the port is known before the listener can accept
      sockaddr_storage local{};
      local.ss_family = static_cast<sa_family_t>(family);
      sockaddr_storage bound{};
      socklen_t blen = sizeof bound;
      if (bind(fd_, reinterpret_cast<sockaddr*>(&local), family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)) ==
              0 &&
          getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &blen) == 0) {
        port_ = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
        if (self_ != nullptr) self_->Add(port_);
      }
    }
    if (connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
      error_ = absl::StrCat("connect: ", strerror(errno));
      return;
    }
    pollfd p{fd_, POLLOUT, 0};
    int soerr = 0;
    socklen_t slen = sizeof soerr;
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) {
      error_ = "connect: timed out";
    } else if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &soerr, &slen) != 0 || soerr != 0) {
      error_ = absl::StrCat("connect: ", strerror(soerr));
    }
  }
  ~OwnConnection() {
    if (fd_ >= 0) close(fd_);
    if (port_ != 0 && self_ != nullptr) self_->Remove(port_);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // Hands the descriptor over (to gRPC); the port stays registered until this is destroyed.
  int Release() { return std::exchange(fd_, -1); }
  int fd() const { return fd_; }

 private:
  SelfConnections* self_;
  int fd_ = -1;
  int port_ = 0;
  std::string error_;
};

// One Health/Check over a connection of its own. Any answer, NOT_SERVING included, proves the
// listener accepts and gRPC serves on it.
grpc::Status CheckOnce(const std::string& target, absl::Duration timeout, SelfConnections* self) {
  const absl::Time deadline = absl::Now() + timeout;
  OwnConnection conn(target, timeout, self);
  if (!conn.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, conn.error());
  auto channel = grpc::CreateInsecureChannelFromFd(target, conn.Release());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response);
}

// A TLS listener ("tls:host:port") cannot be asked for its health without a client certificate
// the daemon does not have, so it is checked one level down: connect from a port registered in
// `self`, and wait for the listener to close the connection, which its accept loop does at
// accept for the daemon's own checks. One whose accept loop stopped leaves the connection in the
// kernel's backlog, unread, until the timeout.
grpc::Status CheckTlsOnce(const std::string& host_port, absl::Duration timeout, SelfConnections* self) {
  const absl::Time deadline = absl::Now() + timeout;
  OwnConnection conn(host_port, timeout, self);
  if (!conn.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, conn.error());
  pollfd p{conn.fd(), POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()))));
  char byte;
  const bool closed = ready > 0 && recv(conn.fd(), &byte, 1, 0) <= 0;
  return closed ? grpc::Status::OK
                : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                               "the TLS listener accepted nothing: the connection stayed unread in the backlog");
}

}  // namespace

void ListenerLiveness::Loop() {
  std::map<std::string, int> failures;
  std::vector<uint64_t> seen(options_.targets.size(), 0);
  for (size_t i = 0; i < options_.progress.size() && i < seen.size(); ++i) {
    if (options_.progress[i]) seen[i] = options_.progress[i]();
  }
  uint64_t answered = options_.answered ? options_.answered() : 0;
  bool dead = false;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval)) return;
    }
    // Calls answered since the previous round: the handlers make progress.
    bool answering = false;
    if (options_.answered) {
      const uint64_t now = options_.answered();
      answering = now > answered;
      answered = now;
    }
    for (size_t i = 0; i < options_.targets.size(); ++i) {
      const std::string& target = options_.targets[i];
      const grpc::Status status = absl::StartsWith(target, "tls:")
                                      ? CheckTlsOnce(target.substr(4), options_.timeout, options_.self)
                                      : CheckOnce(target, options_.timeout, options_.self);
      // A failed check means busy, not dead, when the listener accepted connections besides this
      // round's own check, or accepted and the daemon answered calls (liveness.h).
      bool busy = false;
      if (i < options_.progress.size() && options_.progress[i]) {
        const uint64_t now = options_.progress[i]();
        busy = now > seen[i] + 1 || (now > seen[i] && answering);
        seen[i] = now;
      }
      if (status.ok()) {
        failures[target] = 0;
        continue;
      }
      const std::string error =
          absl::StrCat(busy ? "busy: " : "", status.error_code(), " ", status.error_message());
      if (options_.on_failure) options_.on_failure(target, error);
      if (busy) continue;
      if (++failures[target] >= options_.max_failures && !dead) {
        dead = true;
        if (options_.on_dead) options_.on_dead(target, error);
      }
    }
  }
}

}  // namespace devplace::service
