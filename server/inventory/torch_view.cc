#include "server/inventory/torch_view.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace devplace::inventory {

TorchView::TorchView(std::vector<std::string> command, absl::Duration timeout, std::string off_reason)
    : command_(std::move(command)), timeout_(timeout) {
  absl::MutexLock lock(&mu_);
  if (!command_.empty()) {
    last_.set_error("not probed yet");
  } else {
    last_.set_error(off_reason.empty() ? "devplace-torch-probe is turned off" : std::move(off_reason));
  }
}

v1::TorchInfo TorchView::Run() {
  absl::MutexLock serial(&run_mu_);
  if (command_.empty() || cancelled_) return Last();
  ProbeRunnerOptions options;
  options.timeout = timeout_;
  options.cancel = &cancelled_;
  const ProbeResult result = ProbeRunner(command_, options).Run();
  absl::MutexLock lock(&mu_);
  if (result.inventory.ok() && result.inventory->has_torch() && result.inventory->torch().probed()) {
    last_ = result.inventory->torch();
    return last_;
  }
  const std::string why = !result.inventory.ok() ? std::string(result.inventory.status().message())
                          : result.inventory->has_torch() ? result.inventory->torch().error()
                                                          : "devplace-torch-probe wrote an inventory without a torch view";
  if (last_.probed()) {
    last_.set_error(absl::StrCat("last run failed: ", why));
  } else {
    last_.Clear();
    last_.set_error(why);
  }
  return last_;
}

v1::TorchInfo TorchView::Last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace devplace::inventory
