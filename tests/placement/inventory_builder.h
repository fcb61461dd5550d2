// Builds synthetic inventories in SEMANTICS.md's shorthand ("4 cuda", "2 npu + 2 cuda") for the
// resolver tests. Devices are usable, in host order, with made-up but well-formed identities.
#ifndef DEVPLACE_TESTS_PLACEMENT_INVENTORY_BUILDER_H_
#define DEVPLACE_TESTS_PLACEMENT_INVENTORY_BUILDER_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <string>

#include "devplace/v1/devplace.pb.h"

namespace devplace::testing {

inline constexpr uint64_t kGiB = 1ull << 30;
// Host RAM the builder reports as available (MemAvailable).
inline constexpr uint64_t kHostRamAvailable = 200 * kGiB;
// from_pretrained's cpu budget from Transformers 5.0, the default rules (V-TF-CPU-90): 90 % of the available RAM,
// as Python computes `available * 0.90`.
constexpr uint64_t CpuBudget(uint64_t available) { return static_cast<uint64_t>(static_cast<double>(available) * 0.90); }
inline constexpr uint64_t kCpuBudget = CpuBudget(kHostRamAvailable);

class InventoryBuilder {
 public:
  InventoryBuilder();
  // Adds `count` usable devices of `row` (80 GiB total, 80 GiB free each unless changed).
  InventoryBuilder& Add(v1::Row row, int count);
  // The i-th device of `row` (for tweaks: uuid, memory, usable, ...).
  v1::Device& Device(v1::Row row, int i);
  v1::Backend& Backend(v1::Row row);
  // The host (RAM available: kHostRamAvailable unless changed).
  v1::Host& Host() { return *inv_.mutable_host(); }
  const v1::Inventory& Build() const { return inv_; }
  operator const v1::Inventory&() const { return inv_; }

 private:
  v1::Inventory inv_;
};

// A factory for the inventory "count devices of each row" (the conformance tables' host column).
std::function<v1::Inventory()> HostOf(std::initializer_list<std::pair<v1::Row, int>> rows);

// Device UUID the builder gives device `i` of `row`: "GPU-<row><i>..." (unique per device).
std::string TestUuid(v1::Row row, int i);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_INVENTORY_BUILDER_H_
