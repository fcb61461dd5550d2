#include "server/service/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/server.h"
#include "server/common/safe_directory.h"
#include "server/service/lease_holder.h"
#include "grpcpp/server_posix.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace devplace::service {
namespace {

std::string Errno(int e) { return std::strerror(e); }

// A gRPC client's first bytes on a connection: the HTTP/2 client connection preface,
// "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 section 3.4).
constexpr size_t kHttp2PrefaceBytes = 24;

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  *addr = {};
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

// Whether some process accepts connections on the socket at `path`.
bool Live(const std::string& path) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return false;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) close(fd);
  return live;
}

PeerCredentials ReadCredentials(int fd) {
  PeerCredentials c;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    c.pid = cred.pid;
    c.uid = cred.uid;
    c.gid = cred.gid;
  } else {  // unknown: nobody's credentials, which the policy refuses
    c.uid = c.gid = static_cast<uid_t>(-1);
  }
  std::vector<gid_t> groups(64);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0 && errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t) + 1);
    glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0) glen = 0;
  }
  groups.resize(glen / sizeof(gid_t));
  c.groups = std::move(groups);
  if (const std::optional<ProcessIdentity> process = ReadProcess(c.pid); process && process->uid == c.uid) {
    c.start_time = process->start_time;
  }
  return c;
}

// Creates the socket's directory (mode 0755) when it is missing, `create` is set and its parent
// exists (no mkdir -p).
absl::Status MakeDirectory(const std::string& dir, bool create) {
  struct stat st;
  if (!create || stat(dir.c_str(), &st) == 0 || errno != ENOENT) return absl::OkStatus();
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create socket directory ", dir, ": ", Errno(errno)));
  }
  chmod(dir.c_str(), 0755);  // whatever the umask
  return absl::OkStatus();
}

}  // namespace

void PeerRegistry::Set(const std::string& peer, PeerCredentials credentials) {
  absl::MutexLock lock(&mu_);
  peers_[peer] = std::move(credentials);
}

