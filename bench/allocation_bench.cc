// A ResolveDevice request at the DRA bounds that matches nothing (bench/dra_bound_request.h: 1,024
// allocated devices x 64 attributes, 0.8 MB) in-process, in the parts devplaced runs on every call
// (a request that large is never cached): parsing it (on the heap, and on an arena as the daemon
// does), the resolver into bytes (the matching included) on hosts of 8 and 256 NVIDIA GPUs, the
// matching alone (rule P-DRA), and, as the baseline in the same run, the resolver on the same
// request without its allocation. scripts/bench reports the medians and their ratios; built
// against the code before a change too (scripts/bench --baseline_dir):
//   build/bench/bench/allocation_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <string>

#include "bench/dra_bound_request.h"
#include "google/protobuf/arena.h"
#include "server/placement/allocation.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

v1::Inventory Host(const benchmark::State& state) {
  return InventoryBuilder().Add(v1::ROW_CUDA_NVIDIA, static_cast<int>(state.range(0))).Build();
}

void BM_DraBound_Parse(benchmark::State& state) {
  const std::string wire = bench::DraBoundRequest().SerializeAsString();
  for (auto _ : state) {
    v1::ResolveDeviceRequest parsed;
    benchmark::DoNotOptimize(parsed.ParseFromString(wire));
  }
  state.counters["request_bytes"] = static_cast<double>(wire.size());
}
BENCHMARK(BM_DraBound_Parse)->Unit(benchmark::kMicrosecond);

void BM_DraBound_ParseOnArena(benchmark::State& state) {
  const std::string wire = bench::DraBoundRequest().SerializeAsString();
  for (auto _ : state) {
    google::protobuf::Arena arena;
    benchmark::DoNotOptimize(
        google::protobuf::Arena::CreateMessage<v1::ResolveDeviceRequest>(&arena)->ParseFromString(wire));
  }
}
BENCHMARK(BM_DraBound_ParseOnArena)->Unit(benchmark::kMicrosecond);

// placement::ResolveSerialized of `request` (parsed beforehand) on the host of state.range(0) GPUs.
void Resolve(benchmark::State& state, const v1::ResolveDeviceRequest& request) {
  const v1::Inventory inv = Host(state);
  std::string bytes;
  for (auto _ : state) {
    benchmark::DoNotOptimize(placement::ResolveSerialized(inv, request, &bytes));
    benchmark::DoNotOptimize(bytes.data());
  }
  state.counters["answer_bytes"] = static_cast<double>(bytes.size());
}

void BM_DraBound_Resolve(benchmark::State& state) { Resolve(state, bench::DraBoundRequest()); }
BENCHMARK(BM_DraBound_Resolve)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

// The baseline: the same request without its allocation.
void BM_DraBound_WithoutAllocation(benchmark::State& state) {
  v1::ResolveDeviceRequest request = bench::DraBoundRequest();
  request.clear_device_allocation();
  Resolve(state, request);
}
BENCHMARK(BM_DraBound_WithoutAllocation)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

// The matching alone (rule P-DRA: what the index is for).
void BM_DraBound_MatchAllocation(benchmark::State& state) {
  const v1::Inventory inv = Host(state);
  const v1::ResolveDeviceRequest request = bench::DraBoundRequest();
  for (auto _ : state) benchmark::DoNotOptimize(placement::MatchAllocation(inv, request.device_allocation()));
}
BENCHMARK(BM_DraBound_MatchAllocation)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace devplace::testing
