// Daemon: one running devplaced inside a process. It owns the inventory store (probe children),
// the libtorch view, the DevicePlacement service, the gRPC server and its unix-socket and TCP/TLS
// listeners, /metrics, the listener self-checks (liveness), the NFD feature-file writer and the
// handling of SIGHUP, SIGTERM and SIGINT.
//
// Contract:
// - Start() once, then Wait() on the same thread; Stop() from any thread at any time.
// - Start() blocks SIGTERM, SIGINT and SIGHUP on the calling thread (BlockDaemonSignals) before
//   it starts any thread of its own, so every later thread inherits the mask and Wait() takes them
//   with sigtimedwait; SIGPIPE is ignored. Threads that already run keep their mask: a process
//   that starts threads before Start() (devplaced's main does not) must block the signals first,
//   or a signal sent to the process may land on one of them and kill it. It also raises this
//   process's descriptor limit and makes it a child subreaper: children of this process that no
//   probe run owns are killed after each probe run, so run no other child processes next to a
//   Daemon.
// - Wait() serves until SIGTERM/SIGINT or Stop(), then shuts down gracefully (stops accepting,
//   gives calls in flight --shutdown_grace, ends watches, logs event=stopped) and returns the
//   exit status for the process: 0, or 1 after event=listener_dead. SIGHUP re-probes, re-reads
//   the TLS files and re-creates deleted unix sockets; a check every 2 s re-creates them too
//   (with the default runtime directory, when that was removed). Every second it re-counts the
//   open connections, logs refusals by the connection caps and, after many connections closed,
//   gives the freed heap back to the system (malloc_trim).
//   A dead listener raises SIGTERM in this process, which Wait() takes as above.
// - Nothing here exits the process: devplaced's main ends with std::_Exit(Wait()) so as not to
//   wait for gRPC's global shutdown; a Daemon destroyed in-process stops and waits first.
#ifndef DEVPLACE_SERVER_DAEMON_DAEMON_H_
#define DEVPLACE_SERVER_DAEMON_DAEMON_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/daemon/config.h"
#include "server/daemon/observer.h"
#include "server/export/nfd_writer.h"
#include "server/inventory/store.h"
#include "server/inventory/torch_view.h"
#include "server/inventory/xid_watcher.h"
#include "server/metrics/exposer.h"
#include "server/service/liveness.h"
#include "server/service/connection_gate.h"
#include "server/service/lease_file.h"
#include "server/service/service.h"
#include "server/service/tcp_listener.h"
#include "server/service/tls.h"
#include "server/service/unix_listener.h"

