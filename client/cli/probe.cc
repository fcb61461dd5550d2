// `devplace probe`: runs devplace's probers in this process (no daemon) and prints the inventory
// they build, as devplace-probe would.
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/output.h"
#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"

ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev (e.g. /host in a container, or a fixture tree)");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library to dlopen for GPU names, UUIDs, memory and MIG instances (empty: do not read NVML)");
ABSL_FLAG(std::string, cuda_library, "libcuda.so.1",
          "probe: libcuda to dlopen (in two child processes) for the CUDA runtime's GPU numbering under "
          "CUDA_DEVICE_ORDER unset and PCI_BUS_ID (empty: none)");
ABSL_FLAG(std::string, amd_smi_library, "libamd_smi.so",
          "AMD SMI library to dlopen for AMD GPU names, UUIDs, VRAM and partition modes (empty: do not read AMD SMI)");
ABSL_FLAG(std::string, level_zero_library, "libze_loader.so.1",
          "Level Zero loader to dlopen for Intel GPU names, UUIDs, memory and tiles (empty: do not read Level Zero)");
ABSL_FLAG(std::string, hlml_library, "libhlml.so",
          "HLML library (Intel Gaudi) to dlopen for names, UUIDs, memory and health (empty: do not read HLML)");
ABSL_FLAG(std::string, dcmi_library, "libdcmi.so",
          "DCMI library (Huawei Ascend) to dlopen for ids, names, HBM memory and health (empty: do not read DCMI)");
ABSL_FLAG(std::string, cndev_library, "libcndev.so",
          "CNDev library (Cambricon) to dlopen for names, UUIDs, memory and health (empty: do not read CNDev)");
ABSL_FLAG(std::string, mtml_library, "libmtml.so",
          "MTML library (Moore Threads) to dlopen for names, UUIDs and memory (empty: do not read MTML)");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(5),
          "Deadline of the whole probe: the sysfs/procfs probers, then the vendor-library probers (NVML, libcuda, AMD "
          "SMI, Level Zero, HLML, DCMI, CNDev, MTML), each in its own process, with what is left; one that overruns is "
          "reported as timed out, one that crashes as crashed; a host read that never returns ends the command 1s "
          "past the deadline with exit status 3");

namespace devplace::cli {
namespace {

// Stamps probed_at with now.
void StampNow(v1::Inventory& inv) {
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  inv.mutable_probed_at()->set_seconds(now_ns / 1000000000);
  inv.mutable_probed_at()->set_nanos(static_cast<int32_t>(now_ns % 1000000000));
}

int RunProbe() {
  absl::StatusOr<probe::HostRoot> root = probe::HostRoot::Open(absl::GetFlag(FLAGS_host_root));
  if (!root.ok()) return UsageError(g_command, absl::StrCat("--host_root: ", root.status().message()));
  if (absl::GetFlag(FLAGS_probe_timeout) <= absl::ZeroDuration()) {
    return UsageError(g_command, "--probe_timeout must be positive, e.g. 5s");
  }
  probe::ProbeOptions options;
  options.nvml_library = absl::GetFlag(FLAGS_nvml_library);
  options.cuda_library = absl::GetFlag(FLAGS_cuda_library);
  options.amd_smi_library = absl::GetFlag(FLAGS_amd_smi_library);
  options.level_zero_library = absl::GetFlag(FLAGS_level_zero_library);
  options.hlml_library = absl::GetFlag(FLAGS_hlml_library);
  options.dcmi_library = absl::GetFlag(FLAGS_dcmi_library);
  options.cndev_library = absl::GetFlag(FLAGS_cndev_library);
  options.mtml_library = absl::GetFlag(FLAGS_mtml_library);
  options.vendor_timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_probe_timeout)));
  probe::ExitWhenOverdue(options.vendor_timeout, "devplace probe");
  const probe::ProbeRun run = probe::RunProbers(*root, options);
  v1::Inventory inv = probe::BuildInventory(run);
  StampNow(inv);
  return PrintInventory(inv);
}

}  // namespace

Command ProbeCommand() {
  return {"probe", "Probe this host in-process (no daemon) and print its inventory.",
          "devplace probe [--host_root=DIR]",
          "Runs devplace's probers in this process against --host_root (NVML through --nvml_library, libcuda's\n"
          "GPU numbering through --cuda_library, AMD SMI, Level Zero, HLML, DCMI, CNDev and MTML through\n"
          "--amd_smi_library, --level_zero_library, --hlml_library, --dcmi_library, --cndev_library,\n"
          "--mtml_library, each in its own child process) and prints the inventory it builds (the same content\n"
          "devplace-probe writes). --probe_timeout bounds the whole probe: a read that never returns ends it\n"
          "1s past the deadline with exit status 3. FIFOs and device nodes are never opened.\n"
          "Save it with --json for `resolve --inventory`.",
          {"host_root", "nvml_library", "cuda_library", "amd_smi_library", "level_zero_library", "hlml_library",
           "dcmi_library", "cndev_library", "mtml_library", "probe_timeout"},
          &RunProbe};
}

}  // namespace devplace::cli
