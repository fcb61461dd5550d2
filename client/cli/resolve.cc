// `devplace resolve`: which device a job should use, asked of the daemon or, with --inventory=FILE,
// of the resolver in-process. stdout holds only the device string; warnings and --explain go to
// stderr.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli.h"
#include "client/cli/connect_flags.h"
#include "client/cli/output.h"
#include "client/cli/request_flags.h"
#include "devplace/client.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"

ABSL_FLAG(bool, explain, false,
          "Also print the explanation steps (rule ids), warnings, devices and max_memory, to stderr "
          "(stdout keeps only the device string)");
ABSL_FLAG(bool, quiet, false,
          "Do not print the answer's warnings (by default each goes to stderr as `devplace: warning: ...`; "
          "stdout keeps only the device string)");

namespace devplace::cli {
namespace {

// The --explain block (on stderr).
void PrintExplanation(const v1::ResolveDeviceResponse& r) {
  std::string out = absl::StrCat("device:     ", r.device(), "\n", "backend:    ", placement::RowName(r.backend()),
                                 " (package ", r.package(), ")\n");
  if (!r.devices().empty()) absl::StrAppend(&out, "devices:    ", absl::StrJoin(r.devices(), ", "), "\n");
  if (!r.transformers_version().empty()) {
    absl::StrAppend(&out, "versions:   Transformers ", r.transformers_version(), ", Accelerate ", r.accelerate_version(),
                    " (rules emulated; the V steps below say why)\n");
    // V-SKEW: the job's release is newer than the daemon's rules.
    std::vector<std::string> newer;
    if (r.transformers_newer_than_rules()) {
      newer.push_back(absl::StrCat("the job's Transformers ", r.transformers_job_version(), " (rules applied: ",
                                   r.transformers_version(), ")"));
    }
    if (r.accelerate_newer_than_rules()) {
      newer.push_back(absl::StrCat("the job's Accelerate ", r.accelerate_job_version(), " (rules applied: ",
                                   r.accelerate_version(), ")"));
    }
    if (!newer.empty()) {
      absl::StrAppend(&out, "newer:      ", absl::StrJoin(newer, ", "),
                      ": newer than devplace's rules know, see warnings (V-SKEW)\n");
    }
    auto from = [](v1::Provenance p) {
      return p == v1::PROVENANCE_UNSPECIFIED ? std::string("?")
                                             : absl::AsciiStrToLower(v1::Provenance_Name(p).substr(11));
    };
    if (r.runtime_backends_from() != v1::PROVENANCE_UNSPECIFIED) {
      absl::StrAppend(&out, "from:       transformers ", from(r.transformers_version_from()), ", accelerate ",
                      from(r.accelerate_version_from()), ", runtime backends ", from(r.runtime_backends_from()), " (",
                      r.runtime_backends().empty() ? "every present row's package assumed"
                                                   : absl::StrJoin(r.runtime_backends(), ", "),
                      ")\n");
    }
  }
  for (const v1::PlacedDevice& p : r.placed()) {
    absl::StrAppend(&out, "placed:     ", p.device(), " = host #", p.host_index(),
                    p.pci_bus_id().empty() ? "" : absl::StrCat(" ", p.pci_bus_id()),
                    p.name().empty() ? "" : absl::StrCat(" ", p.name()),
                    p.has_memory_total_bytes() ? absl::StrCat(" (", Bytes(p.memory_total_bytes()), ")") : "",
                    p.sub_device() >= 0 ? absl::StrCat(" sub-device ", p.sub_device()) : "",
                    p.partition_uuid().empty() ? "" : absl::StrCat(" partition ", p.partition_uuid()), "\n");
  }
  if (!r.max_memory().empty()) {
    std::vector<std::pair<std::string, uint64_t>> budgets(r.max_memory().begin(), r.max_memory().end());
    std::sort(budgets.begin(), budgets.end(), [](const auto& a, const auto& b) {
      // "0" < "1" < ... < "10" < "cpu"/"mps": numbers by value, then names.
      int x, y;
      const bool nx = absl::SimpleAtoi(a.first, &x), ny = absl::SimpleAtoi(b.first, &y);
      if (nx && ny) return x < y;
      if (nx != ny) return nx;
      return a.first < b.first;
    });
    std::vector<std::string> parts;
    for (const auto& [key, bytes] : budgets) parts.push_back(absl::StrCat(key, "=", Bytes(bytes)));
    absl::StrAppend(&out, "max_memory: ", absl::StrJoin(parts, ", "), "\n");
  }
  absl::StrAppend(&out, "inventory revision: ", r.inventory_revision(), " (epoch ", r.inventory_epoch(), ")\n");
  if (!r.explanation().empty()) absl::StrAppend(&out, "explanation:\n");
  for (int i = 0; i < r.explanation_size(); ++i) absl::StrAppend(&out, "  ", i + 1, ". ", r.explanation(i), "\n");
  if (!r.warnings().empty()) absl::StrAppend(&out, "warnings:\n");
  for (const std::string& w : r.warnings()) absl::StrAppend(&out, "  - ", w, "\n");
  std::fputs(out.c_str(), stderr);
}

int PrintResolved(const absl::StatusOr<v1::ResolveDeviceResponse>& response) {
  if (!response.ok()) {
    const int status = Fail(response.status());
    // INVALID_ARGUMENT: the request is malformed, so a value the flags (or the job's variables) gave
    // is bad, e.g. a mistyped --device_map keyword: a usage error, as a flag's bad value is.
    return response.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : status;
  }
  if (absl::GetFlag(FLAGS_json)) return PrintJson(*response);
  std::printf("%s\n", response->device().c_str());
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_explain)) {
    PrintExplanation(*response);  // its own warnings: section
  } else if (!absl::GetFlag(FLAGS_quiet)) {
    for (const std::string& w : response->warnings()) std::fprintf(stderr, "devplace: warning: %s\n", w.c_str());
  }
  return 0;
}

