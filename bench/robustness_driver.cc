// robustness_driver: robustness figures against the real devplaced (a small driver, not Google
// Benchmark, since each figure needs a daemon process of its own):
//   load      ResolveDevice from C callers over the unix socket for S seconds: QPS, p50/p99, errors
//   watches   RSS of the daemon per open WatchInventory stream (N streams on one connection)
//   attack    peak RSS (VmHWM) of the daemon under 4 concurrent oversized requests over TCP, with
//             and without a small --memory_quota_bytes
// Usage: robustness_driver [--callers=8] [--seconds=3] [--watches=2000] [--attack_mib=256]
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "bench/proc_status.h"
#include "tests/integration/daemon_process.h"

namespace devplace {
namespace {

using testing::DaemonProcess;

std::string TempDirPath() {
  char tmpl[] = "/tmp/devplace-bench-XXXXXX";
  return mkdtemp(tmpl);
}

std::unique_ptr<DaemonProcess> Start(const std::string& dir, std::vector<std::string> flags) {
  flags.push_back(std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/nvidia-2x-h100");
  auto d = std::make_unique<DaemonProcess>(dir, flags);
  d->WaitForLog("event=inventory revision=1", absl::Seconds(20));
  return d;
}

void Load(int callers, int seconds) {
  const std::string dir = TempDirPath();
  auto d = Start(dir, {});
  auto stub = v1::DevicePlacement::NewStub(grpc::CreateChannel(d->unix_target(), grpc::InsecureChannelCredentials()));
  std::atomic<bool> stop{false};
  std::atomic<int64_t> errors{0};
  std::vector<std::vector<double>> latencies(callers);
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] {
      v1::ResolveDeviceRequest request;
      request.set_workload(v1::WORKLOAD_INFERENCE);
      request.set_device_map("auto");
      while (!stop) {
        const auto t0 = std::chrono::steady_clock::now();
        grpc::ClientContext ctx;
        v1::ResolveDeviceResponse response;
        if (!stub->ResolveDevice(&ctx, request, &response).ok()) ++errors;
        latencies[i].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  printf("load: callers=%d calls=%zu qps=%.0f p50_us=%.0f p99_us=%.0f errors=%lld\n", callers, all.size(),
         all.size() / static_cast<double>(seconds), all[all.size() / 2], all[all.size() * 99 / 100],
         static_cast<long long>(errors.load()));
}

void Watches(int n) {
  const std::string dir = TempDirPath();
  auto d = Start(dir, {absl::StrCat("--max_watches=", n + 10)});
  // devplaced allows 100 concurrent streams per connection: 90 watches per channel.
  std::vector<std::unique_ptr<v1::DevicePlacement::Stub>> stubs;
  for (int i = 0; i < n; i += 90) {
    grpc::ChannelArguments args;
    args.SetInt("devplace.bench.channel", i);
    stubs.push_back(v1::DevicePlacement::NewStub(
        grpc::CreateCustomChannel(d->unix_target(), grpc::InsecureChannelCredentials(), args)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t before = StatusKb(d->pid(), "VmRSS");
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncReader<v1::Inventory>>> readers;
  std::vector<v1::Inventory> first(n);
  for (int i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stubs[i / 90]->AsyncWatchInventory(contexts.back().get(), {}, &cq, reinterpret_cast<void*>(2 * i)));
  }
  int started = 0, read = 0;
  void* tag;
  bool ok;
  while (read < n && cq.Next(&tag, &ok)) {
    const intptr_t t = reinterpret_cast<intptr_t>(tag);
    if (t % 2 == 0) {
      ++started;
      readers[t / 2]->Read(&first[t / 2], reinterpret_cast<void*>(t + 1));
    } else {
      ++read;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t after = StatusKb(d->pid(), "VmRSS");
  printf("watches: n=%d started=%d first_snapshots=%d rss_before_kb=%lld rss_after_kb=%lld per_watch_bytes=%.0f\n", n,
         started, read, static_cast<long long>(before), static_cast<long long>(after),
         (after - before) * 1024.0 / n);
  for (auto& c : contexts) c->TryCancel();
  d.reset();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

void Attack(size_t mib, const std::string& quota_flag) {
  const std::string dir = TempDirPath();
  std::vector<std::string> flags;
  if (!quota_flag.empty()) flags.push_back(quota_flag);
  auto d = Start(dir, flags);
  const int64_t start = StatusKb(d->pid(), "VmHWM");
  const size_t bytes = mib << 20;
  std::string payload;
  {
    v1::ResolveDeviceRequest oversized;
    oversized.mutable_device_map()->assign(bytes, 'x');
    payload = oversized.SerializeAsString();
  }
  grpc::Slice slice(payload);
  payload = std::string();
  std::vector<std::thread> threads;
  std::atomic<int> exhausted{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      grpc::ChannelArguments args;
      args.SetInt("devplace.bench.channel", i);
      grpc::GenericStub generic(grpc::CreateCustomChannel(d->tcp_target(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      grpc::ByteBuffer request(&slice, 1), response;
      absl::Notification done;
      generic.UnaryCall(&ctx, "/devplace.v1.DevicePlacement/ResolveDevice", grpc::StubOptions(), &request, &response,
                        [&](grpc::Status s) {
                          if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
                          done.Notify();
                        });
      done.WaitForNotification();
    });
  }
  for (std::thread& t : threads) t.join();
  printf("attack: 4x%zu MiB %s start_hwm_kb=%lld peak_hwm_kb=%lld resource_exhausted=%d\n", mib,
         quota_flag.empty() ? "(default quota)" : quota_flag.c_str(), static_cast<long long>(start),
         static_cast<long long>(StatusKb(d->pid(), "VmHWM")), exhausted.load());
}

int Flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i < argc; ++i) {
    int v = 0;
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0 && absl::SimpleAtoi(a.substr(name.size() + 3), &v)) return v;
  }
  return fallback;
}

}  // namespace
}  // namespace devplace

int main(int argc, char** argv) {
  using devplace::Flag;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  devplace::Load(Flag(argc, argv, "callers", 8), Flag(argc, argv, "seconds", 3));
  devplace::Watches(Flag(argc, argv, "watches", 2000));
  const size_t mib = static_cast<size_t>(Flag(argc, argv, "attack_mib", 256));
  devplace::Attack(mib, "--memory_quota_bytes=17179869184");
  devplace::Attack(mib, "");
  devplace::Attack(mib, "--memory_quota_bytes=67108864");
  return 0;
}
