// P-PICK step 4 (docs/SEMANTICS.md section 14): the least used of the eligible units first, the
// explanation's line for every unit, and the refusal when too few are free.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/placement/pick_internal.h"
#include "server/placement/visibility.h"

namespace devplace::placement::pick_internal {

bool Better(const Candidate& a, const Candidate& b) {
  // 1. Fewest processes (DeviceUsage.process_count; processes a library does not list count as
  //    none): a process already there competes for the unit's compute.
  if (a.processes != b.processes) return a.processes < b.processes;
  // 2. Health: OK before DEGRADED (docs/PROBE.md "Device health"). After the processes, because an
  //    idle GPU may lower its PCIe link speed and read DEGRADED while a busy one reads OK.
  if (a.degraded != b.degraded) return b.degraded;
  // 3. Least memory in use (DeviceUsage.memory_used_bytes; unknown counts as 0).
  if (a.used != b.used) return a.used < b.used;
  // 4. The job's own order: its position among the units the job sees (what its libraries would
  //    pick first, device 0, stays first among equals).
  return a.job_index < b.job_index;
}

size_t PickLeastUsed(std::vector<Candidate>& candidates, uint32_t count) {
  std::vector<Candidate*> eligible;
  for (Candidate& c : candidates) {
    if (c.eligible) eligible.push_back(&c);
  }
  std::sort(eligible.begin(), eligible.end(), [](const Candidate* a, const Candidate* b) { return Better(*a, *b); });
  const size_t picked = std::min<size_t>(eligible.size(), count);
  for (size_t i = 0; i < picked; ++i) eligible[i]->picked = true;
  return picked;
}

std::vector<std::string> ExplainCandidates(const std::vector<Candidate>& candidates, size_t picked, uint32_t count,
                                           const v1::Backend& backend, const std::vector<VisibleUnit>& pool,
                                           v1::PickDevicesResponse& out) {
  int lines = 0;
  std::vector<std::string> refusal;
  for (const Candidate& c : candidates) {
    const std::string line = absl::StrCat(DescribeUnit(c.unit), ": ",
                                          c.picked     ? absl::StrCat(picked < count ? "free (" : "picked (", c.why, ")")
                                          : c.eligible ? absl::StrCat("not picked: ", count,
                                                                      " less used device(s) came first (", c.why, ")")
                                                       : c.why);
    if (lines++ < kMaxPickDeviceLines) out.add_explanation(absl::StrCat("P-PICK ", line));
    if (static_cast<int>(refusal.size()) < kMaxRefusalDeviceLines) refusal.push_back(line);
  }
  if (lines > kMaxPickDeviceLines) {
    out.add_explanation(absl::StrCat("P-PICK ... and ", lines - kMaxPickDeviceLines, " more unit(s)"));
  }
  for (const v1::Device& d : backend.devices()) {
    const bool in_pool = std::any_of(pool.begin(), pool.end(), [&](const VisibleUnit& u) { return u.device == &d; });
    if (!in_pool && lines++ < kMaxPickDeviceLines) {
      out.add_explanation(absl::StrCat("P-PICK ", DescribeUnit({&d, -1, nullptr}),
                                       ": not the job's (its masks, device nodes or allocation leave it out, or it "
                                       "is not usable: see the steps above)"));
    }
  }
  return refusal;
}

absl::Status TooFewFree(const std::vector<Candidate>& candidates, const std::vector<std::string>& refusal,
                        size_t picked, uint32_t count, const v1::PickDevicesRequest& request,
                        const v1::Backend& backend, bool& no_free_device) {
  // One count in every refusal: the units the job may use that are usable; the unusable ones
  // (FAULT, LOST, a row PyTorch lacks) named apart.
  std::vector<std::string> unusable;
  for (const Candidate& c : candidates) {
    if (c.unusable) unusable.push_back(DescribeUnit(c.unit));
  }
  const size_t usable = candidates.size() - unusable.size();
  std::string not_usable;
  if (!unusable.empty()) {
    const size_t shown = std::min<size_t>(unusable.size(), kMaxRefusalDeviceLines);
    not_usable = absl::StrCat(
        "; not usable: ", absl::StrJoin(unusable.begin(), unusable.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        shown < unusable.size() ? absl::StrCat(" and ", unusable.size() - shown, " more") : "");
  }
  std::vector<std::string> lines;
  for (const std::string& line : refusal) {
    lines.push_back(line.size() <= kMaxRefusalLineChars
                        ? line
                        : absl::StrCat(line.substr(0, kMaxRefusalLineChars), "... (devplace inventory shows the rest)"));
  }
  const int more = static_cast<int>(candidates.size()) - static_cast<int>(lines.size());
  const std::string listed =
      absl::StrCat(absl::StrJoin(lines, "; "), more > 0 ? absl::StrCat("; ... and ", more, " more") : "");
  // More than the job may ever use: no release or wait can help (not queued, not retried).
  if (count > usable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "P-PICK ", count, " ", backend.name(), " device(s) wanted, but the job may use only ", usable,
        " (its masks, device nodes or allocation, and the host's usable devices", not_usable, "): ", listed,
        usable > 0 ? absl::StrCat("; ask for at most ", usable) : std::string()));
  }
  // --min_free where no device's free memory is known: no wait can change that (not queued).
  if (request.min_free_bytes() > 0 &&
      std::all_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.unusable || c.free_unknown; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "P-PICK --min_free (min_free_bytes ", Gib(request.min_free_bytes()), ") needs each device's free memory, "
        "and it is unknown for all ", usable, " ", backend.name(),
        " device(s) the job may use (no vendor library reads it here; `devplace inventory` shows the usage "
        "source), so no wait can satisfy it: pick without --min_free, or install the vendor library "
        "(docs/CLIENT.md \"Shared hosts\")"));
  }
  no_free_device = true;
  // Advice that fits: waiting helps when some are leased or in use, sharing when some are in use.
  const bool some_taken = std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.taken; });
  const bool some_in_use = !request.allow_shared() && std::any_of(candidates.begin(), candidates.end(),
                                                                  [](const Candidate& c) { return c.processes > 0; });
  std::vector<std::string> advice;
  if (some_taken) advice.push_back(absl::StrCat("retry later or wait for one (", kWaitCommands, ", Python wait=S, wait_ms)"));
  if (some_in_use) advice.push_back("allow sharing (devplace --shared, Python allow_shared=True, allow_shared)");
  if (request.min_free_bytes() > 0) advice.push_back("ask for less free memory (devplace --min_free, Python min_free=, min_free_bytes)");
  advice.push_back("ask for fewer");
  return absl::FailedPreconditionError(absl::StrCat("P-PICK ", count, " free ", backend.name(), " device(s) wanted, ",
                                                    picked, " free for this job now (", usable, " it may use",
                                                    not_usable, "): ", listed, "; ", absl::StrJoin(advice, ", ")));
}

}  // namespace devplace::placement::pick_internal