std::optional<PeerCredentials> PeerRegistry::Find(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  const auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

absl::Status CheckSocketDirectory(const std::string& dir, uid_t owner_ok) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("socket directory ", dir, ": ", Errno(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  return CheckSafeDirectory(st, absl::StrCat("socket directory ", dir), owner_ok,
                            "another user could replace the socket");
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const Options& options) {
  const std::string& path = options.path;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (absl::Status s = MakeDirectory(dir.string(), options.create_directory); !s.ok()) return s;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        "socket directory ", dir.string(), " does not exist (devplaced creates only its default runtime "
        "directory; create this one, e.g. with systemd's RuntimeDirectory=, or choose another path)"));
  }
  if (absl::Status s = CheckSocketDirectory(dir.string(), geteuid()); !s.ok()) return s;
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": a non-socket file exists at this path"));
    }
    if (Live(path)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path, ": another process is serving on this socket (a devplaced already running?)"));
    }
    unlink(path.c_str());  // stale
  }
  std::unique_ptr<UnixListener> listener(new UnixListener(options));
  if (pipe2(listener->wake_, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError(Errno(errno));
  if (absl::Status s = listener->BindNew(); !s.ok()) return s;
  return listener;
}

absl::Status UnixListener::BindNew() {
  const std::string& path = options_.path;
  sockaddr_un addr;
  FillAddress(path, &addr);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno(errno)));
  // The socket file is born 0600 (umask 0177): no moment with a mode wider than the final one.
  const mode_t old_mask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(old_mask);
  if (bound != 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot bind ", path, ": ", Errno(bind_errno)));
  }
  if (options_.gid != static_cast<gid_t>(-1) && chown(path.c_str(), static_cast<uid_t>(-1), options_.gid) != 0) {
    const int e = errno;
    close(fd);
    unlink(path.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot give ", path, " group ", options_.gid, ": ", Errno(e)));
  }
  struct stat st;
  if (chmod(path.c_str(), options_.mode) != 0 || listen(fd, SOMAXCONN) != 0 || stat(path.c_str(), &st) != 0) {
    const int e = errno;
    close(fd);
    unlink(path.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot set up ", path, ": ", Errno(e)));
  }
  int old = -1;
  {
    absl::MutexLock lock(&mu_);
    old = fd_;
    fd_ = fd;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  if (old >= 0) {
    (void)!write(wake_[1], "r", 1);  // the loop polls the new descriptor from now on
    // The old descriptor is closed by the accept loop once it stopped polling it.
  }
  return absl::OkStatus();
}

UnixListener::~UnixListener() {
  Stop();
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void UnixListener::Start(grpc::Server* server, PeerRegistry* peers, ConnectionGate* gate,
                         absl::Duration handshake_timeout, AcceptErrorHook on_error) {
  thread_ = std::thread([this, server, peers, gate, handshake_timeout, on_error = std::move(on_error)] {
    AcceptLoop(server, peers, gate, handshake_timeout, on_error);
  });
}

// Admitted connections that have not sent the HTTP/2 preface yet, polled by the accept loop's
// epoll set, and their deadlines in the order they were accepted (all have the same timeout); a
// generation tells a deadline of a connection from one of a later connection with the same
// descriptor number. Used by the accept loop's thread only.
class PendingHandshakes {
 public:
  PendingHandshakes(int ep, ConnectionGate* gate, absl::Duration timeout) : ep_(ep), gate_(gate), timeout_(timeout) {}
  // Closes every connection still pending (the gate counts them as released).
  ~PendingHandshakes() {
    while (!pending_.empty()) Drop(pending_.begin()->first, false);
  }

  // Waits for `conn`'s preface (edge-triggered: woken again by more bytes) until the timeout.
  void Add(int conn, PeerCredentials credentials) {
    pending_[conn] = Pending{std::move(credentials), ++generation_};
    deadlines_.emplace_back(absl::Now() + timeout_, conn, generation_);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    e.data.fd = conn;
    epoll_ctl(ep_, EPOLL_CTL_ADD, conn, &e);
  }

  // `ready` became readable: handed to `server` (its credentials recorded in `peers`) once its
  // preface is in, dropped when it closed or failed first. False when `ready` is not pending.
  bool OnReadable(int ready, grpc::Server* server, PeerRegistry* peers) {
    auto it = pending_.find(ready);
    if (it == pending_.end()) return false;
    char preface[kHttp2PrefaceBytes];
    const ssize_t got = recv(ready, preface, sizeof preface, MSG_PEEK | MSG_DONTWAIT);
    if (got >= static_cast<ssize_t>(sizeof preface)) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, ready, nullptr);
      peers->Set(absl::StrCat("fd:", ready), std::move(it->second.credentials));
      pending_.erase(it);
      grpc::AddInsecureChannelFromFd(server, ready);
    } else if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      Drop(ready, false);  // closed or failed before it sent anything useful
    }
    return true;
  }

  // Closes the connections whose timeout passed (counted as timed out by the gate).
  void DropExpired() {
    const absl::Time now = absl::Now();
    while (!deadlines_.empty() && std::get<0>(deadlines_.front()) <= now) {
      const auto [at, conn, gen] = deadlines_.front();
      deadlines_.pop_front();
      if (auto it = pending_.find(conn); it != pending_.end() && it->second.generation == gen) Drop(conn, true);
    }
  }

  // Milliseconds until the next deadline (epoll_wait's timeout); -1 when none.
  int WaitMs() const {
    if (deadlines_.empty()) return -1;
    return static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(std::get<0>(deadlines_.front()) - absl::Now()) + 1));
  }

 private:
  struct Pending {
    PeerCredentials credentials;
    uint64_t generation = 0;
  };
  void Drop(int conn, bool timed_out) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, conn, nullptr);
    gate_->Release(conn, timed_out);
    close(conn);
    pending_.erase(conn);
  }

  const int ep_;
  ConnectionGate* const gate_;
  const absl::Duration timeout_;
  std::unordered_map<int, Pending> pending_;
  std::deque<std::tuple<absl::Time, int, uint64_t>> deadlines_;
  uint64_t generation_ = 0;
};

