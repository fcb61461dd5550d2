// devplace-probe: probes this host's accelerators and CPU once and writes one devplace.v1
// Inventory to stdout. devplaced runs it as a child process with a deadline, so probe code never
// runs inside the daemon.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/json.h"
#include "server/common/version.h"
#include "server/probe/build_inventory.h"
#include "server/probe/vendor_libs/cuda_prober.h"
#include "server/probe/vendor_libs/amdsmi_prober.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/host/host_root.h"
#include "server/probe/vendor_libs/level_zero_prober.h"
#include "server/probe/vendor_libs/nvml_prober.h"
#include "server/probe/probers.h"

ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev (e.g. /host when the host's trees "
          "are mounted there in a container, or a fixture tree in tests)");
ABSL_FLAG(std::string, nvml_library, std::string(devplace::probe::kDefaultNvmlLibrary),
          "NVML library to dlopen for GPU names, UUIDs, memory and MIG instances (a soname searched "
          "as dlopen does, or a path); empty: do not use NVML. Not found: the nvml prober is "
          "reported skipped");
ABSL_FLAG(std::string, cuda_library, std::string(devplace::probe::kDefaultCudaLibrary),
          "CUDA driver library (libcuda) to dlopen, in two short-lived child processes, for the order in which "
          "the CUDA runtime numbers the NVIDIA GPUs (CUDA_DEVICE_ORDER unset and PCI_BUS_ID), recorded as "
          "Device.runtime_ordinal / runtime_ordinal_pci; empty: do not use libcuda. Not found: the cuda prober "
          "is reported skipped");
ABSL_FLAG(std::string, amd_smi_library, std::string(devplace::probe::kDefaultAmdSmiLibrary),
          "AMD SMI library to dlopen for AMD GPU names, UUIDs, VRAM total/used, compute and memory "
          "partition modes and the driver version (a soname or a path); empty: do not use AMD SMI. "
          "Not found: the amd_smi prober is reported skipped");
ABSL_FLAG(std::string, level_zero_library, std::string(devplace::probe::kDefaultLevelZeroLibrary),
          "Level Zero loader to dlopen for Intel GPU names, UUIDs, memory per module, tiles and health "
          "through Sysman (a soname or a path); empty: do not use Level Zero. Not found: the level_zero "
          "prober is reported skipped");
ABSL_FLAG(std::string, hlml_library, std::string(devplace::probe::kDefaultHlmlLibrary),
          "HLML library (Intel Gaudi) to dlopen for device names, UUIDs, serials, module ids, memory and "
          "health (a soname or a path); empty: do not use HLML. Loaded only when the PCI scan found a Gaudi; "
          "not found: the hlml prober is reported skipped");
ABSL_FLAG(std::string, dcmi_library, std::string(devplace::probe::kDefaultDcmiLibrary),
          "DCMI library (Huawei Ascend) to dlopen for card/chip, logic and physical ids, names, HBM memory "
          "and health; empty: do not use DCMI. Loaded only when the PCI scan found an Ascend NPU; not "
          "found: the dcmi prober is reported skipped");
ABSL_FLAG(std::string, cndev_library, std::string(devplace::probe::kDefaultCndevLibrary),
          "CNDev library (Cambricon) to dlopen for MLU names, UUIDs, memory and health; empty: do not use "
          "CNDev. Loaded only when the PCI scan found an MLU; not found: the cndev prober is reported skipped");
ABSL_FLAG(std::string, mtml_library, std::string(devplace::probe::kDefaultMtmlLibrary),
          "MTML library (Moore Threads) to dlopen for GPU names, UUIDs and memory; empty: do not use MTML. "
          "Loaded only when the PCI scan found a Moore Threads GPU; not found: the mtml prober is reported "
          "skipped");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(5),
          "This probe's own deadline, for the whole probe: the sysfs/procfs probers first, then the vendor-library "
          "probers (NVML, libcuda, AMD SMI, Level Zero, HLML, DCMI, CNDev, MTML), which run at once, each in its own "
          "child process, with what is left: one that has not finished by then is killed and reported "
          "PROBE_STATUS_TIMED_OUT, naming the call that did not return; one whose process dies of a "
          "signal is reported PROBE_STATUS_CRASHED; the rest of the inventory is still written. A host read "
          "that never returns (a driver's sysfs file) ends the probe 1s past the deadline with exit status 3. "
          "Keep it below devplaced's --probe_timeout (default 10s), which kills the whole probe and is only "
          "the safety net");
ABSL_FLAG(bool, json, false,
          "Print the inventory as pretty JSON (the protobuf JSON mapping) for people, instead of "
          "the serialized devplace.v1.Inventory bytes");

