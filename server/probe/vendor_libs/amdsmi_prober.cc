#include "server/probe/vendor_libs/amdsmi_prober.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/probe/vendor_libs/amdsmi_api.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/vendor_libs/library_status.h"
#include "server/probe/vendor_libs/vendor_library.h"

namespace devplace::probe {
namespace {

struct AmdSmiLibrary {
  decltype(&amdsmi_init) init = nullptr;
  decltype(&amdsmi_shut_down) shut_down = nullptr;
  decltype(&amdsmi_get_socket_handles) sockets = nullptr;
  decltype(&amdsmi_get_processor_handles) processors = nullptr;
  decltype(&amdsmi_get_gpu_device_bdf) bdf = nullptr;
  decltype(&amdsmi_get_gpu_device_uuid) uuid = nullptr;
  decltype(&amdsmi_get_gpu_asic_info) asic_info = nullptr;
  decltype(&amdsmi_get_gpu_driver_info) driver_info = nullptr;
  decltype(&amdsmi_get_gpu_memory_total) memory_total = nullptr;
  decltype(&amdsmi_get_gpu_memory_usage) memory_usage = nullptr;
  decltype(&amdsmi_get_gpu_compute_partition) compute_partition = nullptr;
  decltype(&amdsmi_get_gpu_memory_partition) memory_partition = nullptr;
};

// The NUL-terminated string at the start of `buffer` (at most `size` bytes).
std::string Text(const char* buffer, size_t size) { return std::string(buffer, strnlen(buffer, size)); }

// amdsmi_bdf_t's word as a canonical bus id.
std::string BusId(uint64_t word) {
  return absl::StrFormat("%04x:%02x:%02x.%x", word >> 16, (word >> 8) & 0xff, (word >> 3) & 0x1f, word & 0x7);
}

// What AMD SMI's per-GPU answers mean (amdsmi.h: NOT_FOUND for a processor that is gone).
CallResult ClassifyAmdSmi(int code) {
  switch (code) {
    case AMDSMI_STATUS_SUCCESS: return CallResult::kOk;
    case AMDSMI_STATUS_NOT_SUPPORTED:
    case AMDSMI_STATUS_NOT_YET_IMPLEMENTED:
    case AMDSMI_STATUS_NO_DATA: return CallResult::kNotSupported;
    case AMDSMI_STATUS_NOT_FOUND: return CallResult::kLost;
    case AMDSMI_STATUS_NO_PERM: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kAmdSmiErrors = {"AMD SMI", AmdSmiStatusName, ClassifyAmdSmi, "AMD SMI GPU", false};

// Reads one AMD SMI session into a snapshot.
class Reader {
 public:
  Reader(const AmdSmiLibrary& lib, VendorCall& call, AmdSmiSnapshot& out)
      : lib_(lib), call_(call), out_(out), status_(kAmdSmiErrors, call, out.notes, out.problems) {}

  void ReadGpus() {
    uint32_t sockets = 0;
    call_.Enter("amdsmi_get_socket_handles");
    amdsmi_status_t r = lib_.sockets(&sockets, nullptr);
    if (!SystemOk(r, "amdsmi_get_socket_handles")) return;
    std::vector<amdsmi_socket_handle> socket_handles(sockets);
    r = lib_.sockets(&sockets, socket_handles.data());
    if (!SystemOk(r, "amdsmi_get_socket_handles")) return;
    socket_handles.resize(std::min<size_t>(sockets, socket_handles.size()));
    int index = 0;
    for (amdsmi_socket_handle socket : socket_handles) {
      uint32_t count = 0;
      call_.Enter("amdsmi_get_processor_handles");
      if (!SystemOk(lib_.processors(socket, &count, nullptr), "amdsmi_get_processor_handles")) continue;
      std::vector<amdsmi_processor_handle> handles(count);
      if (!SystemOk(lib_.processors(socket, &count, handles.data()), "amdsmi_get_processor_handles")) continue;
      handles.resize(std::min<size_t>(count, handles.size()));
      for (amdsmi_processor_handle handle : handles) ReadGpu(handle, index++);
    }
  }

 private:
  bool SystemOk(amdsmi_status_t r, const char* call) {
    if (r == AMDSMI_STATUS_SUCCESS) return true;
    out_.problems.push_back(absl::StrCat(call, ": ", AmdSmiStatusName(r)));
    return false;
  }

  // A per-GPU call (kAmdSmiErrors: NOT_FOUND marks the GPU lost, NO_PERM is a note), not made
  // once the GPU is lost: true on success.
  template <typename Fn>
  bool Call(AmdSmiGpu& gpu, const char* call, Fn fn) {
    return status_.Device({gpu.index, gpu.bus_id, gpu.lost}, call, fn);
  }

  // A function that fills a char buffer (or a structure read by its leading char array).
  template <typename Fn>
  std::string ReadText(AmdSmiGpu& gpu, const char* call, Fn fn) {
    auto buffer = std::make_unique<uint64_t[]>(DEVPLACE_AMDSMI_BUFFER / sizeof(uint64_t));  // aligned, zeroed
    char* text = reinterpret_cast<char*>(buffer.get());
    if (!Call(gpu, call, [&] { return fn(text); })) return "";
    return Text(text, DEVPLACE_AMDSMI_BUFFER);
  }

  void ReadGpu(amdsmi_processor_handle handle, int index) {
    AmdSmiGpu gpu;
    gpu.index = index;
    amdsmi_bdf_t bdf = {};
    if (!Call(gpu, "amdsmi_get_gpu_device_bdf", [&] { return lib_.bdf(handle, &bdf); })) {
      if (!gpu.lost.empty()) out_.notes.push_back(absl::StrCat("AMD SMI GPU ", index, ": ", gpu.lost));
      return;  // no bus id: cannot be attributed
    }
    gpu.bus_id = BusId(bdf.as_uint);
    if (std::any_of(out_.gpus.begin(), out_.gpus.end(), [&](const AmdSmiGpu& g) { return g.bus_id == gpu.bus_id; })) {
      // A partitioned GPU (CPX) lists one processor per partition on the same function: the first
      // one stands for the GPU.
      return;
    }
    if (lib_.asic_info != nullptr) {
      gpu.name = ReadText(gpu, "amdsmi_get_gpu_asic_info", [&](char* b) { return lib_.asic_info(handle, b); });
    }
    if (lib_.uuid != nullptr) {
      char uuid[DEVPLACE_AMDSMI_BUFFER] = {};
      unsigned int length = AMDSMI_GPU_UUID_SIZE;
      if (Call(gpu, "amdsmi_get_gpu_device_uuid", [&] { return lib_.uuid(handle, &length, uuid); })) {
        gpu.uuid = Text(uuid, AMDSMI_GPU_UUID_SIZE);
      }
    }
    uint64_t bytes = 0;
    if (lib_.memory_total != nullptr &&
        Call(gpu, "amdsmi_get_gpu_memory_total", [&] { return lib_.memory_total(handle, AMDSMI_MEM_TYPE_VRAM, &bytes); })) {
      gpu.vram_total_bytes = bytes;
    }
    if (lib_.memory_usage != nullptr &&
        Call(gpu, "amdsmi_get_gpu_memory_usage", [&] { return lib_.memory_usage(handle, AMDSMI_MEM_TYPE_VRAM, &bytes); })) {
      gpu.vram_used_bytes = bytes;
    }
    if (lib_.compute_partition != nullptr) {
      gpu.compute_partition = ReadText(gpu, "amdsmi_get_gpu_compute_partition", [&](char* b) {
        return lib_.compute_partition(handle, b, DEVPLACE_AMDSMI_BUFFER);
      });
    }
    if (lib_.memory_partition != nullptr) {
      gpu.memory_partition = ReadText(gpu, "amdsmi_get_gpu_memory_partition", [&](char* b) {
        return lib_.memory_partition(handle, b, DEVPLACE_AMDSMI_BUFFER);
      });
    }
    if (out_.driver_version.empty() && lib_.driver_info != nullptr) {
      out_.driver_version =
          ReadText(gpu, "amdsmi_get_gpu_driver_info", [&](char* b) { return lib_.driver_info(handle, b); });
    }
    out_.gpus.push_back(std::move(gpu));
  }

  const AmdSmiLibrary& lib_;
  VendorCall& call_;
  AmdSmiSnapshot& out_;
  LibraryStatus status_;
};

// Partitions per compute partition mode, where the mode alone says (CPX depends on the XCD count).
std::optional<int> PartitionCount(const std::string& mode) {
  if (mode == "SPX") return 1;
  if (mode == "DPX") return 2;
  if (mode == "TPX") return 3;
  if (mode == "QPX") return 4;
  return std::nullopt;
}

}  // namespace

std::string AmdSmiStatusName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {AMDSMI_STATUS_SUCCESS, "AMDSMI_STATUS_SUCCESS"},
      {AMDSMI_STATUS_INVAL, "AMDSMI_STATUS_INVAL"},
      {AMDSMI_STATUS_NOT_SUPPORTED, "AMDSMI_STATUS_NOT_SUPPORTED"},
      {AMDSMI_STATUS_NOT_YET_IMPLEMENTED, "AMDSMI_STATUS_NOT_YET_IMPLEMENTED"},
      {AMDSMI_STATUS_FAIL_LOAD_MODULE, "AMDSMI_STATUS_FAIL_LOAD_MODULE"},
      {AMDSMI_STATUS_FAIL_LOAD_SYMBOL, "AMDSMI_STATUS_FAIL_LOAD_SYMBOL"},
      {AMDSMI_STATUS_DRM_ERROR, "AMDSMI_STATUS_DRM_ERROR"},
      {AMDSMI_STATUS_API_FAILED, "AMDSMI_STATUS_API_FAILED"},
      {AMDSMI_STATUS_TIMEOUT, "AMDSMI_STATUS_TIMEOUT"},
      {AMDSMI_STATUS_NO_PERM, "AMDSMI_STATUS_NO_PERM"},
      {AMDSMI_STATUS_IO, "AMDSMI_STATUS_IO"},
      {AMDSMI_STATUS_INIT_ERROR, "AMDSMI_STATUS_INIT_ERROR"},
      {AMDSMI_STATUS_BUSY, "AMDSMI_STATUS_BUSY"},
      {AMDSMI_STATUS_NOT_FOUND, "AMDSMI_STATUS_NOT_FOUND"},
      {AMDSMI_STATUS_NOT_INIT, "AMDSMI_STATUS_NOT_INIT"},
      {AMDSMI_STATUS_DRIVER_NOT_LOADED, "AMDSMI_STATUS_DRIVER_NOT_LOADED"},
      {AMDSMI_STATUS_NO_DATA, "AMDSMI_STATUS_NO_DATA"},
      {AMDSMI_STATUS_INSUFFICIENT_SIZE, "AMDSMI_STATUS_INSUFFICIENT_SIZE"},
      {AMDSMI_STATUS_UNKNOWN_ERROR, "AMDSMI_STATUS_UNKNOWN_ERROR"},
  };
  for (const auto& [value, name] : kNames) {
    if (value == code) return absl::StrCat(name, " (", code, ")");
  }
  return absl::StrCat("AMD SMI status ", code);
}

AmdSmiSnapshot ReadAmdSmi(const std::string& library, VendorCall& call) {
  AmdSmiSnapshot out;
  call.Enter("dlopen");
  VendorLibrary so(library);
  if (!so.loaded()) {
    out.skipped = so.not_found();
    out.unusable = so.error();
    return out;
  }
  AmdSmiLibrary lib;
  so.Require("amdsmi_init", lib.init);
  so.Require("amdsmi_shut_down", lib.shut_down);
  so.Require("amdsmi_get_socket_handles", lib.sockets);
  so.Require("amdsmi_get_processor_handles", lib.processors);
  so.Require("amdsmi_get_gpu_device_bdf", lib.bdf);
  so.Optional("amdsmi_get_gpu_device_uuid", lib.uuid);
  so.Optional("amdsmi_get_gpu_asic_info", lib.asic_info);
  so.Optional("amdsmi_get_gpu_driver_info", lib.driver_info);
  so.Optional("amdsmi_get_gpu_memory_total", lib.memory_total);
  so.Optional("amdsmi_get_gpu_memory_usage", lib.memory_usage);
  so.Optional("amdsmi_get_gpu_compute_partition", lib.compute_partition);
  so.Optional("amdsmi_get_gpu_memory_partition", lib.memory_partition);
  if (std::string missing = so.MissingRequired("not an AMD SMI library, or one too old"); !missing.empty()) {
    out.unusable = std::move(missing);
    return out;
  }
  if (std::string missing = so.MissingOptional(); !missing.empty()) out.notes.push_back(std::move(missing));
  call.Enter("amdsmi_init");
  const amdsmi_status_t r = lib.init(AMDSMI_INIT_AMD_GPUS);
  if (r != AMDSMI_STATUS_SUCCESS) {
    out.skipped = r == AMDSMI_STATUS_DRIVER_NOT_LOADED;
    out.unusable = absl::StrCat(out.skipped ? "amdgpu driver not loaded: " : "", "amdsmi_init: ", AmdSmiStatusName(r));
    call.Enter("dlclose");
    return out;
  }
  Reader(lib, call, out).ReadGpus();
  call.Enter("amdsmi_shut_down");
  const amdsmi_status_t down = lib.shut_down();
  if (down != AMDSMI_STATUS_SUCCESS) out.problems.push_back(absl::StrCat("amdsmi_shut_down: ", AmdSmiStatusName(down)));
  call.Enter("dlclose");
  return out;
}

absl::StatusOr<ProbeOutcome> MergeAmdSmi(const AmdSmiSnapshot& snapshot, HostFacts& facts) {
  if (snapshot.unusable) {
    if (snapshot.skipped) return Skipped(*snapshot.unusable);
    return absl::InternalError(*snapshot.unusable);
  }
  std::vector<std::string> notes;
  std::set<std::string> seen;
  int merged = 0, lost = 0;
  for (const AmdSmiGpu& gpu : snapshot.gpus) {
    PciFunction* fn = facts.Find(gpu.bus_id);
    if (fn == nullptr || fn->row != v1::ROW_CUDA_AMD) {
      notes.push_back(absl::StrCat("AMD SMI GPU ", gpu.bus_id, " (processor ", gpu.index, ") is not an AMD GPU of the PCI scan"));
      continue;
    }
    seen.insert(gpu.bus_id);
    ++merged;
    v1::Device& d = fn->device;
    auto& attributes = *d.mutable_attributes();
    if (!gpu.name.empty()) d.set_name(gpu.name);
    if (!gpu.uuid.empty()) {
      attributes["amd_smi_uuid"] = gpu.uuid;
      if (d.uuid().empty()) d.set_uuid(gpu.uuid);
    }
    if (gpu.vram_total_bytes) {
      d.set_memory_total_bytes(*gpu.vram_total_bytes);
      if (gpu.vram_used_bytes) {
        d.set_memory_free_bytes(*gpu.vram_total_bytes - std::min(*gpu.vram_used_bytes, *gpu.vram_total_bytes));
      } else {
        d.clear_memory_free_bytes();  // sysfs' figure may belong to another total
      }
      attributes["memory_source"] = "amd_smi";
    }
    if (!gpu.compute_partition.empty()) {
      attributes["compute_partition"] = gpu.compute_partition;
      if (const std::optional<int> count = PartitionCount(gpu.compute_partition)) {
        attributes["compute_partition_count"] = absl::StrCat(*count);
      }
    }
    if (!gpu.memory_partition.empty()) attributes["memory_partition"] = gpu.memory_partition;
    if (!gpu.lost.empty()) {
      ++lost;
      MarkLost(d, gpu.lost);
    }
  }
  for (PciFunction* fn : facts.OfRow(v1::ROW_CUDA_AMD)) {
    if (seen.count(fn->device.pci_bus_id()) == 0) {
      notes.push_back(absl::StrCat(fn->device.pci_bus_id(), " is not listed by AMD SMI"));
    }
  }
  std::vector<std::string> found;
  MergeLibraryDriverVersion(facts, v1::ROW_CUDA_AMD, snapshot.driver_version, "AMD SMI", "kernel", found, notes);
  found.push_back(absl::StrCat(snapshot.gpus.size(), " AMD SMI GPUs, ", merged, " matched by bus id"));
  if (lost > 0) found.push_back(absl::StrCat(lost, " lost"));
  notes.insert(notes.begin(), snapshot.notes.begin(), snapshot.notes.end());
  Problems problems;
  for (const std::string& problem : snapshot.problems) problems.Add(problem);
  return problems.Finish(FoundAndNotes(found, notes));
}

VendorProber AmdSmiProber(std::string library) {
  return {"amd_smi", [library = std::move(library)](const HostFacts& facts, VendorCall& call) -> VendorMerge {
            if (!facts.HasRow(v1::ROW_CUDA_AMD)) {
              return [](HostFacts&) -> absl::StatusOr<ProbeOutcome> { return Skipped("no AMD GPU on the PCI bus"); };
            }
            auto snapshot = std::make_shared<const AmdSmiSnapshot>(ReadAmdSmi(library, call));
            return [snapshot](HostFacts& merged) { return MergeAmdSmi(*snapshot, merged); };
          }};
}

VendorProber prober_factory::amd_smi(std::string library, const ProbeOptions&) {
  VendorProber prober = AmdSmiProber(std::move(library));
  prober.row = v1::ROW_CUDA_AMD;
  return prober;
}

}  // namespace devplace::probe
