// The daemon's libtorch view (Inventory.torch): runs devplace-torch-probe, the only binary that
// links libtorch, as a child process (~0.8 s and ~150 MB while it runs, nothing afterwards) and
// keeps what it reported, for the store to merge into every published inventory.
#ifndef DEVPLACE_SERVER_INVENTORY_TORCH_VIEW_H_
#define DEVPLACE_SERVER_INVENTORY_TORCH_VIEW_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"
#include "server/inventory/probe_runner.h"

namespace devplace::inventory {

class TorchView {
 public:
  // `command` runs devplace-torch-probe (its stdout: one Inventory with `torch` set); empty =
  // disabled, and Last()'s error is `off_reason` (why: the operator's --torch_probe_command=none,
  // or no probe installed). `timeout` bounds one run; an overrunning child is killed.
  TorchView(std::vector<std::string> command, absl::Duration timeout, std::string off_reason);

  // Runs the probe now. A good run replaces the view; a failed one keeps the last good view
  // (if any) and puts the failure in `error` ("last run failed: ..."), so one bad run does not
  // erase what libtorch was seen to support. Concurrent calls run one after the other. Returns
  // the view kept.
  v1::TorchInfo Run();
  // The view kept ("not probed yet" before the first run).
  v1::TorchInfo Last() const;
  // Kills a run in progress and makes later runs return at once (daemon shutdown).
  void Cancel() { cancelled_ = true; }

 private:
  std::atomic<bool> cancelled_{false};
  std::vector<std::string> command_;
  absl::Duration timeout_;
  absl::Mutex run_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // held for a whole Run(): runs one at a time
  mutable absl::Mutex mu_;
  v1::TorchInfo last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::inventory

#endif  // DEVPLACE_SERVER_INVENTORY_TORCH_VIEW_H_
