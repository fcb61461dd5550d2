// ResolveDevice's core, the pure resolver, against a baseline in the same process: copying the
// inventory snapshot (what a naive service would do per call). Report medians and the ratio
// Resolve / CopyInventory:
//   build/release/bench/resolve_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "server/placement/device_string.h"
#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"

namespace devplace::testing {
namespace {

v1::Inventory EightGpus() {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 8);
  return b.Build();
}

void BM_Baseline_CopyInventory(benchmark::State& state) {
  const v1::Inventory inv = EightGpus();
  for (auto _ : state) {
    v1::Inventory copy = inv;
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_Baseline_CopyInventory);

void BM_ParseDeviceString(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(placement::ParseDeviceString("cuda:1", "device_map"));
}
BENCHMARK(BM_ParseDeviceString);

void BM_Resolve_TrainingDistributed(benchmark::State& state) {
  const v1::Inventory inv = EightGpus();
  const v1::ResolveDeviceRequest req = Req::Train().Rank(3, 8).Env("CUDA_VISIBLE_DEVICES", "4,5,6,7");
  for (auto _ : state) benchmark::DoNotOptimize(placement::Resolve(inv, req));
}
BENCHMARK(BM_Resolve_TrainingDistributed);

void BM_Resolve_InferenceAuto(benchmark::State& state) {
  const v1::Inventory inv = EightGpus();
  const v1::ResolveDeviceRequest req = Req::Infer("auto").ModelSize(uint64_t{140} << 30);
  for (auto _ : state) benchmark::DoNotOptimize(placement::Resolve(inv, req));
}
BENCHMARK(BM_Resolve_InferenceAuto);

}  // namespace
}  // namespace devplace::testing
