// ResolveDevice over real gRPC (an in-process DevicePlacementService with the real store, which
// probed the nvidia-container fixture host through devplace-probe), against a baseline in the same process:
// grpc.health.v1.Health/Check, a no-op RPC (ListBackends is measured too: it sends bytes
// serialized once). The ratio is what ResolveDevice adds on top of gRPC's own per-call cost.
// scripts/bench measures the same against the real daemon from another process. Report medians:
//   build/bench/bench/rpc_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "devplace/v1/devplace.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/inventory/store.h"
#include "server/service/service.h"

namespace devplace {
namespace {

struct Server {
  Server() {
    inventory::StoreOptions options;
    options.probe_command = {DEVPLACE_PROBE_BINARY, std::string("--host_root=") + DEVPLACE_FIXTURES_DIR +
                                                        "/hosts/nvidia-container",
                             "--nvml_library="};
    store = std::make_unique<inventory::InventoryStore>(options);
    if (!store->Refresh().ok()) abort();
    service = std::make_unique<service::DevicePlacementService>(*store);
    socket = "/tmp/devplace-bench-" + std::to_string(getpid()) + ".sock";
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    if (server == nullptr) abort();
  }
  ~Server() {
    service->Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  }
  std::unique_ptr<inventory::InventoryStore> store;
  std::unique_ptr<service::DevicePlacementService> service;
  std::unique_ptr<grpc::Server> server;
  std::string socket;
  int port = 0;
};

Server& TheServer() {
  static Server* server = new Server();
  return *server;
}

std::unique_ptr<v1::DevicePlacement::Stub> StubFor(int transport) {
  Server& s = TheServer();
  const std::string target = transport == 0 ? "127.0.0.1:" + std::to_string(s.port) : "unix:" + s.socket;
  return v1::DevicePlacement::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

// state.range(0): 0 = TCP loopback, 1 = unix socket.
void BM_Baseline_HealthCheck(benchmark::State& state) {
  Server& s = TheServer();
  const std::string target = state.range(0) == 0 ? "127.0.0.1:" + std::to_string(s.port) : "unix:" + s.socket;
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  for (auto _ : state) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse out;
    if (!stub->Check(&ctx, {}, &out).ok()) state.SkipWithError("rpc failed");
  }
}
BENCHMARK(BM_Baseline_HealthCheck)->Arg(0)->Arg(1)->UseRealTime();

void BM_ListBackends(benchmark::State& state) {
  auto stub = StubFor(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    grpc::ClientContext ctx;
    v1::ListBackendsResponse out;
    if (!stub->ListBackends(&ctx, {}, &out).ok()) state.SkipWithError("rpc failed");
  }
}
BENCHMARK(BM_ListBackends)->Arg(0)->Arg(1)->UseRealTime();

void BM_ResolveDevice_TrainingDistributed(benchmark::State& state) {
  auto stub = StubFor(static_cast<int>(state.range(0)));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  req.set_local_rank(1);
  req.set_world_size(2);
  (*req.mutable_env())["CUDA_VISIBLE_DEVICES"] = "1,0";
  for (auto _ : state) {
    grpc::ClientContext ctx;
    v1::ResolveDeviceResponse out;
    if (!stub->ResolveDevice(&ctx, req, &out).ok()) state.SkipWithError("rpc failed");
  }
}
BENCHMARK(BM_ResolveDevice_TrainingDistributed)->Arg(0)->Arg(1)->UseRealTime();

void BM_ResolveDevice_InferenceAuto(benchmark::State& state) {
  auto stub = StubFor(static_cast<int>(state.range(0)));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  for (auto _ : state) {
    grpc::ClientContext ctx;
    v1::ResolveDeviceResponse out;
    if (!stub->ResolveDevice(&ctx, req, &out).ok()) state.SkipWithError("rpc failed");
  }
}
BENCHMARK(BM_ResolveDevice_InferenceAuto)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
}  // namespace devplace
