// `devplace probe`: runs devplace's probers in this process (no daemon) and prints the inventory
// they build, as devplace-probe would.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/cli.h"
#include "client/cli/output.h"
#include "server/common/vendor_libraries.h"
#include "server/probe/build_inventory.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probe_flags.h"
#include "server/probe/probers.h"

ABSL_FLAG(std::string, host_root, "/",
          "Directory holding the host's /sys, /proc and /dev (e.g. /host in a container, or a fixture tree)");
ABSL_FLAG(absl::Duration, probe_timeout, absl::Seconds(5),
          "Deadline of the whole probe: the sysfs/procfs probers, then the vendor-library probers (one per "
          "--<name>_library flag), each in its own process, with what is left; one that overruns is "
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
  const probe::ProbeOptions options = probe::ProbeOptionsFromFlags(absl::GetFlag(FLAGS_probe_timeout));
  probe::ExitWhenOverdue(options.vendor_timeout, "devplace probe");
  const probe::ProbeRun run = probe::RunProbers(*root, options);
  v1::Inventory inv = probe::BuildInventory(run);
  StampNow(inv);
  return PrintInventory(inv);
}

// --host_root, every registered vendor library's flag (server/common/vendor_libraries.h) and
// --probe_timeout, in help order.
std::vector<const char*> ProbeFlags() {
  std::vector<const char*> flags = {"host_root"};
  for (const VendorLibrary& library : kVendorLibraries) flags.push_back(library.flag);
  flags.push_back("probe_timeout");
  return flags;
}

}  // namespace

Command ProbeCommand() {
  return {"probe", "Probe this host in-process (no daemon) and print its inventory.",
          "devplace probe [--host_root=DIR]",
          "Runs devplace's probers in this process against --host_root (the vendor management libraries\n"
          "through their --<name>_library flags below, each in its own child process) and prints the inventory\n"
          "it builds (the same content devplace-probe writes). --probe_timeout bounds the whole probe: a read\n"
          "that never returns ends it 1s past the deadline with exit status 3. FIFOs and device nodes are\n"
          "never opened. Save it with --json for `resolve --inventory`.",
          ProbeFlags(), &RunProbe};
}

}  // namespace devplace::cli
