// Which device type names a job's PyTorch can parse (docs/SEMANTICS.md section 7, rule G-PLUGIN).
// c10 parses a fixed list of names (pytorch/pytorch:c10/core/Device.cpp `parse_type`); a device
// plug-in adds one more by renaming the PrivateUse1 backend when its module is imported
// (torch_npu -> "npu", ...). Until then `torch.device("npu")` raises RuntimeError ("Expected one of
// cpu, cuda, ... device type at start of device string: npu"). Whether the plug-in is there comes
// from the request: runtime_backends given, else the job's packages (job_environment).
#ifndef DEVPLACE_SERVER_PLACEMENT_TORCH_DEVICE_TYPES_H_
#define DEVPLACE_SERVER_PLACEMENT_TORCH_DEVICE_TYPES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/placement/job_environment.h"
#include "server/placement/versions.h"

namespace devplace::placement {

// One placement device type (PlacementDeviceTypeList()) and who makes torch parse it.
struct TorchDeviceType {
  absl::string_view type;  // "npu"
  // The distribution whose import registers the name ("torch-npu"); empty when c10 lists it.
  absl::string_view plugin;
  // For a name c10 lists: the first torch release whose parse_type has it.
  Version since_torch;
};

// Every placement device type, c10's own first.
const std::vector<TorchDeviceType>& TorchDeviceTypes();
// The entry for `type`, or null when it is not a placement type.
const TorchDeviceType* FindTorchDeviceType(absl::string_view type);

// A package's release as its metadata Version gives it, MAJOR.MINOR only ("2.5.1+cu124" -> 2.5.0,
// "2.5.10+xpu" -> 2.5.0); nullopt when the text does not start with MAJOR.MINOR. Used for torch (G-PLUGIN)
// and Intel Extension for PyTorch (V-ACC-XPU-MEM rows), whose releases the rules compare by line.
std::optional<Version> PackageMajorMinor(absl::string_view text);

// What the request says about the job's torch build.
struct JobTorch {
  // ResolveDeviceRequest.runtime_backends as given (empty = not given).
  std::vector<std::string> runtime_given;
  // The request's job_environment, read (null = none sent).
  const JobPython* job = nullptr;
};

// Whether the job's torch parses a device type, as far as the request tells.
struct TorchParse {
  enum Verdict { kParses, kFails, kNotTold };
  Verdict verdict = kNotTold;
  // kFails: why, naming the package and where devplace learnt it ("only the torch-npu plug-in
  // registers it (import torch_npu), and runtime_backends given in the request (cuda, cpu) has no
  // npu"); kParses / kNotTold for a plug-in type: who registers it ("npu exists in torch only once
  // the torch-npu plug-in is imported (import torch_npu)"); empty for c10's own names.
  std::string why;
  // kFails: the fix ("install torch-npu", "install torch >= 1.12").
  std::string fix;
};

// kNotTold when runtime_backends is empty and job_environment has no torch (a c10 name is kParses
// then); a type that is not a placement type is kParses (the grammar refuses it before this).
TorchParse CanTorchParse(absl::string_view type, const JobTorch& torch);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_TORCH_DEVICE_TYPES_H_