namespace devplace::daemon {

class Daemon {
 public:
  explicit Daemon(ValidConfig config);
  // Stop() and Wait() when it is still running.
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts everything and returns once every listener accepts (health NOT_SERVING until the first
  // inventory, then SERVING). On failure no gRPC server runs and the status says how devplaced
  // ends (ExitStatus); what was started before the failing step (/metrics, unix sockets already
  // bound, the signal mask) stays until the Daemon is destroyed:
  //   INVALID_ARGUMENT     the TLS credentials could not be built, or --nfd_features_file's
  //                        directory could not be opened or is unsafe: for the caller to print as
  //                        `devplaced: <message> (see --help)`; exit 2.
  //   FAILED_PRECONDITION  a unix socket's directory or path is unsafe; exit 2.
  //   UNAVAILABLE          a listener or /metrics could not be bound (in use, no permission);
  //                        exit 1.
  // Listener failures are logged (event=listen_failed) and, for a unix socket, written to stderr
  // as `devplaced: --listen=ADDRESS: <why>`, here.
  absl::Status Start();
  // See the top of this file. Returns at once (0) when Start() did not succeed.
  int Wait();
  // Makes Wait() shut down as on SIGTERM (within 0.2 s), without a signal. Thread-safe.
  void Stop();

  // The listen addresses as bound and logged (event=listening): unix:/path, host:PORT or
  // tls:host:PORT with the port picked for :0. Empty before Start().
  const std::vector<std::string>& listening() const { return listening_; }
  // The /metrics address as bound ("" when off).
  const std::string& metrics_address() const { return metrics_endpoint_.address; }

 private:
  // Start()'s steps, in its order: each builds one part from the validated config (and the parts
  // built before it) and logs what it set up.
  absl::Status BuildTls();
  void BuildConnectionGates();
  void BuildObserver();
  void BuildStore();
  void BuildService();
  absl::Status BuildNfdWriter();
  absl::Status StartMetrics();
  absl::Status StartServer();
  void StartBackground();
  // daemon_xid.cc: the XID watcher (none without NVML), and what it adds to each fresh inventory.
  void BuildXidWatcher(const std::string& probe_program);
  static void AddXidWatch(const inventory::XidWatcher& watcher, v1::Inventory& fresh);
  // daemon_health.cc: the health file beside the lease file (none without one): read into the
  // store's carry_from at start; SaveHealthReadings writes each new revision's FAULT and LOST
  // readings there when they changed.
  void LoadHealthFile(inventory::StoreOptions& options);
  // The lock of the lease file's directory (service::StateDirectoryLock), taken before any state
  // file there is read or written: by Start() before the health file is read, or, when that
  // directory is made at start (the default one beside the socket), by RestoreLeases once it is.
  // UNAVAILABLE (exit 1) when another daemon holds it; any other failure is a warning (the files
  // there cannot be used then either, and each use says why).
  absl::Status LockStateFiles();
  void SaveHealthReadings(const v1::Inventory& snapshot);
  // StartServer()'s steps.
  void ConfigureServer(grpc::ServerBuilder& builder);
  absl::Status BuildListeners(grpc::ServerBuilder& builder, std::vector<int>& ports);
  absl::Status RestoreLeases();
  void StartListeners(const std::vector<int>& ports);
  void BuildLiveness();
  // What RefreshInventory, SIGHUP and start-up run: the libtorch probe, then the host probe.
  absl::StatusOr<inventory::Snapshot> FullRefresh();
  void CheckSockets(const char* trigger);
  void LogMaxConnections(int max_total);
  void CheckConnections();
  void OnSighup();
  void Shutdown();

  ValidConfig config_;  // as validated; Start() takes tls_material out (the credentials hold it)
  enum class State { kNew, kRunning, kDone } state_ = State::kNew;
  sigset_t signals_{};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> stopping_{false};        // set once shutting down: no new refresh, health stays off
  std::atomic<bool> listener_dead_{false};   // exit 1
  // Held for the daemon's life (LockStateFiles); none without a lease file.
  std::optional<service::StateDirectoryLock> state_lock_;
  bool state_lock_settled_ = false;  // taken, or a failure other than a missing directory logged
  // Built by Start() in this order; destroyed in reverse.
  std::unique_ptr<service::ReloadableTlsCredentials> tls_;
  // Every metric family and the log lines of the store's and service's events; outlives both
  // (declared before them).
  std::unique_ptr<DaemonObserver> observer_;
  std::unique_ptr<inventory::TorchView> torch_;
  std::unique_ptr<inventory::InventoryStore> store_;
  // Republishes through store_ (declared after it: destroyed first); null without NVML.
  std::unique_ptr<inventory::XidWatcher> xid_;
  service::PeerRegistry peers_;
  std::unique_ptr<service::DevicePlacementService> service_;
  std::unique_ptr<service::ConnectionGate> gate_;          // the connection caps of every gRPC listener
  std::unique_ptr<service::ConnectionGate> metrics_gate_;  // /metrics' own (they outlive the endpoint)
  metrics::MetricsEndpoint metrics_endpoint_;
  service::SelfConnections self_connections_;      // the liveness checks' own TCP connections
  std::vector<std::unique_ptr<service::UnixListener>> unix_listeners_;
  // gRPC's side of the TCP/TLS listeners (one each, with its credentials); outlives them.
  std::vector<std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor>> acceptors_;
  std::vector<std::unique_ptr<service::TcpListener>> tcp_listeners_;
  std::unique_ptr<grpc::Server> server_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;  // the server's
  std::vector<std::string> listening_;
  std::unique_ptr<service::ListenerLiveness> liveness_;
  std::unique_ptr<labels::NfdPublisher> nfd_;
  std::optional<inventory::InventoryStore::SubscriptionId> subscription_;
  std::string health_file_;  // "" without a lease file
  absl::Mutex health_mu_;
  v1::Inventory health_written_ ABSL_GUARDED_BY(health_mu_);  // the readings the file holds
  bool health_file_unused_ ABSL_GUARDED_BY(health_mu_) = false;  // the file found could not be used
  // CheckConnections(): what the last report said, and the most connections open since the heap
  // was last trimmed.
  uint64_t reported_refused_ = 0;
  uint64_t reported_metrics_refused_ = 0;
  int logged_max_total_ = 0;  // LogMaxConnections(): the total cap last in force (0: none yet)
  int open_since_trim_ = 0;
  std::optional<absl::Time> trim_again_at_;
};

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and returns that set. devplaced's main
// calls it first thing, before any thread exists; Start() calls it again.
sigset_t BlockDaemonSignals();

// The process exit status for a failed Start() (see there): 2 or 1.
int ExitStatus(const absl::Status& start_error);

// Sets up this process's log lines as `config` says (--log_level, --log_format): devplaced's own
// events on stderr, and gRPC core's and libprotobuf's lines routed through the same format as
// event=library_log, at most 10 a second per library. Call once, before Start().
void ConfigureLogging(const ValidConfig& config);

}  // namespace devplace::daemon

#endif  // DEVPLACE_SERVER_DAEMON_DAEMON_H_
