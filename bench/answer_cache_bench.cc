// What devplaced runs per ResolveDevice call once an answer is cached: a lookup of the
// request's wire bytes in the snapshot's PreparedSnapshot (BM_CachedAnswer_InferenceAuto); and,
// for bytes not seen before that parse as a request already answered, parse + canonical key +
// lookup (BM_CachedAnswerParsed_InferenceAuto). The resolver runs only on a miss (see
// resolve_scale_bench). Medians:
//   build/bench/bench/answer_cache_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>

#include "server/service/answer_cache.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

std::shared_ptr<const v1::Inventory> Gpus(int64_t n) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, static_cast<int>(n));
  return std::make_shared<const v1::Inventory>(b.Build());
}

v1::ResolveDeviceRequest AutoRequest() {  // from_pretrained(device_map="auto")
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("auto");
  return req;
}

void BM_CachedAnswer_InferenceAuto(benchmark::State& state) {
  service::PreparedSnapshot prepared(Gpus(state.range(0)), {});
  const v1::ResolveDeviceRequest req = AutoRequest();
  const std::string wire = req.SerializeAsString();
  prepared.Resolve(req, wire);
  for (auto _ : state) benchmark::DoNotOptimize(prepared.FindByWire(wire));
}
BENCHMARK(BM_CachedAnswer_InferenceAuto)->Arg(2)->Arg(8)->Arg(64)->Arg(256);

void BM_CachedAnswerParsed_InferenceAuto(benchmark::State& state) {
  service::PreparedSnapshot prepared(Gpus(state.range(0)), {});
  const v1::ResolveDeviceRequest req = AutoRequest();
  const std::string wire = req.SerializeAsString();
  for (auto _ : state) {
    v1::ResolveDeviceRequest parsed;
    parsed.ParseFromString(wire);
    benchmark::DoNotOptimize(prepared.Resolve(parsed));
  }
}
BENCHMARK(BM_CachedAnswerParsed_InferenceAuto)->Arg(2)->Arg(8)->Arg(64)->Arg(256);

}  // namespace
}  // namespace devplace::testing
