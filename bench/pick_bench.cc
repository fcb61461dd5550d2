// Shared hosts: what one PickDevices costs the daemon, in-process. placement::Pick (the rule P-PICK:
// the job's visibility, each unit judged, the mask checked, the job's answer with it) on hosts of 8,
// 64 and 256 NVIDIA GPUs with every other one in use; and the lease table's pick-and-hold plus its
// release (the lock, the lease, the id). Medians:
//   build/bench/bench/pick_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "server/placement/pick.h"
#include "server/service/lease_table.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

// `n` GPUs, the odd ones used by one process each.
v1::Inventory HalfUsed(int n) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, n);
  for (int i = 0; i < n; ++i) {
    v1::DeviceUsage& u = *b.Device(v1::ROW_CUDA_NVIDIA, i).mutable_usage();
    u.set_source("nvml");
    u.set_processes_known(true);
    u.set_memory_used_bytes(kGiB * (1 + i % 3));
    if (i % 2 == 1) {
      u.set_process_count(1);
      u.add_processes()->set_pid(1000 + i);
    }
  }
  return b.Build();
}

v1::PickDevicesRequest Request(int count) {
  v1::PickDevicesRequest r;
  r.set_count(count);
  r.mutable_job()->set_workload(v1::WORKLOAD_TRAINING);
  return r;
}

void BM_Pick(benchmark::State& state) {
  const v1::Inventory inv = HalfUsed(static_cast<int>(state.range(0)));
  const v1::PickDevicesRequest request = Request(static_cast<int>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(placement::Pick(inv, request, {}));
}
BENCHMARK(BM_Pick)->Args({8, 1})->Args({8, 2})->Args({64, 2})->Args({256, 2});

void BM_PickAndHoldThenRelease(benchmark::State& state) {
  const v1::Inventory inv = HalfUsed(static_cast<int>(state.range(0)));
  const v1::PickDevicesRequest request = Request(1);
  service::LeaseTable table;
  service::LeaseHolderSpec holder;
  holder.kind = v1::LEASE_HOLDER_TTL;
  for (auto _ : state) {
    placement::PickOutcome out = table.PickAndHold(inv, request, holder);
    if (!out.status.ok()) state.SkipWithError(std::string(out.status.message()).c_str());
    benchmark::DoNotOptimize(table.Release(out.response.lease().lease_id()));
  }
}
BENCHMARK(BM_PickAndHoldThenRelease)->Arg(8)->Arg(256);

}  // namespace
}  // namespace devplace::testing