void UnixListener::AcceptLoop(grpc::Server* server, PeerRegistry* peers, ConnectionGate* gate,
                              absl::Duration handshake_timeout, const AcceptErrorHook& on_error) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    if (on_error) on_error(absl::StrCat("unix:", options_.path), errno);
    return;
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_[0];
  epoll_ctl(ep, EPOLL_CTL_ADD, wake_[0], &wake);
  absl::Time last_error = absl::InfinitePast();
  int polled = -1;
  {
    PendingHandshakes handshakes(ep, gate, handshake_timeout);
    for (;;) {
      int fd;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
        fd = fd_;
      }
      if (polled != fd) {  // the first round, or replaced by Recreate()
        if (polled >= 0) {
          epoll_ctl(ep, EPOLL_CTL_DEL, polled, nullptr);
          close(polled);
        }
        epoll_event listening{};
        listening.events = EPOLLIN;
        listening.data.fd = fd;
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &listening);
        polled = fd;
      }
      epoll_event events[64];
      const int n = epoll_wait(ep, events, 64, handshakes.WaitMs());
      for (int i = 0; i < n; ++i) {
        const int ready = events[i].data.fd;
        if (ready == wake_[0]) {
          char buf[16];
          while (read(wake_[0], buf, sizeof buf) > 0) {}
        } else if (ready == polled) {
          AcceptReady(polled, gate, handshakes, on_error, last_error);
        } else {
          handshakes.OnReadable(ready, server, peers);
        }
      }
      handshakes.DropExpired();
    }
  }  // the connections still pending are closed
  close(ep);
  absl::MutexLock lock(&mu_);
  if (polled >= 0 && polled != fd_) close(polled);
}

void UnixListener::AcceptReady(int listening, ConnectionGate* gate, PendingHandshakes& handshakes,
                               const AcceptErrorHook& on_error, absl::Time& last_error) {
  const pid_t self = getpid();
  const uid_t owner = geteuid();
  // Everything waiting, up to a round's worth: a flood is drained without a wait per connection.
  for (int k = 0; k < 64; ++k) {
    const int conn = accept4(listening, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      // Out of descriptors (EMFILE/ENFILE) or memory: back off briefly and keep accepting.
      const int e = errno;
      if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        if (on_error && absl::Now() - last_error >= absl::Seconds(1)) {
          last_error = absl::Now();
          on_error(absl::StrCat("unix:", options_.path), e);
        }
        poll(nullptr, 0, 100);
      }
      return;
    }
    accepted_.fetch_add(1);
    PeerCredentials credentials = ReadCredentials(conn);
    const bool reserved = credentials.pid == self || credentials.uid == 0 || credentials.uid == owner;
    const Peer who{absl::StrCat("uid:", credentials.uid), reserved ? PeerKind::kReserved : PeerKind::kOrdinary,
                   absl::StrCat("fd:", conn)};
    if (gate->Admit(conn, who) != Admission::kAdmitted) {
      close(conn);
      continue;
    }
    handshakes.Add(conn, std::move(credentials));  // handed to gRPC once the preface is in
  }
}

bool UnixListener::PathIsOurs() const {
  struct stat st;
  absl::MutexLock lock(&mu_);
  return lstat(options_.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == dev_ && st.st_ino == ino_;
}

absl::Status UnixListener::Recreate() {
  if (PathIsOurs()) return absl::OkStatus();
  struct stat st;
  if (lstat(options_.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(options_.path, ": a non-socket file now exists at this path"));
    }
    if (Live(options_.path)) {
      return absl::AlreadyExistsError(absl::StrCat(options_.path, ": another process now serves on this path"));
    }
    unlink(options_.path.c_str());
  }
  const std::string dir = std::filesystem::path(options_.path).parent_path().string();
  if (absl::Status s = MakeDirectory(dir, options_.create_directory); !s.ok()) return s;
  if (absl::Status s = CheckSocketDirectory(dir, geteuid()); !s.ok()) return s;
  return BindNew();
}

void UnixListener::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (wake_[1] >= 0) (void)!write(wake_[1], "s", 1);
  if (thread_.joinable()) thread_.join();
  const bool ours = PathIsOurs();
  absl::MutexLock lock(&mu_);
  if (ours) unlink(options_.path.c_str());
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace devplace::service
