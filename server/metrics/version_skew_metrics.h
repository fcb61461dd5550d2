// devplace_version_skew_answers_total: ResolveDevice answers given with older rules than the job's
// library release (rule V-SKEW, docs/SEMANTICS.md section 10), so an operator sees which newer
// Transformers / Accelerate lines the jobs run before the daemon learns their rules.
#ifndef DEVPLACE_SERVER_METRICS_VERSION_SKEW_METRICS_H_
#define DEVPLACE_SERVER_METRICS_VERSION_SKEW_METRICS_H_

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "server/placement/resolver.h"

namespace devplace::metrics {

// Most distinct job_release label values per library; later ones are counted under "other".
inline constexpr int kMaxSkewReleasesPerLibrary = 16;

// The counter
//   devplace_version_skew_answers_total{library=transformers|accelerate, job_release="MAJOR.MINOR"|"other"}
// one per library per ResolveDevice answer (OK status) whose job release is newer than the rules,
// cached repeats included: each is an answer a job received. The label set is bounded: the first
// kMaxSkewReleasesPerLibrary MAJOR.MINOR values seen per library get their own series, every later
// one counts under job_release="other", so at most 2 x 17 series whatever the callers send. A series
// appears with its first answer. Thread-safe.
class VersionSkewMetrics {
 public:
  // Registers the family in `registry`, which must outlive this object.
  explicit VersionSkewMetrics(prometheus::Registry& registry);
  // One answer applied NewestVersion(newer.library)'s rules to the job's newer release.
  void Count(const placement::NewerLibrary& newer);

 private:
  prometheus::Family<prometheus::Counter>& family_;
  absl::Mutex mu_;
  // (library label, job_release label) -> its counter; at most kMaxSkewReleasesPerLibrary + 1 per library.
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> series_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> releases_ ABSL_GUARDED_BY(mu_);  // distinct MAJOR.MINOR labels per library
};

}  // namespace devplace::metrics

#endif  // DEVPLACE_SERVER_METRICS_VERSION_SKEW_METRICS_H_
