// A ResolveDevice request at the DRA bounds that matches nothing (bench/dra_bound_request.h: 1,024
// allocated devices x 64 attributes) in-process, as devplaced runs it on every call (a request
// that large is never cached): the request parsed from its bytes, then resolved into bytes, on
// hosts of 8 and 256 NVIDIA GPUs; MatchAllocation alone; and, as the baseline in the same run, the
// same request without its allocation. scripts/bench reports the medians and their ratio:
//   build/bench/bench/allocation_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <string>

#include "bench/dra_bound_request.h"
#include "server/placement/allocation.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

// Parse + ResolveSerialized of `request`'s bytes: the daemon's work for one uncached call.
void ParseAndResolve(benchmark::State& state, const v1::ResolveDeviceRequest& request) {
  const v1::Inventory inv = InventoryBuilder().Add(v1::ROW_CUDA_NVIDIA, static_cast<int>(state.range(0))).Build();
  const std::string wire = request.SerializeAsString();
  std::string bytes;
  for (auto _ : state) {
    v1::ResolveDeviceRequest parsed;
    if (!parsed.ParseFromString(wire)) state.SkipWithError("the request does not parse");
    benchmark::DoNotOptimize(placement::ResolveSerialized(inv, parsed, &bytes));
    benchmark::DoNotOptimize(bytes.data());
  }
  state.counters["request_bytes"] = static_cast<double>(wire.size());
  state.counters["answer_bytes"] = static_cast<double>(bytes.size());
}

void BM_DraBound_ParseAndResolve(benchmark::State& state) { ParseAndResolve(state, bench::DraBoundRequest()); }
BENCHMARK(BM_DraBound_ParseAndResolve)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

// The baseline: the same request without its allocation.
void BM_DraBound_WithoutAllocation(benchmark::State& state) {
  v1::ResolveDeviceRequest request = bench::DraBoundRequest();
  request.clear_device_allocation();
  ParseAndResolve(state, request);
}
BENCHMARK(BM_DraBound_WithoutAllocation)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

// The matching alone (rule P-DRA: what the index is for).
void BM_DraBound_MatchAllocation(benchmark::State& state) {
  const v1::Inventory inv = InventoryBuilder().Add(v1::ROW_CUDA_NVIDIA, static_cast<int>(state.range(0))).Build();
  const v1::ResolveDeviceRequest request = bench::DraBoundRequest();
  for (auto _ : state) benchmark::DoNotOptimize(placement::MatchAllocation(inv, request.device_allocation()));
}
BENCHMARK(BM_DraBound_MatchAllocation)->Arg(8)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace devplace::testing
