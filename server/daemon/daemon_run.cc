// Daemon: devplaced's signal loop (Wait), its periodic checks (sockets, connections, the heap),
// SIGHUP and the shutdown; the start-up is in daemon.cc (see daemon.h for the contract). Every
// log line here is one of devplaced's documented events.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/time/clock.h"
#include "server/daemon/daemon.h"
#include "server/logging/logging.h"
#include "server/service/grpc_log.h"
#include "spdlog/spdlog.h"

namespace devplace::daemon {
namespace {

// A deleted socket file (or runtime directory) is looked for this long after the last signal or
// check: well within the liveness checks' default 3 x 5 s, so a removed socket is back before it
// could be found dead.
constexpr std::chrono::seconds kSocketCheckEvery{2};
// Connections are re-counted (and refusals reported) this often.
constexpr absl::Duration kConnectionCheckEvery = absl::Seconds(1);
// The heap is trimmed after this many connections closed since the last trim, and once more a
// little later (gRPC frees a closed connection's buffers on its own threads, not at once).
constexpr int kTrimAfterClosed = 64;
constexpr absl::Duration kTrimAgainAfter = absl::Seconds(3);
// How soon Wait() notices Stop().
constexpr absl::Duration kStopPoll = absl::Milliseconds(200);

}  // namespace

// A deleted socket file is re-created on SIGHUP and by a check every 10 s; a path another
// process now serves on is left to it (logged).
void Daemon::CheckSockets(const char* trigger) {
  for (const auto& l : unix_listeners_) {
    if (l->PathIsOurs()) continue;
    const absl::Status s = l->Recreate();
    if (s.ok()) {
      spdlog::warn("event=socket_recreated path={} trigger={}", l->path(), trigger);
    } else {
      spdlog::error("event=socket_lost path={} trigger={} error=\"{}\"", l->path(), trigger, std::string(s.message()));
    }
  }
}

// Logs the total connection cap when the descriptor limit makes it differ from --max_connections
// (at start) or from the last one logged (root changed the limit since).
void Daemon::LogMaxConnections(int max_total) {
  const int configured = config_.config.max_connections;
  if (max_total == logged_max_total_ || (logged_max_total_ == 0 && max_total == configured)) {
    logged_max_total_ = max_total;
    return;
  }
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  if (max_total < configured) {
    spdlog::warn("event=max_connections_lowered max_connections={} to={} rlimit_nofile={} (reserve {} and {} "
                 "descriptors for the daemon itself)",
                 configured, max_total, files.rlim_cur, kConnectionReserve, kDescriptorHeadroom);
  } else {
    spdlog::info("event=max_connections_restored max_connections={} rlimit_nofile={}", max_total, files.rlim_cur);
  }
  logged_max_total_ = max_total;
}

// Re-counts the open connections, reports refusals since the last report (one line, however
// many), and returns freed heap to the system after many connections closed: gRPC's buffers for
// thousands of connections (stalled TLS handshakes above all) are freed into glibc's arenas, which
// keep them (RSS stays at its peak) until trimmed.
void Daemon::CheckConnections() {
  const int open = gate_->Sweep();
  LogMaxConnections(gate_->EffectiveMaxTotal());
  const service::ConnectionGate::Stats stats = gate_->stats();
  const uint64_t refused = stats.unserved();
  if (refused != reported_refused_) {
    spdlog::warn("event=connections_refused count={} peer_cap_total={} total_cap_total={} unowned_cap_total={} "
                 "rate_total={} handshake_timeout_total={} open={} max_connections={} max_connections_per_peer={}",
                 refused - reported_refused_, stats.refused_peer, stats.refused_total, stats.refused_unowned,
                 stats.refused_rate, stats.timed_out, open, logged_max_total_, gate_->limits().max_per_peer);
    reported_refused_ = refused;
  }
  const service::ConnectionGate::Stats m = metrics_gate_->stats();
  if (const uint64_t metrics_refused = m.unserved(); metrics_refused != reported_metrics_refused_) {
    spdlog::warn("event=metrics_connections_refused count={} peer_cap_total={} total_cap_total={} unowned_cap_total={} "
                 "rate_total={} request_timeout_total={} open={}",
                 metrics_refused - reported_metrics_refused_, m.refused_peer, m.refused_total, m.refused_unowned,
                 m.refused_rate, m.timed_out, m.open);
    reported_metrics_refused_ = metrics_refused;
  }
  open_since_trim_ = std::max({open_since_trim_, gate_->TakePeak(), open});
  const bool many_closed = open_since_trim_ - open >= kTrimAfterClosed;
  if (!many_closed && !(trim_again_at_.has_value() && absl::Now() >= *trim_again_at_)) return;
  const struct mallinfo2 before = mallinfo2();
  malloc_trim(0);
  const struct mallinfo2 after = mallinfo2();
  spdlog::info("event=heap_trimmed connections_closed={} open={} heap_bytes={} free_bytes_before={} "
               "free_bytes_after={} mmap_bytes={}",
               open_since_trim_ - open, open, after.arena, before.fordblks, after.fordblks, after.hblkhd);
  open_since_trim_ = open;
  trim_again_at_ = many_closed ? std::optional<absl::Time>(absl::Now() + kTrimAgainAfter) : std::nullopt;
}

void Daemon::OnSighup() {
  spdlog::info("event=refresh_requested trigger=SIGHUP");
  if (tls_ != nullptr) {  // new connections get the new certificates; a broken renewal keeps the old ones
    absl::StatusOr<service::TlsMaterial> m = tls_->Reload();
    if (m.ok()) {
      spdlog::info("event=tls_reload result=ok subject=\"{}\" not_after=\"{}\" client_cas={}", m->subject,
                   m->not_after, m->client_ca_count);
    } else {
      spdlog::error("event=tls_reload result=error error=\"{}\" (the previous certificates stay in use)",
                    std::string(m.status().message()));
    }
  }
  CheckSockets("SIGHUP");
  service_->RequestRefresh();
}

int Daemon::Wait() {
  if (state_ != State::kRunning) return 0;
  // The socket check runs after kSocketCheckEvery without a signal; the wait is cut into
  // kStopPoll slices so that Stop() is seen without a signal.
  auto next_check = std::chrono::steady_clock::now() + kSocketCheckEvery;
  absl::Time next_connection_check = absl::Now() + kConnectionCheckEvery;
  for (;;) {
    if (absl::Now() >= next_connection_check) {
      CheckConnections();
      next_connection_check = absl::Now() + kConnectionCheckEvery;
    }
    if (stop_requested_.load()) {
      spdlog::info("event=shutdown signal=none");
      break;
    }
    const auto left = next_check - std::chrono::steady_clock::now();
    const timespec slice = absl::ToTimespec(
        std::clamp(absl::FromChrono(left), absl::ZeroDuration(), kStopPoll));
    const int sig = sigtimedwait(&signals_, nullptr, &slice);
    if (sig < 0) {
      if (errno != EAGAIN) {
        next_check = std::chrono::steady_clock::now() + kSocketCheckEvery;
      } else if (std::chrono::steady_clock::now() >= next_check) {
        CheckSockets("check");
        next_check = std::chrono::steady_clock::now() + kSocketCheckEvery;
      }
      continue;
    }
    next_check = std::chrono::steady_clock::now() + kSocketCheckEvery;
    if (sig == SIGHUP) {
      OnSighup();
      continue;
    }
    spdlog::info("event=shutdown signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    break;
  }
  Shutdown();
  state_ = State::kDone;
  return listener_dead_ ? 1 : 0;
}

// Stop accepting at once; calls in flight get --shutdown_grace (a RefreshInventory waiting on a
// probe finishes when that probe does, bounded by --probe_timeout); watches end with OK.
void Daemon::Shutdown() {
  stopping_ = true;
  liveness_->Stop();
  torch_->Cancel();  // a libtorch probe in flight is killed, not waited for
  health_->SetServingStatus(false);
  for (const auto& l : unix_listeners_) l->Stop();  // no new unix connections; the file is removed
  for (const auto& l : tcp_listeners_) l->Stop();
  // After the listeners: stopping the XID watcher waits for its child to end (a probe command that
  // is slow to start delays it), and nothing may be accepted meanwhile. Before the store stops: a
  // republish in flight ends with its probe.
  if (xid_ != nullptr) xid_->Stop();
  service_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(config_.config.shutdown_grace));
  server_->Wait();
  service_->FinishWrites();  // the waiters' last write is renamed into place before the exit
  store_->Stop();
  store_->Unsubscribe(*subscription_);
  if (nfd_ != nullptr) nfd_->Stop();  // the file stays; NFD drops its labels at the expiry time
  spdlog::info("event=stopped");
}

void ConfigureLogging(const ValidConfig& config) {
  // Library lines (gRPC core, libprotobuf) per second per library; the rest are counted and
  // reported in one event=library_log_suppressed line (a flood of bad requests logs a line each).
  constexpr int kLibraryLogsPerSecond = 10;
  logging::Configure(config.log_level, config.log_format);
  logging::RouteProtobufLogs(kLibraryLogsPerSecond);
  service::RouteGrpcLogs(config.log_level, kLibraryLogsPerSecond);
}

}  // namespace devplace::daemon
