#include "server/placement/allocation.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/common/pci_bus_id.h"

namespace devplace::placement {
namespace {

// Bounds of DeviceAllocation (devplace.proto).
constexpr int kMaxDevices = 1024;
constexpr int kMaxAttributes = 64;
constexpr size_t kMaxStringBytes = 256;
constexpr size_t kMaxSourceBytes = 512;
constexpr int kMaxProblems = 64;
constexpr size_t kMaxProblemBytes = 1024;

// The Kubernetes attribute every driver may publish for a device's PCI address, then the
// drivers' own spellings of it.
constexpr absl::string_view kPciAttributes[] = {"resource.kubernetes.io/pciBusID", "pciBusID", "pciAddr", "pciAddress"};

struct KnownDriver {
  absl::string_view driver;
  v1::Row row;
};
constexpr KnownDriver kKnownDrivers[] = {
    {"gpu.nvidia.com", v1::ROW_CUDA_NVIDIA},
    {"gpu.amd.com", v1::ROW_CUDA_AMD},
    {"gpu.intel.com", v1::ROW_XPU},
    {"tpu.google.com", v1::ROW_TPU},
};

absl::Status CheckBounds(const v1::DeviceAllocation& allocation) {
  const auto too_long = [](absl::string_view field, size_t size, size_t bound) {
    return absl::InvalidArgumentError(absl::StrCat("device_allocation.", field, ": ", size, " bytes; at most ", bound));
  };
  if (allocation.source().size() > kMaxSourceBytes) {
    return too_long("source", allocation.source().size(), kMaxSourceBytes);
  }
  if (allocation.devices_size() > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("device_allocation.devices: ", allocation.devices_size(),
                                                   " entries; at most ", kMaxDevices));
  }
  if (allocation.problems_size() > kMaxProblems) {
    return absl::InvalidArgumentError(absl::StrCat("device_allocation.problems: ", allocation.problems_size(),
                                                   " entries; at most ", kMaxProblems));
  }
  for (int i = 0; i < allocation.problems_size(); ++i) {
    if (allocation.problems(i).size() > kMaxProblemBytes) {
      return too_long(absl::StrCat("problems[", i, "]"), allocation.problems(i).size(), kMaxProblemBytes);
    }
  }
  for (int i = 0; i < allocation.devices_size(); ++i) {
    const v1::AllocatedDevice& d = allocation.devices(i);
    const std::string at = absl::StrCat("devices[", i, "].");
    const std::pair<absl::string_view, const std::string*> fields[] = {
        {"claim", &d.claim()}, {"request", &d.request()}, {"driver", &d.driver()}, {"pool", &d.pool()}, {"name", &d.name()}};
    for (const auto& [name, value] : fields) {
      if (value->size() > kMaxStringBytes) return too_long(absl::StrCat(at, name), value->size(), kMaxStringBytes);
    }
    for (const auto& [name, value] : fields) {
      if (value->empty()) {
        return absl::InvalidArgumentError(absl::StrCat("device_allocation.", at, name, ": empty; required (1 to ",
                                                       kMaxStringBytes, " bytes, as the metadata file gives it)"));
      }
    }
    if (d.attributes_size() > kMaxAttributes) {
      return absl::InvalidArgumentError(absl::StrCat("device_allocation.", at, "attributes: ", d.attributes_size(),
                                                     " entries; at most ", kMaxAttributes));
    }
    for (const auto& [key, value] : d.attributes()) {
      if (key.size() > kMaxStringBytes || value.size() > kMaxStringBytes) {
        return too_long(absl::StrCat(at, "attributes.", key.substr(0, 64)), std::max(key.size(), value.size()),
                        kMaxStringBytes);
      }
    }
  }
  return absl::OkStatus();
}

// The value of attribute `name` of `d`: spelled `name` or "<driver>/<name>" (the driver's own
// domain); a qualified `name` only as itself. Null when absent or empty.
// The names Identities reads (with kPciAttributes), plain or qualified by the driver.
constexpr absl::string_view kIdentityAttributes[] = {"uuid", "minor", "index"};

const std::string* Attribute(const v1::AllocatedDevice& d, absl::string_view name) {
  const auto find = [&d](const std::string& key) -> const std::string* {
    const auto it = d.attributes().find(key);
    return it != d.attributes().end() && !it->second.empty() ? &it->second : nullptr;
  };
  const std::string* value = find(std::string(name));
  if (value != nullptr || absl::StrContains(name, '/')) return value;
  return find(absl::StrCat(d.driver(), "/", name));  // built only when the plain spelling is absent
}

std::optional<int64_t> IntAttribute(const v1::AllocatedDevice& d, absl::string_view name) {
  const std::string* v = Attribute(d, name);
  int64_t n = 0;
  if (v == nullptr || !absl::SimpleAtoi(*v, &n)) return std::nullopt;
  return n;
}

// The inventory's accelerators by each identity an allocated device may name them by, so that a
// request at the bounds (1,024 devices, each with a UUID, four PCI address spellings and a minor)
// costs a hash lookup per identity instead of a pass over every device. Each list keeps the
// inventory's order and holds a device once per key.
struct Candidate {
  const v1::Backend* backend;
  const v1::Device* device;
};
struct InventoryIndex {
  std::unordered_map<std::string, std::vector<Candidate>> uuid;  // lowercased: the device's and its partitions'
  std::unordered_map<std::string, std::vector<Candidate>> pci;   // pci_bus_id (canonical)
  std::unordered_map<std::string, std::vector<Candidate>> node;  // each of device_nodes
  std::unordered_map<int64_t, std::vector<Candidate>> minor;
  std::unordered_map<int64_t, std::vector<Candidate>> host_index;
};

InventoryIndex IndexInventory(const v1::Inventory& inventory) {
  InventoryIndex index;
  for (const v1::Backend& b : inventory.backends()) {
    if (b.row() == v1::ROW_CPU) continue;
    for (const v1::Device& dev : b.devices()) {
      const Candidate c{&b, &dev};
      // A key the device carries twice (a partition with the device's own UUID) still names it once.
      const auto add = [&c](std::vector<Candidate>& list) {
        if (list.empty() || list.back().device != c.device) list.push_back(c);
      };
      if (!dev.uuid().empty()) add(index.uuid[absl::AsciiStrToLower(dev.uuid())]);
      for (const v1::Partition& part : dev.partitions()) {
        if (!part.uuid().empty()) add(index.uuid[absl::AsciiStrToLower(part.uuid())]);
      }
      if (!dev.pci_bus_id().empty()) add(index.pci[dev.pci_bus_id()]);
      for (const std::string& n : dev.device_nodes()) add(index.node[n]);
      add(index.minor[dev.minor()]);
      add(index.host_index[static_cast<int64_t>(dev.host_index())]);
    }
  }
  return index;
}

// One way to name a host device: what it is (for the explanation) and the devices that have it
// (null: none).
struct Identity {
  std::string what;
  const std::vector<Candidate>* candidates = nullptr;
};

template <typename Key>
const std::vector<Candidate>* Find(const std::unordered_map<Key, std::vector<Candidate>>& map, const Key& key) {
  const auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// Intel's device names lead with the PCI address, dashes for ':' and '.': "0000-03-00-0-0x56a0".
std::optional<std::string> IntelNamePci(absl::string_view name) {
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() < 4) return std::nullopt;
  absl::StatusOr<std::string> pci = NormalizePciBusId(absl::StrCat(parts[0], ":", parts[1], ":", parts[2], ".", parts[3]));
  if (!pci.ok()) return std::nullopt;
  return *pci;
}

// AMD's device names are "gpu-<card index>-<render index>": the render node is /dev/dri/renderD<render>.
std::optional<std::string> AmdNameRenderNode(absl::string_view name) {
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  int card = 0, render = 0;
  if (parts.size() != 3 || parts[0] != "gpu" || !absl::SimpleAtoi(parts[1], &card) ||
      !absl::SimpleAtoi(parts[2], &render)) {
    return std::nullopt;
  }
  return absl::StrCat("/dev/dri/renderD", render);
}

// The identities of `d` to try, most specific first, looked up in `index`.
std::vector<Identity> Identities(const v1::AllocatedDevice& d, v1::Row row, const InventoryIndex& index) {
  std::vector<Identity> out;
  if (const std::string* uuid = Attribute(d, "uuid")) {
    out.push_back({absl::StrCat("uuid ", *uuid), Find(index.uuid, absl::AsciiStrToLower(*uuid))});
  }
  // The PCI spellings usually carry one address: it is normalized once.
  const std::string* normalized_from = nullptr;
  absl::StatusOr<std::string> pci = absl::NotFoundError("none");
  for (absl::string_view key : kPciAttributes) {
    const std::string* value = Attribute(d, key);
    if (value == nullptr) continue;
    if (normalized_from == nullptr || *normalized_from != *value) {
      pci = NormalizePciBusId(*value);
      normalized_from = value;
    }
    if (!pci.ok()) continue;
    out.push_back({absl::StrCat(key, " ", *value), Find(index.pci, *pci)});
  }
  if (row == v1::ROW_CUDA_NVIDIA) {
    if (std::optional<int64_t> minor = IntAttribute(d, "minor")) {
      out.push_back({absl::StrCat("minor ", *minor), Find(index.minor, *minor)});
    }
  }
  if (row == v1::ROW_TPU) {
    if (std::optional<int64_t> i = IntAttribute(d, "index")) {
      out.push_back({absl::StrCat("index ", *i, " (chip id)"), Find(index.host_index, *i)});
    }
  }
  if (row == v1::ROW_XPU) {
    if (std::optional<std::string> pci = IntelNamePci(d.name())) {
      out.push_back({absl::StrCat("its name's PCI address ", *pci), Find(index.pci, *pci)});
    }
  }
  if (row == v1::ROW_CUDA_AMD) {
    if (std::optional<std::string> node = AmdNameRenderNode(d.name())) {
      out.push_back({absl::StrCat("its name's render node ", *node), Find(index.node, *node)});
    }
  }
  return out;
}

std::string Describe(const v1::AllocatedDevice& d) {
  return absl::StrCat("claim ", d.claim(), d.from_template() ? " (from a ResourceClaimTemplate)" : "", " request ",
                      d.request(), " driver ", d.driver(), " device ", d.name(),
                      d.pool().empty() ? "" : absl::StrCat(" (pool ", d.pool(), ")"));
}

std::string HostDevice(const v1::Backend& b, const v1::Device& dev) {
  return absl::StrCat(b.name(), " host device ", dev.host_index(),
                      dev.pci_bus_id().empty() ? "" : absl::StrCat(" (", dev.pci_bus_id(), ")"));
}

}  // namespace

