// The ROCm SMI prober (AMD GPUs): librocm_smi64 through dlopen (declarations in rocm_smi_api.h),
// merged into the AMD row (ROW_CUDA_AMD) by PCI bus id like the other accelerator libraries
// (accel_library.h). Per GPU: bus id, marketing name, unique id (as the uuid "GPU-<16 hex digits>",
// ROCm's ROCR_VISIBLE_DEVICES form), VRAM total and used, and the compute processes using it
// (rsmi_compute_process_info_get, then each process's GPUs from rsmi_compute_process_gpus_get and
// its VRAM from rsmi_compute_process_info_by_pid_get). It runs
// beside AMD SMI (which lists no processes) or alone on ROCm 5.x hosts, where AMD SMI does not exist;
// it reports before AMD SMI, so where both give a figure AMD SMI's is kept.
//
// The library reads this process's /sys (never --host_root): without /sys/class/kfd/kfd/topology
// the amdgpu driver is not loaded here (or /sys is not the host's) and the prober is skipped
// without initialising the library. (/sys is ProbeOptions::library_sysfs, which only the tests
// with the fake ROCm SMI move, to a fixture host's sys/.) rsmi_init of ROCm SMI 5.2.3 aborts the process on a KFD
// topology it does not expect (a node without io_links/): like every vendor prober it runs in a
// child process (vendor_process.h), so that costs this prober's report (CRASHED), nothing else.
//
// Sonames: Debian and Ubuntu ship librocm_smi64.so.1 (the registry's default); AMD's ROCm releases
// ship librocm_smi64.so.6 (ROCm 6.0) and librocm_smi64.so.7 (ROCm 6.1 and later). With the
// default soname, the release sonames are tried in turn when it is not installed.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/common/vendor_libraries.h"
#include "server/probe/host/prober_util.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/rocm_smi_api.h"

namespace devplace::probe {
namespace {

struct RocmSmi {
  decltype(&rsmi_init) init = nullptr;
  decltype(&rsmi_shut_down) shut_down = nullptr;
  decltype(&rsmi_num_monitor_devices) count = nullptr;
  decltype(&rsmi_dev_pci_id_get) pci_id = nullptr;
  decltype(&rsmi_dev_name_get) name = nullptr;
  decltype(&rsmi_dev_unique_id_get) unique_id = nullptr;
  decltype(&rsmi_dev_memory_total_get) memory_total = nullptr;
  decltype(&rsmi_dev_memory_usage_get) memory_usage = nullptr;
  decltype(&rsmi_compute_process_info_get) processes = nullptr;
  decltype(&rsmi_compute_process_gpus_get) process_gpus = nullptr;
  decltype(&rsmi_compute_process_info_by_pid_get) process_by_pid = nullptr;
};

// Where the library looks for the GPUs (its KFD topology), under the sysfs it reads.
constexpr char kKfdTopology[] = "/class/kfd/kfd/topology/nodes";
// Where it lists the processes using the GPUs (kernels since 5.x; without it the list fails).
constexpr char kKfdProcesses[] = "/class/kfd/kfd/proc";
// The sonames tried, in order, when the prober is given the registry's default.
constexpr const char* kReleaseSonames[] = {"librocm_smi64.so.7", "librocm_smi64.so.6"};
// At most this many processes are read (a list that keeps growing past it is not read).
constexpr uint32_t kMaxProcesses = 4096;

std::string RsmiStatusName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {RSMI_STATUS_SUCCESS, "RSMI_STATUS_SUCCESS"},
      {RSMI_STATUS_INVALID_ARGS, "RSMI_STATUS_INVALID_ARGS"},
      {RSMI_STATUS_NOT_SUPPORTED, "RSMI_STATUS_NOT_SUPPORTED"},
      {RSMI_STATUS_FILE_ERROR, "RSMI_STATUS_FILE_ERROR"},
      {RSMI_STATUS_PERMISSION, "RSMI_STATUS_PERMISSION"},
      {RSMI_STATUS_OUT_OF_RESOURCES, "RSMI_STATUS_OUT_OF_RESOURCES"},
      {RSMI_STATUS_INTERNAL_EXCEPTION, "RSMI_STATUS_INTERNAL_EXCEPTION"},
      {RSMI_STATUS_INPUT_OUT_OF_BOUNDS, "RSMI_STATUS_INPUT_OUT_OF_BOUNDS"},
      {RSMI_STATUS_INIT_ERROR, "RSMI_STATUS_INIT_ERROR"},
      {RSMI_STATUS_NOT_YET_IMPLEMENTED, "RSMI_STATUS_NOT_YET_IMPLEMENTED"},
      {RSMI_STATUS_NOT_FOUND, "RSMI_STATUS_NOT_FOUND"},
      {RSMI_STATUS_INSUFFICIENT_SIZE, "RSMI_STATUS_INSUFFICIENT_SIZE"},
      {RSMI_STATUS_INTERRUPT, "RSMI_STATUS_INTERRUPT"},
      {RSMI_STATUS_UNEXPECTED_SIZE, "RSMI_STATUS_UNEXPECTED_SIZE"},
      {RSMI_STATUS_NO_DATA, "RSMI_STATUS_NO_DATA"},
      {RSMI_STATUS_UNEXPECTED_DATA, "RSMI_STATUS_UNEXPECTED_DATA"},
      {RSMI_STATUS_BUSY, "RSMI_STATUS_BUSY"},
      {RSMI_STATUS_REFCOUNT_OVERFLOW, "RSMI_STATUS_REFCOUNT_OVERFLOW"},
      {RSMI_STATUS_UNKNOWN_ERROR, "RSMI_STATUS_UNKNOWN_ERROR"},
  };
  return NamedCode(kNames, "ROCm SMI", code);
}

