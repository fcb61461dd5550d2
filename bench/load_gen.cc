// load_gen: the out-of-process load generator of scripts/bench. A plain gRPC client of a
// running devplaced; it prints one line of `key=value` figures and exits 0, or 1 when any call
// failed. Modes (--mode):
// --client=typed (generated stubs: the request serialized and the answer parsed, as a job does) or
// raw (the same calls with bytes in and out, nothing parsed: only the daemon's work differs
// between methods; scripts/bench's goal rows).
//   load     --method=check|resolve|list|inventory from --callers threads, each on its own
//            connection, for --seconds: calls, qps, p50_us, p99_us, errors. `resolve` sends the
//            request named by --request (inference_auto: from_pretrained(device_map="auto");
//            training: rank 1 of 2 with CUDA_VISIBLE_DEVICES=1,0; dra_bound: inference_auto with a
//            DRA allocation at the bounds that matches nothing, bench/dra_bound_request.h).
//   compare  the --compare methods (e.g. check,resolve) alternating every --slice_ms, all callers
//            together, for --seconds: calls, qps and the daemon's CPU us per call (--daemon_pid,
//            from /proc/PID/task/*/schedstat) for each, measured under the same machine load.
//   once     one call of --method; prints its answer size (and the device for resolve).
//   watch    opens --watches WatchInventory streams over --connections connections, waits for
//            every first snapshot, prints `ready ...`, holds them until stdin closes, then exits.
//   cold     execs the daemon given after `--` and calls ResolveDevice on --target until it
//            answers: cold_ms from exec to the first answer. The daemon is then sent SIGTERM.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/dra_bound_request.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"

ABSL_FLAG(std::string, mode, "load", "load | compare | once | watch | cold");
ABSL_FLAG(std::string, target, "", "the daemon's address: unix:/path or 127.0.0.1:port");
ABSL_FLAG(std::string, method, "resolve", "check (grpc.health.v1.Health/Check) | resolve | list | inventory");
ABSL_FLAG(std::string, request, "inference_auto", "ResolveDevice request: inference_auto | training | dra_bound");
ABSL_FLAG(std::string, client, "typed",
          "typed: generated stubs (serialize the request, parse the answer, as a job does) | raw: the "
          "same calls with bytes in and out (the answer is not parsed), so only the daemon's work differs "
          "between methods");
ABSL_FLAG(int, callers, 1, "load: concurrent callers, one connection each (1..256)");
ABSL_FLAG(double, seconds, 1.0, "load: how long to call");
ABSL_FLAG(std::string, compare, "check,resolve", "compare: the methods to alternate, comma-separated");
ABSL_FLAG(int, slice_ms, 100, "compare: how long each method runs before the next one takes over");
ABSL_FLAG(int, daemon_pid, 0, "compare: the daemon's process id, whose CPU time is read per slice");
ABSL_FLAG(int, watches, 1000, "watch: streams to open");
ABSL_FLAG(int, connections, 1, "watch: connections to spread them over (at most 90 streams each are used)");

namespace devplace::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<grpc::Channel> Connect(const std::string& target, int id, bool eager = false) {
  grpc::ChannelArguments args;
  args.SetInt("devplace.bench.channel", id);  // a distinct argument: a connection of its own
  if (eager) {  // cold start: retry the connection every few ms, not after gRPC's 1 s backoff
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 5);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 20);
  }
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

v1::ResolveDeviceRequest Request(const std::string& name) {
  v1::ResolveDeviceRequest r;
  if (name == "training") {
    r.set_workload(v1::WORKLOAD_TRAINING);
    r.set_local_rank(1);
    r.set_world_size(2);
    (*r.mutable_env())["CUDA_VISIBLE_DEVICES"] = "1,0";
  } else {
    r.set_workload(v1::WORKLOAD_INFERENCE);
    r.set_device_map("auto");
  }
  if (name == "dra_bound") r = DraBoundRequest();
  return r;
}