v1::Row DriverRow(const std::string& driver) {
  for (const KnownDriver& k : kKnownDrivers) {
    if (k.driver == driver) return k.row;
  }
  return v1::ROW_UNSPECIFIED;
}

bool IdentifyingAttribute(absl::string_view key, absl::string_view driver) {
  if (!driver.empty() && key.size() > driver.size() && absl::StartsWith(key, driver) && key[driver.size()] == '/') {
    key.remove_prefix(driver.size() + 1);
  }
  for (absl::string_view name : kPciAttributes) {
    if (key == name) return true;
  }
  for (absl::string_view name : kIdentityAttributes) {
    if (key == name) return true;
  }
  return false;
}

absl::StatusOr<JobAllocation> MatchAllocation(const v1::Inventory& inventory, const v1::DeviceAllocation& allocation) {
  if (absl::Status s = CheckBounds(allocation); !s.ok()) return s;
  JobAllocation out;
  const std::string from = allocation.source().empty() ? "" : absl::StrCat(" in ", allocation.source());
  for (const std::string& problem : allocation.problems()) {
    out.unmatched.push_back(absl::StrCat("DRA device metadata", from, " could not be used: ", problem,
                                         "; the job's allocated devices may be incomplete (P-DRA)"));
  }
  const InventoryIndex index = allocation.devices_size() > 0 ? IndexInventory(inventory) : InventoryIndex{};
  for (const v1::AllocatedDevice& d : allocation.devices()) {
    const v1::Row row = DriverRow(d.driver());
    const std::vector<Identity> identities = Identities(d, row, index);
    const v1::Backend* found_backend = nullptr;
    const v1::Device* found = nullptr;
    const Identity* by = nullptr;
    for (const Identity& id : identities) {
      // The first identity that names exactly one device of the driver's row (any accelerator row
      // for another driver).
      int matches = 0;
      if (id.candidates != nullptr) {
        for (const Candidate& c : *id.candidates) {
          if (row != v1::ROW_UNSPECIFIED && c.backend->row() != row) continue;
          if (++matches == 1) found_backend = c.backend, found = c.device;
        }
      }
      if (matches == 1) {
        by = &id;
        break;
      }
      found = nullptr;
    }
    if (found != nullptr) {
      std::string& what = out.devices[found];
      what = what.empty() ? Describe(d) : absl::StrCat(what, "; ", Describe(d));
      out.explanation.push_back(absl::StrCat("P-DRA ", Describe(d), " is ", HostDevice(*found_backend, *found),
                                             ", by ", by->what));
      continue;
    }
    std::string tried_text = "it carries no attribute devplace identifies hardware by (uuid, a PCI address)";
    if (!identities.empty()) {
      tried_text = "no single inventory device has ";
      absl::StrAppend(&tried_text, absl::StrJoin(identities, ", or ", [](std::string* out, const Identity& id) {
                        out->append(id.what);
                      }));
    }
    if (row == v1::ROW_UNSPECIFIED) {
      out.explanation.push_back(absl::StrCat("P-DRA ", Describe(d), " is not an accelerator of this host's inventory (",
                                             tried_text, "): ignored"));
      continue;
    }
    out.unmatched.push_back(absl::StrCat("DRA ", Describe(d), from, " matches no device of this host's inventory: ",
                                         tried_text, "; the answer cannot account for it (P-DRA)"));
  }
  if (!out.devices.empty()) {
    out.explanation.push_back(absl::StrCat("P-DRA ", out.devices.size(), " host device(s) allocated to the job", from,
                                           ": the job's devices are exactly these, in its runtime's order"));
  } else if (allocation.devices_size() > 0) {
    out.explanation.push_back(absl::StrCat("P-DRA no allocated device", from,
                                           " matched the inventory: the job's devices are not narrowed"));
  }
  return out;
}

}  // namespace devplace::placement