CallResult ClassifyRsmi(int code) {
  switch (code) {
    case RSMI_STATUS_SUCCESS: return CallResult::kOk;
    case RSMI_STATUS_NOT_SUPPORTED:
    case RSMI_STATUS_NOT_YET_IMPLEMENTED:
    case RSMI_STATUS_NO_DATA: return CallResult::kNotSupported;
    case RSMI_STATUS_PERMISSION: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kRsmiErrors = {"ROCm SMI", RsmiStatusName, ClassifyRsmi};
constexpr LibraryInfo kRsmiInfo = {"rocm_smi", "ROCm SMI", v1::ROW_CUDA_AMD, "AMD GPU"};

void ReadDevice(const RocmSmi& lib, uint32_t i, LibraryCalls& calls, LibraryDevice& dev) {
  char name[256] = {};
  if (lib.name != nullptr && calls.Device(dev, "rsmi_dev_name_get", [&] { return lib.name(i, name, sizeof name); })) {
    dev.name = BufferText(name, sizeof name);
  }
  uint64_t id = 0;
  if (lib.unique_id != nullptr && calls.Device(dev, "rsmi_dev_unique_id_get", [&] { return lib.unique_id(i, &id); }) &&
      id != 0) {
    dev.uuid = absl::StrFormat("GPU-%016x", id);
  }
  uint64_t total = 0, used = 0;
  if (lib.memory_total != nullptr &&
      calls.Device(dev, "rsmi_dev_memory_total_get", [&] { return lib.memory_total(i, RSMI_MEM_TYPE_VRAM, &total); })) {
    dev.memory_total_bytes = total;
    if (lib.memory_usage != nullptr &&
        calls.Device(dev, "rsmi_dev_memory_usage_get", [&] { return lib.memory_usage(i, RSMI_MEM_TYPE_VRAM, &used); })) {
      dev.memory_used_bytes = used;
    }
  }
}

// A list the library fills as rsmi_compute_process_info_get / rsmi_compute_process_gpus_get do:
// `fill(data, &count)` with null data gives the count. False (with a problem or note recorded)
// when it could not be read.
template <typename T, typename Fill>
bool ReadList(LibraryCalls& calls, const char* name, Fill fill, std::vector<T>& out) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    uint32_t count = 0;
    if (!calls.System(name, [&] { return fill(nullptr, &count); })) return false;
    out.assign(std::min(count + 8, kMaxProcesses), T{});
    if (count == 0) {
      out.clear();
      return true;
    }
    uint32_t written = static_cast<uint32_t>(out.size());
    calls.call().Enter(name);
    const int r = fill(out.data(), &written);
    if (r == RSMI_STATUS_INSUFFICIENT_SIZE && out.size() < kMaxProcesses) continue;  // it grew in between
    if (!calls.SystemResult(name, r)) return false;
    out.resize(std::min<size_t>(written, out.size()));
    return true;
  }
  calls.out().notes.push_back(absl::StrCat(name, " kept growing; processes not read"));
  return false;
}

