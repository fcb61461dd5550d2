#include "server/placement/torch_device_types.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "server/placement/backends.h"
#include "server/placement/device_string.h"

namespace devplace::placement {
namespace {

// The placement types c10 itself parses (pytorch/pytorch:c10/core/Device.cpp parse_type; the list
// grew from cpu, cuda, xpu, ..., xla, hpu (with msnpu and mlc) to today's, which has mps after mlc
// went). Accelerate 0.25, the oldest release devplace emulates, needs torch >= 1.10, so only `mps`
// has a boundary inside the range: the MPS backend is first in torch 1.12.
std::vector<TorchDeviceType> MakeTypes() {
  std::vector<TorchDeviceType> types = {
      {"cpu", "", {1, 10, 0}}, {"cuda", "", {1, 10, 0}}, {"xpu", "", {1, 10, 0}},
      {"xla", "", {1, 10, 0}}, {"hpu", "", {1, 10, 0}},  {"mps", "", {1, 12, 0}},
  };
  // Every other placement type is a PrivateUse1 name its plug-in registers.
  for (absl::string_view type : absl::StrSplit(PlacementDeviceTypeList(), ", ")) {
    if (std::any_of(types.begin(), types.end(), [&](const TorchDeviceType& t) { return t.type == type; })) continue;
    for (const PluginPackage& p : PluginPackages()) {
      if (p.backend == type) {
        types.push_back({type, p.name, {}});
        break;
      }
    }
  }
  return types;
}

}  // namespace

std::optional<Version> PackageMajorMinor(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits('.', 2));
  if (parts.size() < 2) return std::nullopt;
  Version v;
  if (!ParseDecimal(parts[0], &v.major) || !ParseDecimal(parts[1], &v.minor)) return std::nullopt;
  return v;
}

const std::vector<TorchDeviceType>& TorchDeviceTypes() {
  static const std::vector<TorchDeviceType>* types = new std::vector<TorchDeviceType>(MakeTypes());
  return *types;
}

const TorchDeviceType* FindTorchDeviceType(absl::string_view type) {
  for (const TorchDeviceType& t : TorchDeviceTypes()) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

TorchParse CanTorchParse(absl::string_view type, const JobTorch& torch) {
  TorchParse out;
  out.verdict = TorchParse::kParses;
  const TorchDeviceType* t = FindTorchDeviceType(type);
  if (t == nullptr) return out;
  const JobPython* job = torch.job;
  if (t->plugin.empty()) {
    // c10's own name: only the torch release can be too old, and only job_environment tells it.
    if (job == nullptr || !job->torch) return out;
    const std::optional<Version> have = PackageMajorMinor(*job->torch);
    if (!have || *have >= t->since_torch) return out;
    const std::string since = absl::StrCat(t->since_torch.major, ".", t->since_torch.minor);
    out.verdict = TorchParse::kFails;
    out.why = absl::StrCat("c10 parses ", type, " from torch ", since, " on, and the job has torch ", *job->torch, " (",
                           job->source, ")");
    out.fix = absl::StrCat("install torch >= ", since);
    return out;
  }
  const std::string module = absl::StrReplaceAll(t->plugin, {{"-", "_"}});
  out.why = absl::StrCat(type, " exists in torch only once the ", t->plugin, " plug-in is imported (import ", module, ")");
  out.fix = absl::StrCat("install ", t->plugin, " (and import ", module, ")");
  const std::vector<std::string>* have = nullptr;
  std::string where;
  if (!torch.runtime_given.empty()) {
    have = &torch.runtime_given;
    where = absl::StrCat("runtime_backends given in the request (", absl::StrJoin(*have, ", "), ") has no ", type);
  } else if (job != nullptr && job->torch) {
    have = &job->backends;
    where = absl::StrCat("the job's packages (", job->source, ") have torch ", *job->torch, " but no ", t->plugin);
  } else {
    out.verdict = TorchParse::kNotTold;
    return out;
  }
  if (std::find(have->begin(), have->end(), type) != have->end()) return out;
  out.verdict = TorchParse::kFails;
  out.why = absl::StrCat("only the ", t->plugin, " plug-in registers it (import ", module, "), and ", where);
  return out;
}

}  // namespace devplace::placement
