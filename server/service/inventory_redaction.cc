#include "server/service/inventory_redaction.h"

namespace devplace::service {
namespace {

template <typename Fn>
void ForEachUsage(v1::Inventory& inventory, Fn fn) {
  for (v1::Backend& b : *inventory.mutable_backends()) {
    for (v1::Device& d : *b.mutable_devices()) {
      if (d.has_usage()) fn(*d.mutable_usage());
      for (v1::Partition& p : *d.mutable_partitions()) {
        if (p.has_usage()) fn(*p.mutable_usage());
      }
    }
  }
}

}  // namespace

void RedactLease(v1::LeaseInfo& lease, const Viewer& viewer) {
  if (viewer.privileged || (viewer.uid.has_value() && lease.has_uid() && lease.uid() == *viewer.uid)) return;
  lease.clear_lease_id();
  lease.clear_pid();
}

void RedactInventory(v1::Inventory& inventory) {
  ForEachUsage(inventory, [](v1::DeviceUsage& usage) {
    for (v1::DeviceUsageProcess& p : *usage.mutable_processes()) {
      p.clear_pid();
      p.clear_uid();
    }
  });
  for (v1::LeaseInfo& lease : *inventory.mutable_leases()) RedactLease(lease, Viewer{});
}

bool HasPrivateUsage(const v1::Inventory& inventory) {
  if (inventory.leases_size() > 0) return true;
  for (const v1::Backend& b : inventory.backends()) {
    for (const v1::Device& d : b.devices()) {
      if (d.usage().processes_size() > 0) return true;
      for (const v1::Partition& p : d.partitions()) {
        if (p.usage().processes_size() > 0) return true;
      }
    }
  }
  return false;
}

}  // namespace devplace::service