// One caller: makes calls of `method` on its own connection.
class Caller {
 public:
  Caller(const std::string& target, int id, const std::string& method, const v1::ResolveDeviceRequest& request,
         bool eager = false)
      : channel_(Connect(target, id, eager)),
        placement_(v1::DevicePlacement::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)),
        method_(method),
        request_(request),
        raw_(absl::GetFlag(FLAGS_client) == "raw") {
    static const char* const kPaths[][2] = {{"check", "/grpc.health.v1.Health/Check"},
                                            {"list", "/devplace.v1.DevicePlacement/ListBackends"},
                                            {"inventory", "/devplace.v1.DevicePlacement/GetInventory"},
                                            {"resolve", "/devplace.v1.DevicePlacement/ResolveDevice"}};
    for (const auto& p : kPaths) {
      if (method_ == p[0]) raw_method_ = std::make_unique<grpc::internal::RpcMethod>(p[1], grpc::internal::RpcMethod::NORMAL_RPC, channel_);
    }
    std::string body;
    if (method_ == "resolve") request_.SerializeToString(&body);
    grpc::Slice slice(body);
    raw_request_ = grpc::ByteBuffer(&slice, 1);
  }

  // One call; its status. `bytes` gets the answer's size, `device` the resolved device.
  grpc::Status Call(size_t* bytes = nullptr, std::string* device = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.set_wait_for_ready(true);
    grpc::Status s;
    size_t size = 0;
    if (raw_ && raw_method_ != nullptr) {
      grpc::ByteBuffer out;
      s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(channel_.get(), *raw_method_, &ctx,
                                                                                raw_request_, &out);
      size = out.Length();
    } else if (method_ == "check") {
      grpc::health::v1::HealthCheckResponse out;
      s = health_->Check(&ctx, {}, &out);
      size = out.ByteSizeLong();
    } else if (method_ == "list") {
      v1::ListBackendsResponse out;
      s = placement_->ListBackends(&ctx, {}, &out);
      size = out.ByteSizeLong();
    } else if (method_ == "inventory") {
      v1::Inventory out;
      s = placement_->GetInventory(&ctx, {}, &out);
      size = out.ByteSizeLong();
    } else {
      v1::ResolveDeviceResponse out;
      s = placement_->ResolveDevice(&ctx, request_, &out);
      size = out.ByteSizeLong();
      if (device != nullptr) *device = out.device();
    }
    if (bytes != nullptr) *bytes = size;
    return s;
  }

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DevicePlacement::Stub> placement_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  const std::string method_;
  const v1::ResolveDeviceRequest request_;
  const bool raw_;
  std::unique_ptr<grpc::internal::RpcMethod> raw_method_;
  grpc::ByteBuffer raw_request_;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

