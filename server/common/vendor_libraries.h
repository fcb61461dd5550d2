// The vendor-library registry: every vendor management library the probe may load through
// dlopen, one entry each. Everything that names the libraries one by one comes from this list:
// the --<name>_library flags of devplace-probe, `devplace probe` and devplaced
// (vendor_library_flags.h, defined once for the three), DaemonConfig's and ProbeOptions' paths
// (VendorLibraryPaths below), the probe child's arguments, the prober factories (expanded in
// server/probe/vendor_libs/vendor_prober.h: the daemon links no probe code, so only the data
// lives here), the commented defaults of deploy/devplaced.flags (written at build time) and the
// checks of docs/PROBE.md's vendor-library table (tests/probe/vendor_registry_test.cc).
//
// A new library is one line below, in the order its prober runs and reports (probe_reports);
// docs/ARCHITECTURE.md lists the other files it needs.
#ifndef DEVPLACE_SERVER_COMMON_VENDOR_LIBRARIES_H_
#define DEVPLACE_SERVER_COMMON_VENDOR_LIBRARIES_H_

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

// X(name, default library, memory_source, description):
//   name            ProbeReport.name of its prober; its flag is --<name>_library and its factory
//                   devplace::probe::prober_factory::<name> (vendor_prober.h)
//   default library the soname loaded when the flag is not given (dlopen searches for it)
//   memory_source   Device.attributes["memory_source"] its prober sets where it gave the memory
//                   figures; "" when it gives none
//   description     one line for --help and the flag file: the library, then what it adds
#define DEVPLACE_VENDOR_LIBRARIES(X)                                                                     \
  X(nvml, "libnvidia-ml.so.1", "nvml",                                                                   \
    "NVML (NVIDIA GPUs): names, UUIDs, memory, processes, compute mode and MIG instances")               \
  X(cuda, "libcuda.so.1", "",                                                                            \
    "libcuda (NVIDIA GPUs), read in two short-lived child processes: the CUDA runtime's GPU numbering "  \
    "under CUDA_DEVICE_ORDER unset and PCI_BUS_ID (unknown without it: answers on hosts with mixed GPU " \
    "models then warn that the order may differ)")                                                       \
  X(rocm_smi, "librocm_smi64.so.1", "rocm_smi",                                                          \
    "ROCm SMI (AMD GPUs; ROCm's librocm_smi64.so.7 or .so.6 when the default is not installed): names, "  \
    "unique ids, VRAM total/used and the compute processes of each GPU")                                 \
  X(amd_smi, "libamd_smi.so", "amd_smi",                                                                 \
    "AMD SMI (AMD GPUs): names, UUIDs, VRAM total/used, compute and memory partition modes, the "        \
    "driver version")                                                                                    \
  X(level_zero, "libze_loader.so.1", "level_zero",                                                       \
    "Level Zero loader (Intel GPUs, through Sysman): names, UUIDs, memory per module, processes, tiles " \
    "and health")                                                                                        \
  X(hlml, "libhlml.so", "hlml",                                                                          \
    "HLML (Intel Gaudi; loaded only when the PCI scan found a Gaudi): names, UUIDs, serials, module "    \
    "ids, memory and health")                                                                            \
  X(dcmi, "libdcmi.so", "dcmi",                                                                          \
    "DCMI (Huawei Ascend; loaded only when the PCI scan found an Ascend NPU): card/chip, logic and "     \
    "physical ids, names, HBM memory and health")                                                        \
  X(cndev, "libcndev.so", "cndev",                                                                       \
    "CNDev (Cambricon; loaded only when the PCI scan found an MLU): names, UUIDs, memory, processes "   \
    "and health")                                                                                        \
  X(mtml, "libmtml.so", "mtml",                                                                          \
    "MTML (Moore Threads; loaded only when the PCI scan found a Moore Threads GPU): names, UUIDs and "   \
    "memory")

namespace devplace {

// One registered library.
struct VendorLibrary {
  const char* name;             // "nvml": ProbeReport.name
  const char* flag;             // "nvml_library": the flag, without dashes
  const char* default_library;  // "libnvidia-ml.so.1"
  const char* memory_source;    // "nvml"; "" when its prober gives no memory figures
  const char* description;      // one line, for --help and the flag file
};

// Every registered library, in the order their probers run and report.
inline constexpr VendorLibrary kVendorLibraries[] = {
#define DEVPLACE_VENDOR_LIBRARY_ENTRY(name, library, memory_source, description) \
  {#name, #name "_library", library, memory_source, description},
    DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_VENDOR_LIBRARY_ENTRY)
#undef DEVPLACE_VENDOR_LIBRARY_ENTRY
};
inline constexpr size_t kVendorLibraryCount = sizeof(kVendorLibraries) / sizeof(kVendorLibraries[0]);

// The registered library called `name`. In a constant expression, a name that is not registered
// does not compile; at run time it throws std::out_of_range.
constexpr const VendorLibrary& RegisteredVendorLibrary(std::string_view name) {
  for (const VendorLibrary& library : kVendorLibraries) {
    if (name == library.name) return library;
  }
  throw std::out_of_range("not a registered vendor library");
}

// One path per registered library, as its --<name>_library flag gives it: a soname (found as
// dlopen finds it) or a path; empty: the library is not read. The fields are named after the
// flags (nvml_library, cuda_library, ...); a default-constructed one reads none.
struct VendorLibraryPaths {
#define DEVPLACE_VENDOR_LIBRARY_FIELD(name, ...) std::string name##_library;
  DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_VENDOR_LIBRARY_FIELD)
#undef DEVPLACE_VENDOR_LIBRARY_FIELD

  // Every library at its default (VendorLibrary::default_library): what the flags give unset.
  static VendorLibraryPaths Defaults();

  // The path of kVendorLibraries[index].
  std::string& operator[](size_t index);
  const std::string& operator[](size_t index) const;
};

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_VENDOR_LIBRARIES_H_