// The compute processes of every device read (by the library's device index): the list, then each
// process's GPUs and its VRAM (the list itself carries no VRAM figure). A process using several
// GPUs has one VRAM figure for all of them: on each it is listed without a figure.
void ReadProcesses(const RocmSmi& lib, const std::string& sysfs, LibraryCalls& calls,
                   std::map<uint32_t, LibraryDevice*>& by_index) {
  if (lib.processes == nullptr || lib.process_gpus == nullptr || by_index.empty()) return;
  if (const std::string kfd_processes = sysfs + kKfdProcesses; access(kfd_processes.c_str(), F_OK) != 0) {
    calls.out().notes.push_back(absl::StrCat("processes not read: no ", kfd_processes,
                                             " (a kernel without KFD process accounting)"));
    return;
  }
  std::vector<rsmi_process_info_t> processes;
  if (!ReadList(calls, "rsmi_compute_process_info_get",
                [&](rsmi_process_info_t* p, uint32_t* n) { return lib.processes(p, n); }, processes)) {
    return;
  }
  for (auto& [index, dev] : by_index) dev->processes.emplace();
  for (const rsmi_process_info_t& process : processes) {
    std::vector<uint32_t> gpus;
    if (!ReadList(calls, "rsmi_compute_process_gpus_get",
                  [&](uint32_t* g, uint32_t* n) {
                    const int r = lib.process_gpus(process.process_id, g, n);
                    if (r != RSMI_STATUS_NOT_FOUND) return r;
                    *n = 0;  // it ended in between
                    return static_cast<int>(RSMI_STATUS_SUCCESS);
                  },
                  gpus)) {
      continue;
    }
    if (gpus.empty()) continue;
    uint64_t vram = kUnknownProcessBytes;
    if (lib.process_by_pid != nullptr && gpus.size() == 1) {
      rsmi_process_info_t info = {};
      calls.call().Enter("rsmi_compute_process_info_by_pid_get");
      const int r = lib.process_by_pid(process.process_id, &info);
      if (r == RSMI_STATUS_SUCCESS) {
        vram = info.vram_usage;
      } else if (r != RSMI_STATUS_NOT_FOUND) {  // NOT_FOUND: it ended in between
        calls.SystemResult("rsmi_compute_process_info_by_pid_get", r);
      }
    }
    for (uint32_t gpu : gpus) {
      const auto it = by_index.find(gpu);
      if (it != by_index.end()) it->second->processes->emplace_back(process.process_id, vram);
    }
  }
}

// Opens `path`; with the registry's default soname, the ROCm release sonames after it.
bool Open(const std::string& path, LoadedLibrary& loaded, LibrarySnapshot& out) {
  if (loaded.Open(path, out)) return true;
  if (!out.skipped || path != RegisteredVendorLibrary("rocm_smi").default_library) return false;
  const std::string first = *out.unusable;
  for (const char* soname : kReleaseSonames) {
    if (loaded.Open(soname, out)) {
      out.unusable.reset();
      out.skipped = false;
      return true;
    }
    if (!out.skipped) return false;  // found, but cannot be loaded: say so
  }
  out.unusable = absl::StrCat(first, "; nor ", kReleaseSonames[0], " or ", kReleaseSonames[1]);
  return false;
}

