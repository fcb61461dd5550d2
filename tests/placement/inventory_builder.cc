#include "tests/placement/inventory_builder.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/placement/backends.h"

namespace devplace::testing {

std::string TestUuid(v1::Row row, int i) {
  return absl::StrFormat("GPU-%02d%02d0000-0000-4000-8000-%012d", static_cast<int>(row), i, i);
}

namespace {
std::string NodeFor(v1::Row row, int i) {
  switch (row) {
    case v1::ROW_CUDA_NVIDIA: return absl::StrCat("/dev/nvidia", i);
    case v1::ROW_CUDA_AMD: return absl::StrCat("/dev/dri/renderD", 128 + i);
    case v1::ROW_XPU: return absl::StrCat("/dev/dri/renderD", 128 + i);
    case v1::ROW_NEURON: return absl::StrCat("/dev/neuron", i);
    case v1::ROW_TPU: return absl::StrCat("/dev/vfio/", i);
    case v1::ROW_HPU: return absl::StrCat("/dev/accel/accel", i);
    case v1::ROW_NPU: return absl::StrCat("/dev/davinci", i);
    case v1::ROW_MLU: return absl::StrCat("/dev/cambricon_dev", i);
    case v1::ROW_MUSA: return absl::StrCat("/dev/mtgpu.", i);
    default: return "";
  }
}
}  // namespace

InventoryBuilder::InventoryBuilder() {
  inv_.set_revision(7);
  inv_.mutable_host()->set_hostname("test-host");
  inv_.mutable_host()->set_os("linux");
  inv_.mutable_host()->set_memory_total_bytes(256 * kGiB);
  inv_.mutable_host()->set_memory_available_bytes(kHostRamAvailable);
  v1::Backend* cpu = inv_.add_backends();
  cpu->set_row(v1::ROW_CPU);
  cpu->set_name("cpu");
  cpu->set_device_type("cpu");
  cpu->set_package("torch");
  cpu->set_state(v1::BACKEND_STATE_READY);
}

v1::Backend& InventoryBuilder::Backend(v1::Row row) {
  for (v1::Backend& b : *inv_.mutable_backends()) {
    if (b.row() == row) return b;
  }
  const placement::BackendSpec* spec = placement::FindBackend(row);
  v1::Backend* b = inv_.add_backends();
  b->set_row(row);
  b->set_name(std::string(spec->name));
  b->set_device_type(std::string(spec->device_type));
  b->set_hardware(std::string(spec->hardware));
  b->set_vendor(std::string(spec->vendor));
  b->set_package(std::string(spec->package));
  b->set_state(v1::BACKEND_STATE_READY);
  return *b;
}

InventoryBuilder& InventoryBuilder::Add(v1::Row row, int count) {
  v1::Backend& b = Backend(row);
  for (int i = 0; i < count; ++i) {
    v1::Device* d = b.add_devices();
    const int idx = b.devices_size() - 1;
    d->set_host_index(idx);
    d->set_name(absl::StrCat(b.hardware(), " ", idx));
    if (row != v1::ROW_MPS) {
      d->set_pci_bus_id(absl::StrFormat("0000:%02x:00.0", 0x10 * static_cast<int>(row) + idx));
      d->set_uuid(TestUuid(row, idx));
      const std::string node = NodeFor(row, idx);
      if (!node.empty()) d->add_device_nodes(node);  // sdaa: no documented node name
    }
    d->set_device_id("0001");
    d->set_memory_total_bytes(80 * kGiB);
    d->set_memory_free_bytes(80 * kGiB);
    d->set_numa_node(-1);
    d->set_device_nodes_present(true);
    d->set_driver_loaded(true);
    d->set_health(v1::HEALTH_OK);
    d->set_supported(true);
    d->set_usable(true);
    d->set_minor(idx);
  }
  return *this;
}

std::function<v1::Inventory()> HostOf(std::initializer_list<std::pair<v1::Row, int>> rows) {
  std::vector<std::pair<v1::Row, int>> copy(rows);
  return [copy] {
    InventoryBuilder b;
    for (const auto& [row, n] : copy) b.Add(row, n);
    return v1::Inventory(b.Build());
  };
}

v1::Device& InventoryBuilder::Device(v1::Row row, int i) { return *Backend(row).mutable_devices(i); }

}  // namespace devplace::testing
