#include "server/probe/probers.h"

#include <utility>
#include <vector>

#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/amdsmi_prober.h"
#include "server/probe/vendor_libs/cuda_prober.h"
#include "server/probe/vendor_libs/level_zero_prober.h"
#include "server/probe/vendor_libs/nvml_prober.h"

namespace devplace::probe {

ProbeRun RunProbers(const HostRoot& root, const ProbeOptions& options) {
  ProbeRun run = RunProbers(root);
  std::vector<VendorProber> vendor;
  if (!options.nvml_library.empty()) vendor.push_back(NvmlProber(options.nvml_library));
  if (!options.cuda_library.empty()) vendor.push_back(CudaProber(options.cuda_library, options.vendor_timeout));
  if (!options.amd_smi_library.empty()) vendor.push_back(AmdSmiProber(options.amd_smi_library));
  if (!options.level_zero_library.empty()) vendor.push_back(LevelZeroProber(options.level_zero_library));
  for (VendorProber& prober : AcceleratorLibraryProbers(options)) vendor.push_back(std::move(prober));
  RunVendorProbers(vendor, options.vendor_timeout, run);
  return run;
}

}  // namespace devplace::probe