namespace {

constexpr char kUsage[] =
    "Probes this host's accelerators, CPU and memory once and writes one devplace.v1.Inventory "
    "to stdout.\n\n"
    "Usage: devplace-probe [--host_root=DIR] [--nvml_library=PATH] [--cuda_library=PATH] [--amd_smi_library=PATH]\n"
    "       [--level_zero_library=PATH] [--hlml_library=PATH] [--dcmi_library=PATH]\n"
    "       [--cndev_library=PATH] [--mtml_library=PATH] [--probe_timeout=5s] [--json]\n\n"
    "Output: the serialized protobuf message (binary; what devplaced reads) by default, or the "
    "protobuf JSON mapping with --json.\n"
    "Exit status: 0 when an inventory was written (probers that failed or timed out are reported in its "
    "probe_reports), 2 on bad flags or an unreadable --host_root, 1 when writing failed, 3 when a read "
    "never returned and the probe overran --probe_timeout (nothing written).\n"
    "Files that are not regular files (a FIFO, a device node) are never opened; the sysfs/procfs probers run "
    "under an address-space cap (512 MiB above the process's size).";

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "devplace-probe: %s\n", message.c_str());
  return code;
}

// What is wrong with the command line, or "" when absl::ParseCommandLine will accept it (it
// exits with status 1 on a bad flag; this binary documents 2).
std::string CommandLineError(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      return i + 1 < argc ? absl::StrCat("unexpected argument \"", argv[i + 1], "\" (see --help)") : "";
    }
    if (!absl::ConsumePrefix(&arg, "-")) return absl::StrCat("unexpected argument \"", arg, "\" (see --help)");
    absl::ConsumePrefix(&arg, "-");
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    // absl's usage flags are not in the flag registry; ParseCommandLine handles them.
    for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                    "helpmatch", "version", "only_check_args"}) {
      if (name == usage) name = "";
    }
    if (name.empty()) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {  // --nojson
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && (!flag->IsOfType<bool>() || has_value)) flag = nullptr;
      if (flag != nullptr) continue;
    }
    if (flag == nullptr) return absl::StrCat("unknown flag --", name, " (see --help)");
    if (flag->IsOfType<bool>()) {
      bool value = false;
      std::string error;
      if (has_value && !absl::ParseFlag(arg.substr(eq + 1), &value, &error)) {
        return absl::StrCat("--", name, ": bad value \"", arg.substr(eq + 1), "\" (want true or false)",
                            error.empty() ? "" : ": ", error);
      }
      continue;
    }
    if (!has_value && ++i >= argc) return absl::StrCat("--", name, " needs a value");
    const absl::string_view value = has_value ? arg.substr(eq + 1) : absl::string_view(argv[i]);
    absl::Duration duration;
    std::string error;
    if (flag->IsOfType<absl::Duration>() &&
        (!absl::ParseFlag(value, &duration, &error) || duration <= absl::ZeroDuration())) {
      return absl::StrCat("--", name, ": bad value \"", value, "\" (want a positive duration such as 5s or 500ms)");
    }
  }
  return "";
}

bool WriteAll(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(STDOUT_FILENO, bytes.data() + done, bytes.size() - done);
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Stamps `inventory` with the time and writes it to stdout; the exit status.
int Write(devplace::v1::Inventory inventory) {
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  inventory.mutable_probed_at()->set_seconds(now_ns / 1000000000);
  inventory.mutable_probed_at()->set_nanos(static_cast<int32_t>(now_ns % 1000000000));

  std::string out;
  if (absl::GetFlag(FLAGS_json)) {
    absl::StatusOr<std::string> json = devplace::ToJson(inventory);
    if (!json.ok()) return Fail(1, std::string(json.status().message()));
    out = *json + "\n";
  } else if (!inventory.SerializeToString(&out)) {
    return Fail(1, "cannot serialize the inventory");
  }
  if (!WriteAll(out)) return Fail(1, "cannot write to stdout");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/probe/main.cc");
  };
  config.version_string = [] { return absl::StrCat("devplace-probe ", devplace::kVersion, "\n"); };
  absl::SetFlagsUsageConfig(config);
  if (const std::string error = CommandLineError(argc, argv); !error.empty()) return Fail(2, error);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return Fail(2, absl::StrCat("unexpected argument \"", positional[1], "\" (see --help)"));
  }

  absl::StatusOr<devplace::probe::HostRoot> root = devplace::probe::HostRoot::Open(absl::GetFlag(FLAGS_host_root));
  if (!root.ok()) return Fail(2, absl::StrCat("--host_root: ", root.status().message()));

  devplace::probe::ProbeOptions options;
  options.nvml_library = absl::GetFlag(FLAGS_nvml_library);
  options.cuda_library = absl::GetFlag(FLAGS_cuda_library);
  options.amd_smi_library = absl::GetFlag(FLAGS_amd_smi_library);
  options.level_zero_library = absl::GetFlag(FLAGS_level_zero_library);
  options.hlml_library = absl::GetFlag(FLAGS_hlml_library);
  options.dcmi_library = absl::GetFlag(FLAGS_dcmi_library);
  options.cndev_library = absl::GetFlag(FLAGS_cndev_library);
  options.mtml_library = absl::GetFlag(FLAGS_mtml_library);
  options.vendor_timeout = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_probe_timeout));
  devplace::probe::ExitWhenOverdue(options.vendor_timeout, "devplace-probe");
  const devplace::probe::ProbeRun run = devplace::probe::RunProbers(*root, options);
  const int status = Write(devplace::probe::BuildInventory(run));
  return status;
}
