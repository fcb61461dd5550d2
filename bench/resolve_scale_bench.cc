// The resolver in-process against host size: placement::Resolve for 2, 8, 64 and 256
// NVIDIA GPUs, for from_pretrained(device_map="auto") and a distributed training rank. Only the
// placement library (the Serialized case measures the answer's arena): scripts/bench also builds it against the code before a change. Medians:
//   build/bench/bench/resolve_scale_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "server/placement/resolver.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

v1::Inventory Gpus(int n) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, n);
  return b.Build();
}

void BM_ResolveScale_InferenceAuto(benchmark::State& state) {
  const v1::Inventory inv = Gpus(static_cast<int>(state.range(0)));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  for (auto _ : state) benchmark::DoNotOptimize(placement::Resolve(inv, req));
}
BENCHMARK(BM_ResolveScale_InferenceAuto)->Arg(2)->Arg(8)->Arg(64)->Arg(256);

// What devplaced runs on an answer-cache miss: the same resolve into bytes (the answer built on an
// arena and serialized).
void BM_ResolveScale_SerializedInferenceAuto(benchmark::State& state) {
  const v1::Inventory inv = Gpus(static_cast<int>(state.range(0)));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  std::string bytes;
  for (auto _ : state) {
    benchmark::DoNotOptimize(placement::ResolveSerialized(inv, req, &bytes));
    benchmark::DoNotOptimize(bytes.data());
  }
}
BENCHMARK(BM_ResolveScale_SerializedInferenceAuto)->Arg(2)->Arg(8)->Arg(64)->Arg(256);

void BM_ResolveScale_Training(benchmark::State& state) {
  const v1::Inventory inv = Gpus(static_cast<int>(state.range(0)));
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  req.set_local_rank(1);
  req.set_world_size(2);
  (*req.mutable_env())["CUDA_VISIBLE_DEVICES"] = "1,0";
  for (auto _ : state) benchmark::DoNotOptimize(placement::Resolve(inv, req));
}
BENCHMARK(BM_ResolveScale_Training)->Arg(2)->Arg(8)->Arg(64)->Arg(256);

}  // namespace
}  // namespace devplace::testing
