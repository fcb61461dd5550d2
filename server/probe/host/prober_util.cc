#include "server/probe/host/prober_util.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "server/probe/host/parsers.h"

namespace devplace::probe {

void Problems::Add(const absl::Status& status) {
  if (!status.ok()) Add(std::string(status.message()));
}

void Problems::Add(std::string problem) {
  if (list_.size() < kMaxListed) {
    list_.push_back(std::move(problem));
  } else {
    ++more_;
  }
}

void Problems::AddFirst(std::string problem) { list_.insert(list_.begin(), std::move(problem)); }

absl::StatusOr<ProbeOutcome> Problems::Finish(std::string found) const {
  if (list_.empty()) return Found(std::move(found));
  return absl::InternalError(absl::StrCat(absl::StrJoin(list_, "; "),
                                          more_ > 0 ? absl::StrCat("; and ", more_, " more") : "",
                                          " (found anyway: ", found, ")"));
}

void SetListedProcesses(v1::Device& d, const char* source, const std::vector<std::pair<uint32_t, uint64_t>>& processes) {
  v1::DeviceUsage& usage = *d.mutable_usage();
  usage.set_source(source);
  usage.set_processes_known(true);
  usage.set_process_count(static_cast<uint32_t>(processes.size()));
  for (const auto& [pid, bytes] : processes) {
    v1::DeviceUsageProcess& p = *usage.add_processes();
    p.set_pid(pid);
    if (bytes != kUnknownProcessBytes) p.set_used_memory_bytes(bytes);
    p.set_kind(v1::DEVICE_USAGE_PROCESS_KIND_COMPUTE);
  }
}

void MarkLost(v1::Device& d, const std::string& reason) {
  const bool already = d.health() == v1::HEALTH_LOST && !d.health_reason().empty();
  d.set_health_reason(already ? absl::StrCat(d.health_reason(), "; ", reason) : reason);
  d.set_health(v1::HEALTH_LOST);
}

void MergeLibraryDriverVersion(HostFacts& facts, v1::Row row, const std::string& version, absl::string_view library,
                               absl::string_view kernel_source, std::vector<std::string>& found,
                               std::vector<std::string>& notes) {
  if (version.empty()) return;
  found.push_back(absl::StrCat("driver ", version));
  std::string& known = facts.driver_versions[row];
  if (known.empty()) {
    known = version;
  } else if (known != version) {
    notes.push_back(absl::StrCat(library, "'s driver ", version, " differs from the ", kernel_source, "'s ", known));
  }
}

std::string FoundAndNotes(const std::vector<std::string>& found, const std::vector<std::string>& notes) {
  std::string message = absl::StrJoin(found, ", ");
  if (!notes.empty()) absl::StrAppend(&message, "; ", absl::StrJoin(notes, "; "));
  return message;
}

std::vector<std::pair<uint32_t, std::string>> NumberedEntries(const std::vector<std::string>& names,
                                                              absl::string_view prefix) {
  std::vector<std::pair<uint32_t, std::string>> out;
  for (const std::string& name : names) {
    absl::string_view rest = name;
    uint32_t number = 0;
    if (!absl::ConsumePrefix(&rest, prefix) || rest.empty() ||
        !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(rest, &number)) {
      continue;
    }
    out.emplace_back(number, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<uint32_t, std::string>> ListNumbered(const HostRoot& root,
                                                           absl::string_view dir,
                                                           absl::string_view prefix) {
  absl::StatusOr<std::vector<std::string>> names = root.ListDir(dir);
  if (!names.ok()) return {};
  return NumberedEntries(*names, prefix);
}

std::optional<std::string> ReadOptional(const HostRoot& root, absl::string_view path) {
  absl::StatusOr<std::string> content = root.ReadTrimmed(path);
  if (!content.ok()) return std::nullopt;
  return *std::move(content);
}

std::optional<int64_t> ReadOptionalDecimal(const HostRoot& root, absl::string_view path) {
  const std::optional<std::string> content = ReadOptional(root, path);
  if (!content) return std::nullopt;
  absl::StatusOr<int64_t> value = ParseDecimal(*content);
  if (!value.ok()) return std::nullopt;
  return *value;
}

std::string HexId(uint32_t value, int digits) { return absl::StrFormat("%0*x", digits, value); }

}  // namespace devplace::probe