// One ROCm SMI session; `sysfs`: the sysfs the library reads (ProbeOptions::library_sysfs).
LibrarySnapshot ReadRocmSmi(const std::string& path, const std::string& sysfs, VendorCall& call) {
  LibrarySnapshot out;
  if (access((sysfs + kKfdTopology).c_str(), F_OK) != 0) {
    out.skipped = true;
    out.unusable = absl::StrCat("amdgpu driver not loaded (no ", sysfs, kKfdTopology, " in this process's /sys)");
    return out;
  }
  LoadedLibrary loaded;
  RocmSmi lib;
  call.Enter("dlopen");
  if (!Open(path, loaded, out)) return out;
  loaded.Required("rsmi_init", lib.init);
  loaded.Required("rsmi_shut_down", lib.shut_down);
  loaded.Required("rsmi_num_monitor_devices", lib.count);
  loaded.Required("rsmi_dev_pci_id_get", lib.pci_id);
  loaded.Optional("rsmi_dev_name_get", lib.name);
  loaded.Optional("rsmi_dev_unique_id_get", lib.unique_id);
  loaded.Optional("rsmi_dev_memory_total_get", lib.memory_total);
  loaded.Optional("rsmi_dev_memory_usage_get", lib.memory_usage);
  loaded.Optional("rsmi_compute_process_info_get", lib.processes);
  loaded.Optional("rsmi_compute_process_gpus_get", lib.process_gpus);
  loaded.Optional("rsmi_compute_process_info_by_pid_get", lib.process_by_pid);
  if (!loaded.CheckSymbols(path, "ROCm SMI", out)) return out;

  call.Enter("rsmi_init");
  if (const int init = lib.init(0); init != RSMI_STATUS_SUCCESS) {
    out.unusable = absl::StrCat("rsmi_init: ", RsmiStatusName(init));
    loaded.Close(call);
    return out;
  }
  LibraryCalls calls(kRsmiErrors, call, out);
  uint32_t count = 0;
  if (!calls.System("rsmi_num_monitor_devices", [&] { return lib.count(&count); })) count = 0;
  out.count = count;
  for (uint32_t i = 0; i < count; ++i) {
    LibraryDevice dev;
    dev.index = static_cast<int>(i);
    uint64_t bdf = 0;
    if (!calls.Device(dev, "rsmi_dev_pci_id_get", [&] { return lib.pci_id(i, &bdf); })) {
      if (!dev.no_permission.empty()) out.notes.push_back(absl::StrCat("ROCm SMI device ", i, ": ", dev.no_permission));
      continue;
    }
    dev.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", (bdf >> 32) & 0xffffffff, (bdf >> 8) & 0xff, (bdf >> 3) & 0x1f,
                                 bdf & 0x7);
    ReadDevice(lib, i, calls, dev);
    AddLibraryDevice(std::move(dev), "ROCm SMI", out);
  }
  std::map<uint32_t, LibraryDevice*> by_index;
  for (LibraryDevice& dev : out.devices) by_index[static_cast<uint32_t>(dev.index)] = &dev;
  ReadProcesses(lib, sysfs, calls, by_index);
  call.Enter("rsmi_shut_down");
  if (const int r = lib.shut_down(); r != RSMI_STATUS_SUCCESS) {
    out.problems.push_back(absl::StrCat("rsmi_shut_down: ", RsmiStatusName(r)));
  }
  loaded.Close(call);
  return out;
}

}  // namespace

VendorProber prober_factory::rocm_smi(std::string library, const ProbeOptions& options) {
  return LibraryProber(kRsmiInfo, std::move(library),
                       [sysfs = options.library_sysfs](const std::string& path, const std::vector<std::string>&,
                                                       VendorCall& call) { return ReadRocmSmi(path, sysfs, call); });
}

}  // namespace devplace::probe
