// The job's own Python environment as a client read it from package metadata
// (ResolveDeviceRequest.job_environment): the torch build and device plug-ins it has, which give
// the runtime backends (rule V-JOB-BUILD), and the Transformers / Accelerate releases, which give
// the versions to emulate (V-JOB-VERSION). docs/SEMANTICS.md section 10.
#ifndef DEVPLACE_SERVER_PLACEMENT_JOB_ENVIRONMENT_H_
#define DEVPLACE_SERVER_PLACEMENT_JOB_ENVIRONMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::placement {

// A distribution name as PEP 503 compares them: lower case, each run of '-', '_', '.' one '-'
// ("torch_npu" -> "torch-npu", "Intel_Extension_For_PyTorch" -> "intel-extension-for-pytorch").
std::string NormalizePackageName(absl::string_view name);

// torch's device plug-in distributions (normalised) and the runtime backend each adds.
struct PluginPackage {
  absl::string_view name;     // "torch-npu"
  absl::string_view backend;  // "npu" (a ResolveDeviceRequest.runtime_backends token)
};
const std::vector<PluginPackage>& PluginPackages();

// What the request's job_environment says, checked and interpreted.
struct JobPython {
  std::string source;  // where the client read it (for explanations)
  // Version strings as the metadata gives them; nullopt = not installed there.
  std::optional<std::string> torch, transformers, accelerate;
  // Intel Extension for PyTorch (intel-extension-for-pytorch), the only way releases before
  // V-ACC-XPU-STOCK / V-TF-XPU-STOCK see an Intel GPU; nullopt = not installed there.
  std::optional<std::string> ipex;
  // torch_xla (torch-xla), whose release decides whether a host without a TPU has an XLA device
  // (T-XLA-PJRT); nullopt = not installed there.
  std::optional<std::string> torch_xla;
  // The plug-ins present, as "torch-npu 2.1.0".
  std::vector<std::string> plugins;
  // The runtime backends torch's build and the plug-ins give (V-JOB-BUILD); empty = not told
  // (no torch, or a torch without a local build tag and no plug-in).
  std::vector<std::string> backends;
  // One explanation line: how `backends` follows from the packages.
  std::string backends_reason;
  // What the client could not use of the environment (JobEnvironment.problems), each a warning.
  std::vector<std::string> problems;
};

// INVALID_ARGUMENT naming the field for a request whose job_environment exceeds its bounds (more
// than 64 packages, a name or version over 128 bytes, a source over 512 bytes, an empty name, a
// package listed twice, more than 64 problems or one over 1024 bytes).
absl::StatusOr<JobPython> ReadJobPython(const v1::JobEnvironment& env);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_JOB_ENVIRONMENT_H_