int Load() {
  const int callers = std::clamp(absl::GetFlag(FLAGS_callers), 1, 256);
  const std::string target = absl::GetFlag(FLAGS_target);
  const v1::ResolveDeviceRequest request = Request(absl::GetFlag(FLAGS_request));
  std::vector<std::unique_ptr<Caller>> all;
  for (int i = 0; i < callers; ++i) {
    all.push_back(std::make_unique<Caller>(target, i, absl::GetFlag(FLAGS_method), request));
    for (int k = 0; k < 20; ++k) all.back()->Call();  // connect and warm up, outside the clock
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> errors{0};
  std::vector<std::vector<double>> latencies(callers);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] {
      latencies[i].reserve(1 << 16);
      while (!stop.load(std::memory_order_relaxed)) {
        const Clock::time_point t0 = Clock::now();
        if (!all[i]->Call().ok()) ++errors;
        latencies[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> merged;
  for (const auto& l : latencies) merged.insert(merged.end(), l.begin(), l.end());
  const size_t calls = merged.size();
  const double p50 = Percentile(merged, 0.50), p99 = Percentile(merged, 0.99);
  printf("calls=%zu seconds=%.3f qps=%.1f p50_us=%.1f p99_us=%.1f errors=%lld\n", calls, seconds, calls / seconds, p50,
         p99, static_cast<long long>(errors.load()));
  return errors.load() == 0 ? 0 : 1;
}

// CPU time of every thread of `pid` in seconds (schedstat: nanoseconds), 0 when unreadable.
double DaemonCpuSeconds(int pid) {
  double total = 0;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(absl::StrCat(dir, "/", e->d_name, "/schedstat"));
    uint64_t ns = 0;
    if (in >> ns) total += ns / 1e9;
  }
  closedir(d);
  return total;
}

// Alternates the --compare methods every --slice_ms (all callers switch together) for --seconds,
// so both run under the same machine load, and attributes the daemon's CPU time per slice.
int Compare() {
  const std::vector<std::string> methods = absl::StrSplit(absl::GetFlag(FLAGS_compare), ',');
  const int callers = std::clamp(absl::GetFlag(FLAGS_callers), 1, 256);
  const int pid = absl::GetFlag(FLAGS_daemon_pid);
  const v1::ResolveDeviceRequest request = Request(absl::GetFlag(FLAGS_request));
  for (const std::string& method : methods) {
    if (method != "check" && method != "resolve" && method != "list" && method != "inventory") {
      fprintf(stderr, "load_gen: --compare=%s: accepted: check, resolve, list, inventory\n", method.c_str());
      return 2;
    }
  }
  const size_t m = methods.size();
  // callers x methods clients, each on its own connection, warmed up.
  std::vector<std::vector<std::unique_ptr<Caller>>> all(callers);
  for (int i = 0; i < callers; ++i) {
    for (size_t k = 0; k < m; ++k) {
      all[i].push_back(std::make_unique<Caller>(absl::GetFlag(FLAGS_target), static_cast<int>(i * m + k), methods[k],
                                                request));
      for (int w = 0; w < 20; ++w) all[i].back()->Call();
    }
  }
  std::atomic<int> phase{0};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> errors{0};
  std::vector<std::atomic<int64_t>> calls(m);
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] {
      while (!stop.load(std::memory_order_relaxed)) {
        const int k = phase.load(std::memory_order_relaxed);
        if (!all[i][k]->Call().ok()) ++errors;
        calls[k].fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::vector<double> seconds(m, 0), cpu(m, 0);
  const auto slice = std::chrono::milliseconds(absl::GetFlag(FLAGS_slice_ms));
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  Clock::time_point t0 = Clock::now();
  double c0 = DaemonCpuSeconds(pid);
  for (size_t n = 0; Clock::now() < end; ++n) {
    const size_t k = n % m;
    phase = static_cast<int>(k);
    std::this_thread::sleep_for(slice);
    const Clock::time_point t1 = Clock::now();
    const double c1 = DaemonCpuSeconds(pid);
    seconds[k] += std::chrono::duration<double>(t1 - t0).count();
    cpu[k] += c1 - c0;
    t0 = t1;
    c0 = c1;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  std::string line;
  for (size_t k = 0; k < m; ++k) {
    const double n = static_cast<double>(calls[k].load());
    absl::StrAppend(&line, k ? " " : "", methods[k], "_calls=", n, " ", methods[k], "_qps=", n / seconds[k], " ",
                    methods[k], "_cpu_us=", n > 0 ? cpu[k] * 1e6 / n : 0.0);
  }
  printf("%s errors=%lld\n", line.c_str(), static_cast<long long>(errors.load()));
  return errors.load() == 0 ? 0 : 1;
}

int Once() {
  Caller caller(absl::GetFlag(FLAGS_target), 0, absl::GetFlag(FLAGS_method), Request(absl::GetFlag(FLAGS_request)));
  size_t bytes = 0;
  std::string device;
  const grpc::Status s = caller.Call(&bytes, &device);
  if (!s.ok()) {
    fprintf(stderr, "load_gen: %s failed: %d %s\n", absl::GetFlag(FLAGS_method).c_str(), s.error_code(),
            s.error_message().c_str());
    return 1;
  }
  printf("ok=1 bytes=%zu device=%s\n", bytes, device.empty() ? "-" : device.c_str());
  return 0;
}

int Watch() {
  const int n = absl::GetFlag(FLAGS_watches);
  const int connections = std::max(1, absl::GetFlag(FLAGS_connections));
  const int per = std::min(90, (n + connections - 1) / connections);  // devplaced allows 100 streams a connection
  std::vector<std::unique_ptr<v1::DevicePlacement::Stub>> stubs;
  for (int i = 0; i * per < n; ++i) {
    stubs.push_back(v1::DevicePlacement::NewStub(Connect(absl::GetFlag(FLAGS_target), i)));
  }
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncReader<v1::Inventory>>> readers;
  std::vector<v1::Inventory> first(n);
  for (int i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stubs[i / per]->AsyncWatchInventory(contexts.back().get(), {}, &cq, reinterpret_cast<void*>(2 * i)));
  }
  int read = 0, failed = 0;
  void* tag;
  bool ok;
  while (read + failed < n && cq.Next(&tag, &ok)) {
    const intptr_t t = reinterpret_cast<intptr_t>(tag);
    if (!ok) {
      ++failed;
    } else if (t % 2 == 0) {
      readers[t / 2]->Read(&first[t / 2], reinterpret_cast<void*>(t + 1));
    } else {
      ++read;
    }
  }
  printf("ready watches=%d connections=%zu first_snapshots=%d failed=%d\n", n, stubs.size(), read, failed);
  fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  for (auto& c : contexts) c->TryCancel();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return failed == 0 ? 0 : 1;
}

int Cold(std::vector<char*> daemon) {
  if (daemon.empty()) {
    fprintf(stderr, "load_gen: --mode=cold needs the daemon command after --\n");
    return 2;
  }
  daemon.push_back(nullptr);
  const Clock::time_point start = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, daemon[0], nullptr, nullptr, daemon.data(), environ) != 0) {
    perror("load_gen: posix_spawn");
    return 1;
  }
  Caller caller(absl::GetFlag(FLAGS_target), 0, "resolve", Request(absl::GetFlag(FLAGS_request)), /*eager=*/true);
  bool answered = false;
  while (!answered && Clock::now() - start < std::chrono::seconds(20)) {
    answered = caller.Call().ok();  // waits for the socket; UNAVAILABLE until the first probe is in
    if (!answered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!answered) {
    fprintf(stderr, "load_gen: the daemon did not answer within 20 s\n");
    return 1;
  }
  printf("cold_ms=%.1f\n", ms);
  return 0;
}

}  // namespace
}  // namespace devplace::bench

