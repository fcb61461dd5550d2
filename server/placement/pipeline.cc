// pipeline(device=...) (docs/SEMANTICS.md section 6; Transformers' Pipeline.__init__): None (the
// accelerator default, or cpu before it), an int (-1 and other negatives: cpu; N: IntDevice in
// device_map.cc), a device string (explicit_device.cc).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/versions.h"

namespace devplace::placement::resolver_internal {

// pipeline's order (by PyTorch device type; "cuda" is whichever GPU row is available) is the
// release's V-TF-PIPE row of versions.cc.
absl::Status Resolution::Pipeline() {
  const std::string& m = req_.device_map();
  out_.add_explanation(absl::StrCat("convention pipeline: emulating pipeline(device=",
                                    m.empty() ? "None" : m, ")"));
  const OrderRule& rule = versions_.Order(OrderKind::kTfPipeline);
  const std::vector<std::string>& order = rule.order;
  if (m.empty() && !versions_.Has(Feature::kTfPipelineAccelDefault)) {
    AnswerCpu(absl::StrCat("I-PIPE device=None: ", versions_.Cite(Feature::kTfPipelineAccelDefault), " -> cpu"));
    if (const RowState* r = FirstAvailable(rule)) {
      out_.add_warnings(absl::StrCat("hint: pass device=0 to use ", r->backend->device_type(), ":0"));
    }
    return absl::OkStatus();
  }
  out_.add_explanation(absl::StrCat("I-PIPE order ", versions_.Cite(rule)));
  if (m.empty()) {
    const RowState* r = FirstAvailable(rule);
    AutomaticChoiceHazards();
    if (r == nullptr) {
      AnswerCpu(absl::StrCat("I-PIPE device=None and no row of ", OrderText(order), " is available: cpu"));
      return absl::OkStatus();
    }
    const std::string type = r->backend->device_type();
    const std::string device = absl::StrCat(type, ":0");  // mps too: pipeline builds torch.device(f"mps:{device}")
    out_.add_explanation(absl::StrCat("I-PIPE device=None: accelerator index 0 of the first available of ",
                                      OrderText(order), " (", versions_.Rule(Feature::kTfPipelineAccelDefault).id,
                                      ", Transformers >= ", versions_.Rule(Feature::kTfPipelineAccelDefault).since.ToString(),
                                      ") -> ", device));
    Answer(*r, device);
    Place(*r, 0)->set_device(device);
    return absl::OkStatus();
  }
  if (std::optional<int64_t> n = DeviceMapInt(m)) {
    if (*n == -1) {
      AnswerCpu("I-PIPE device=-1: the model's own device, cpu for a freshly loaded model");
      return absl::OkStatus();
    }
    if (*n < 0) {
      AnswerCpu(absl::StrCat("I-PIPE device=", *n, ": a negative int other than -1 means cpu"));
      return absl::OkStatus();
    }
    return IntDevice(*n, order, "I-PIPE", &rule);
  }
  return ExplicitString(m);
}

}  // namespace devplace::placement::resolver_internal
