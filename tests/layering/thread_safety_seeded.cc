// Input of `scripts/thread_safety --self_check` (ctest layering.thread_safety_seeded), never built:
// each line ending in an expect-warning comment breaks a lock annotation the way real code could,
// and the check passes only when clang's analysis reports exactly those lines. Proves the analysis
// runs with the project's flags and that its warnings are caught, so a silent 0 means 0.
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"

namespace devplace::seeded {

class Table {
 public:
  // Reads the guarded map without its lock.
  int Size() const { return static_cast<int>(rows_.size()); }  // expect-warning

  void Put(const std::string& key, int value) {
    absl::MutexLock lock(&mu_);
    PutLocked(key, value);
  }
  void PutLocked(const std::string& key, int value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    rows_[key] = value;
    ++writes_;
  }

  // A Condition callback reads guarded state; it does run under mu_, but nothing said so.
  void AwaitRow() {
    absl::MutexLock lock(&mu_);
    auto ready = [this] { return !rows_.empty(); };  // expect-warning
    mu_.Await(absl::Condition(&ready));
  }

  // A guarded member handed out by reference to a function that does not take the lock.
  void Clear() { Reset(rows_); }  // expect-warning

 private:
  static void Reset(std::map<std::string, int>& rows) { rows.clear(); }

  mutable absl::Mutex mu_;
  std::map<std::string, int> rows_ ABSL_GUARDED_BY(mu_);
  int writes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Calls a function that requires the lock without holding it.
void Unlocked(Table& t) { t.PutLocked("a", 1); }  // expect-warning

// Takes two locks against their declared order (-Wthread-safety-beta checks ABSL_ACQUIRED_BEFORE).
struct Ordered {
  absl::Mutex first ABSL_ACQUIRED_BEFORE(second);
  absl::Mutex second;
  void Backwards() {
    absl::MutexLock b(&second);
    absl::MutexLock a(&first);  // expect-warning
  }
};

}  // namespace devplace::seeded