int main(int argc, char** argv) {
  // Everything after a bare `--` is the daemon command of --mode=cold.
  std::vector<char*> ours, daemon;
  bool rest = false;
  for (int i = 0; i < argc; ++i) {
    if (!rest && i > 0 && std::string(argv[i]) == "--") {
      rest = true;
    } else {
      (rest ? daemon : ours).push_back(argv[i]);
    }
  }
  absl::SetProgramUsageMessage(
      "load_gen --mode=load|compare|once|watch|cold --target=unix:/path|host:port [flags]: the load "
      "generator of scripts/bench (a gRPC client of a running devplaced)");
  absl::ParseCommandLine(static_cast<int>(ours.size()), ours.data());
  const std::string client = absl::GetFlag(FLAGS_client), request = absl::GetFlag(FLAGS_request);
  if (client != "typed" && client != "raw") {
    fprintf(stderr, "load_gen: --client=%s: accepted: typed, raw\n", client.c_str());
    return 2;
  }
  if (request != "inference_auto" && request != "training" && request != "dra_bound") {
    fprintf(stderr, "load_gen: --request=%s: accepted: inference_auto, training, dra_bound\n", request.c_str());
    return 2;
  }
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {  // the watch mode may hold 1,000 connections
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (absl::GetFlag(FLAGS_target).empty()) {
    fprintf(stderr, "load_gen: --target is required: unix:/absolute/path or host:port\n");
    return 2;
  }
  const std::string method = absl::GetFlag(FLAGS_method);
  if (method != "check" && method != "resolve" && method != "list" && method != "inventory") {
    fprintf(stderr, "load_gen: --method=%s: accepted: check, resolve, list, inventory\n", method.c_str());
    return 2;
  }
  if (mode == "load") return devplace::bench::Load();
  if (mode == "once") return devplace::bench::Once();
  if (mode == "compare") return devplace::bench::Compare();
  if (mode == "watch") return devplace::bench::Watch();
  if (mode == "cold") return devplace::bench::Cold(daemon);
  fprintf(stderr, "load_gen: --mode=%s: accepted: load, compare, once, watch, cold\n", mode.c_str());
  return 2;
}