int RunResolve() {
  const std::string inventory_path = absl::GetFlag(FLAGS_inventory);
  absl::StatusOr<ResolveOptions> options = OptionsFromFlags(!inventory_path.empty());
  if (!options.ok()) return UsageError(g_command, options.status().message());
  if (inventory_path.empty()) {
    return WithClient([&](Client& client) { return PrintResolved(client.Resolve(*options)); });
  }
  return WithInventoryFile(inventory_path, [&](const v1::Inventory& inv) {
    return PrintResolved(placement::Resolve(inv, options->ToRequest()));
  });
}

// The request flags that describe the job, then resolve's own, then --fallback.
std::vector<const char*> ResolveFlags() {
  std::vector<const char*> flags = RequestFlagNames(RequestFlagUser::kResolve);
  flags.insert(flags.end(), {"explain", "quiet", "inventory", "fallback"});
  return flags;
}

}  // namespace

Command ResolveCommand() {
  return {"resolve", "Which device should this job use? Prints only the device string (e.g. cuda:0).",
          "devplace resolve --workload=training|inference [flags]",
          "Asks the daemon (or, with --inventory=FILE, the resolver in-process against a saved inventory)\n"
          "which device a PyTorch job should use, in the job's own numbering, following Transformers /\n"
          "Accelerate rules. stdout holds only the device string, so this works:\n"
          "  DEVICE=$(devplace resolve --workload=inference --device_map=auto)\n"
          "By default the job's placement variables (CUDA_VISIBLE_DEVICES, LOCAL_RANK, ...) come from this\n"
          "process's environment and its accelerator /dev nodes from this process's /dev; --env and the\n"
          "other flags override them. Up to 8 names that look like a misspelt placement variable\n"
          "(CUDA_VISIBLE_DEVICE, local_rank) are sent too, without their values, so the daemon can warn\n"
          "which variable was meant (rule E-TYPO). In a Kubernetes pod with DRA claims, the devices allocated\n"
          "to this container are read from its DRA device metadata (/var/run/kubernetes.io/dra-device-attributes,\n"
          "or --dra_metadata_dir) and are the job's devices (rule P-DRA).\n"
          "Warnings (a present accelerator the job cannot use, ...) go to stderr\n"
          "unless --quiet; --explain adds the reasoning on stderr; --json prints the whole\n"
          "ResolveDeviceResponse on stdout instead.",
          ResolveFlags(), &RunResolve};
}

}  // namespace devplace::cli
