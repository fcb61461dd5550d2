// What an unprivileged caller gets of an inventory (inventory_redaction.h): no process's pid or uid
// (devices and MIG instances), no lease's id or pid; everything else as it was.
#include "server/service/inventory_redaction.h"

#include "gtest/gtest.h"
#include "tests/placement/inventory_builder.h"

namespace devplace::testing {
namespace {

using service::HasPrivateUsage;
using service::RedactInventory;
using service::RedactLease;

v1::LeaseInfo Lease() {
  v1::LeaseInfo lease;
  lease.set_lease_id("0123456789abcdef0123456789abcdef");
  lease.set_holder(v1::LEASE_HOLDER_PROCESS);
  lease.set_pid(4321);
  lease.set_uid(1000);
  lease.add_devices()->set_pci_bus_id("0000:20:00.0");
  return lease;
}

// Device `i` of the NVIDIA row (the builder puts the CPU first).
v1::Device& Gpu(v1::Inventory& inventory, int i) {
  for (v1::Backend& b : *inventory.mutable_backends()) {
    if (b.row() == v1::ROW_CUDA_NVIDIA) return *b.mutable_devices(i);
  }
  ADD_FAILURE() << "no NVIDIA row";
  return *inventory.add_backends()->add_devices();
}

void AddProcess(v1::DeviceUsage& usage, uint32_t pid, uint32_t uid) {
  v1::DeviceUsageProcess& p = *usage.add_processes();
  p.set_pid(pid);
  p.set_uid(uid);
  p.set_used_memory_bytes(kGiB);
  usage.set_process_count(usage.process_count() + 1);
}

TEST(InventoryRedaction, ALeaseLosesItsIdAndPidOnlyForAnotherUser) {
  for (const service::Viewer& other : {service::Viewer{}, service::Viewer{false, 1001u}}) {
    v1::LeaseInfo lease = Lease();
    RedactLease(lease, other);
    v1::LeaseInfo expected = Lease();
    expected.clear_lease_id();
    expected.clear_pid();
    EXPECT_EQ(lease.SerializeAsString(), expected.SerializeAsString());
    EXPECT_EQ(lease.uid(), 1000u);  // who holds devices is public; which process is not
  }
}

TEST(InventoryRedaction, ItsOwnerAndAPrivilegedCallerSeeALeaseWhole) {
  for (const service::Viewer& whole : {service::Viewer{false, 1000u}, service::Viewer{true, {}}}) {
    v1::LeaseInfo lease = Lease();
    RedactLease(lease, whole);
    EXPECT_EQ(lease.SerializeAsString(), Lease().SerializeAsString());
  }
  // A lease without an owner (picked over remote TCP) is whole to privileged callers only.
  v1::LeaseInfo ownerless = Lease();
  ownerless.clear_uid();
  RedactLease(ownerless, service::Viewer{false, 1000u});
  EXPECT_EQ(ownerless.lease_id(), "");
}

TEST(InventoryRedaction, ProcessesOfDevicesAndPartitionsAndLeasesLoseWhatIdentifiesThem) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  AddProcess(*b.Device(v1::ROW_CUDA_NVIDIA, 0).mutable_usage(), 100, 1000);
  v1::Partition& mig = *b.Device(v1::ROW_CUDA_NVIDIA, 1).add_partitions();
  mig.set_uuid("MIG-00000000-0000-4000-8000-000000000001");
  AddProcess(*mig.mutable_usage(), 200, 1001);
  v1::Inventory inventory = b.Build();
  *inventory.add_leases() = Lease();
  const v1::Inventory before = inventory;
  ASSERT_TRUE(HasPrivateUsage(inventory));

  RedactInventory(inventory);
  const v1::DeviceUsageProcess& device_process = Gpu(inventory, 0).usage().processes(0);
  EXPECT_EQ(device_process.pid(), 0u);
  EXPECT_FALSE(device_process.has_uid());
  EXPECT_EQ(device_process.used_memory_bytes(), kGiB);
  const v1::DeviceUsageProcess& mig_process = Gpu(inventory, 1).partitions(0).usage().processes(0);
  EXPECT_EQ(mig_process.pid(), 0u);
  EXPECT_FALSE(mig_process.has_uid());
  EXPECT_EQ(inventory.leases(0).lease_id(), "");
  EXPECT_EQ(inventory.leases(0).pid(), 0u);
  // The rest is untouched: put the identities back and it is the inventory it was.
  v1::Inventory restored = inventory;
  v1::Inventory original = before;
  *Gpu(restored, 0).mutable_usage()->mutable_processes(0) = Gpu(original, 0).usage().processes(0);
  *Gpu(restored, 1).mutable_partitions(0)->mutable_usage()->mutable_processes(0) =
      Gpu(original, 1).partitions(0).usage().processes(0);
  *restored.mutable_leases(0) = before.leases(0);
  EXPECT_EQ(restored.SerializeAsString(), before.SerializeAsString());
  // Still "private" by HasPrivateUsage's measure: it says whether there is anything to redact, not
  // whether it was.
  EXPECT_TRUE(HasPrivateUsage(inventory));
}

TEST(InventoryRedaction, AnInventoryWithoutProcessesOrLeasesHasNothingPrivate) {
  InventoryBuilder b;
  b.Add(v1::ROW_CUDA_NVIDIA, 2);
  b.Device(v1::ROW_CUDA_NVIDIA, 0).mutable_usage()->set_memory_used_bytes(kGiB);  // memory in use is public
  b.Device(v1::ROW_CUDA_NVIDIA, 1).add_partitions()->mutable_usage()->set_process_count(0);
  v1::Inventory inventory = b.Build();
  EXPECT_FALSE(HasPrivateUsage(inventory));
  const std::string before = inventory.SerializeAsString();
  RedactInventory(inventory);
  EXPECT_EQ(inventory.SerializeAsString(), before);

  v1::Inventory with_mig_process = b.Build();
  AddProcess(*Gpu(with_mig_process, 1).mutable_partitions(0)->mutable_usage(), 7, 7);
  EXPECT_TRUE(HasPrivateUsage(with_mig_process));
  v1::Inventory with_lease = b.Build();
  *with_lease.add_leases() = Lease();
  EXPECT_TRUE(HasPrivateUsage(with_lease));
}

}  // namespace
}  // namespace devplace::testing
