#include "server/inventory/torch_view.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace devplace::inventory {

TorchView::TorchView(std::vector<std::string> command, absl::Duration timeout)
    : command_(std::move(command)), timeout_(timeout) {
  absl::MutexLock lock(&mu_);
  last_.set_error(command_.empty() ? "devplace-torch-probe is disabled (--torch_probe_command is empty)"
                                   : "not probed yet");
}

v1::TorchInfo TorchView::Run() {
  absl::MutexLock serial(&run_mu_);
  if (command_.empty()) return Last();
  ProbeRunnerOptions options;
  options.timeout = timeout_;
  const ProbeResult result = ProbeRunner(command_, options).Run();
  v1::TorchInfo view;
  if (result.inventory.ok() && result.inventory->has_torch()) {
    view = result.inventory->torch();
  } else {
    view.set_probed(false);
    view.set_error(result.inventory.ok() ? "devplace-torch-probe wrote an inventory without a torch view"
                                         : std::string(result.inventory.status().message()));
  }
  absl::MutexLock lock(&mu_);
  last_ = view;
  return view;
}

v1::TorchInfo TorchView::Last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace devplace::inventory
