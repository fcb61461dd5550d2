#include "server/metrics/version_skew_metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace devplace::metrics {

VersionSkewMetrics::VersionSkewMetrics(prometheus::Registry& registry)
    : family_(prometheus::BuildCounter()
                  .Name("devplace_version_skew_answers_total")
                  .Help("ResolveDevice answers (cached repeats included) that applied the newest rules devplaced has "
                        "to a job whose Transformers or Accelerate release is newer (rule V-SKEW), by library and the "
                        "job's MAJOR.MINOR (the first 16 per library; later ones as \"other\")")
                  .Register(registry)) {}

void VersionSkewMetrics::Count(const placement::NewerLibrary& newer) {
  std::string library = absl::AsciiStrToLower(placement::LibraryName(newer.library));
  std::string release = absl::StrCat(newer.job.major, ".", newer.job.minor);
  prometheus::Counter* counter = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = series_.find({library, release});
    if (it == series_.end()) {
      int& distinct = releases_[library];
      if (distinct >= kMaxSkewReleasesPerLibrary) {
        release = "other";
        it = series_.find({library, release});
      } else {
        ++distinct;
      }
    }
    if (it == series_.end()) {
      counter = &family_.Add({{"library", library}, {"job_release", release}});
      series_.emplace(std::make_pair(std::move(library), std::move(release)), counter);
    } else {
      counter = it->second;
    }
  }
  counter->Increment();
}

}  // namespace devplace::metrics
