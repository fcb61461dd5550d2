// devplaced's unix-socket listeners, accepted by devplaced itself rather than by gRPC, so that
// each connection's peer credentials (SO_PEERCRED, SO_PEERGROUPS) are known: the connection is
// then handed to the gRPC server (grpc::AddInsecureChannelFromFd), whose calls name it
// `fd:<N>` in ServerContext::peer(), and PeerRegistry maps that name back to the credentials.
//
// Socket safety: the socket's directory must exist (only the daemon's own default runtime
// directory, e.g. /run/devplace or /tmp/devplace-<uid>, is created, mode 0755, when its parent
// exists), be owned by root or the daemon's user, and not be writable by group or others unless
// the sticky bit is set; the socket is bound under umask 0177 (never a moment with a wider mode)
// and then given --socket_mode and --socket_group.
#ifndef DEVPLACE_SERVER_SERVICE_UNIX_LISTENER_H_
#define DEVPLACE_SERVER_SERVICE_UNIX_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/service/connection_gate.h"
#include "server/service/tcp_listener.h"

namespace grpc {
class Server;
}

namespace devplace::service {

class PendingHandshakes;  // unix_listener.cc: connections admitted, waiting for their preface

// Who is on the other end of a unix-socket connection, as the kernel recorded it at connect().
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;                // primary group
  std::vector<gid_t> groups;    // supplementary groups (SO_PEERGROUPS; empty where unsupported)
  // The start time of `pid` (field 22 of /proc/<pid>/stat) when the connection was accepted; 0 when
  // unknown. With the uid it tells the process that connected from a later one given its pid.
  uint64_t start_time = 0;
};

// Credentials of the connections the listeners accepted, by the gRPC peer name of their calls
// ("fd:<N>"). A closed connection's name is reused only by a later accepted connection, which
// replaces the entry. Thread-safe.
class PeerRegistry {
 public:
  void Set(const std::string& peer, PeerCredentials credentials);
  // The credentials of `peer` (ServerContext::peer()); nullopt for peers not accepted here (TCP).
  std::optional<PeerCredentials> Find(const std::string& peer) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, PeerCredentials> peers_ ABSL_GUARDED_BY(mu_);
};

// The directory rule above (server/common/safe_directory.h, which --nfd_features_file's directory
// follows too) for `dir`: OK, or FAILED_PRECONDITION saying what is wrong (owner, mode, not a
// directory). `owner_ok` is the other uid besides root that may own it.
absl::Status CheckSocketDirectory(const std::string& dir, uid_t owner_ok);

class UnixListener {
 public:
  struct Options {
    std::string path;                    // absolute socket path
    mode_t mode = 0660;                  // permission bits given after bind
    gid_t gid = static_cast<gid_t>(-1);  // group given after bind; -1 = the daemon's own
    // Create the socket's directory (mode 0755) when missing and its parent exists: only for
    // the daemon's default runtime directory.
    bool create_directory = false;
  };

  // Checks the directory, refuses a path that holds a non-socket or a socket another process
  // accepts on (FAILED_PRECONDITION, or ALREADY_EXISTS for a live socket), removes a stale socket,
  // binds and listens. Errors name the path and the errno text.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const Options& options);
  ~UnixListener();

  // Accepts connections on a thread of its own and asks `gate` (peer "uid:<N>", named "fd:<N>";
  // reserved: this process, root and the daemon's own user); a refused connection is closed at
  // once. An admitted one is handed to `server` (already started; all outlive Stop()), its
  // credentials recorded in `peers`, once it has sent the 24-byte HTTP/2 connection preface, as a
  // gRPC client does at once; one that has not within `handshake_timeout` is closed
  // (--handshake_timeout, as gRPC applies it on TCP), and counted as timed out by the gate.
  void Start(grpc::Server* server, PeerRegistry* peers, ConnectionGate* gate, absl::Duration handshake_timeout,
             AcceptErrorHook on_error);
  // Connections accepted so far (admitted or refused).
  uint64_t accepted() const { return accepted_.load(); }
  // Whether the path still names the socket this listener bound (same device and inode).
  bool PathIsOurs() const;
  // Re-creates the socket file when it was deleted (or replaced by a stale socket nobody accepts
  // on), and its directory too when it was removed and Options::create_directory is set (a
  // package purge's `rm -rf /run/devplace`); keeps serving on the old one otherwise. ALREADY_EXISTS when another process now serves
  // on the path (it is left alone).
  absl::Status Recreate();
  // Stops accepting (joins the thread) and removes the socket file if it is still ours.
  void Stop();

  const std::string& path() const { return options_.path; }

 private:
  explicit UnixListener(const Options& options) : options_(options) {}
  absl::Status BindNew();  // binds a fresh socket at the path and makes it the one accepted on
  void AcceptLoop(grpc::Server* server, PeerRegistry* peers, ConnectionGate* gate, absl::Duration handshake_timeout,
                  const AcceptErrorHook& on_error);
  // Accepts what waits on `listening` (up to 64 connections), asks `gate` and hands each admitted
  // connection to `handshakes`; backs off 100 ms when out of descriptors or memory.
  void AcceptReady(int listening, ConnectionGate* gate, PendingHandshakes& handshakes, const AcceptErrorHook& on_error,
                   absl::Time& last_error);

  Options options_;
  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  dev_t dev_ ABSL_GUARDED_BY(mu_) = 0;
  ino_t ino_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> accepted_{0};
  int wake_[2] = {-1, -1};  // a byte here makes the accept loop re-read fd_ / stopping_
  std::thread thread_;
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_UNIX_LISTENER_H_
