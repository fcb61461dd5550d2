// One row of the resolver's case tables (conformance_test.cc, hazards_test.cc, versions_test.cc,
// version_skew_test.cc, explicit_device_test.cc): a host, a request, and what the answer or the
// error must hold. Each table fills the fields its test checks (see its TEST_P); a field left at
// its default is not checked, except where its comment says so.
#ifndef DEVPLACE_TESTS_PLACEMENT_RESOLVE_CASE_H_
#define DEVPLACE_TESTS_PLACEMENT_RESOLVE_CASE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"

namespace devplace::testing {

struct ResolveCase {
  std::string id;                       // the test's name: the rule or SEMANTICS.md id it checks
  std::function<v1::Inventory()> host;  // the host (HostOf, or a builder)
  v1::ResolveDeviceRequest request;     // a Req converts
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string device;                    // the answer's device (always checked for an OK answer)
  std::vector<std::string> devices;      // the answer's devices list, exact (conformance: always checked)
  std::vector<std::string> words;        // each a substring of the explanation and warnings (OK) or of the error
  std::vector<int> host_indices;         // placed host indices, in order, when given
  int first_host_index = -1;             // placed[0].host_index when >= 0
  std::vector<std::string> partitions;   // placed partition UUIDs, in order, when given
  // The releases applied, the job's own, and which are newer than the rules (version_skew_test.cc:
  // always checked, the applied ones defaulting to the newest rules).
  std::string transformers = "5.15.0", accelerate = "1.14.0";
  std::string transformers_job, accelerate_job;
  bool transformers_newer = false, accelerate_newer = false;
  std::vector<std::string> warnings;         // each a substring of some warning
  std::vector<std::string> absent_warnings;  // no warning may contain these
  std::vector<std::string> error_words;      // each a substring of the error
  std::map<std::string, uint64_t> max_memory;  // exact, when given
  std::vector<std::string> explanation;      // each a substring of some explanation step
  bool no_warnings = false;                  // there is no warning at all
  std::string accelerate_answered;           // response.accelerate_version, when given
};

// gtest prints a case by its id, and names each instance of a table's TEST_P after it.
inline void PrintTo(const ResolveCase& c, std::ostream* os) { *os << c.id; }
inline std::string CaseId(const ::testing::TestParamInfo<ResolveCase>& info) { return info.param.id; }

// The version tables' check (versions_test.cc, release_quirks_test.cc): the status; for an error, `words` in its
// message; for an answer, the device, `words` in the explanation and warnings, the placed host indices and the
// Accelerate release answered when given.
inline void ExpectVersionCase(const ResolveCase& k) {
  const v1::Inventory inv = k.host();
  absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(inv, k.request);
  ASSERT_EQ(got.status().code(), k.code) << got.status();
  if (!got.ok()) {
    for (const std::string& w : k.words) EXPECT_THAT(std::string(got.status().message()), ::testing::HasSubstr(w));
    return;
  }
  const std::string dump = got->DebugString();
  EXPECT_EQ(got->device(), k.device) << dump;
  const std::string text = absl::StrCat(absl::StrJoin(got->explanation(), "\n"), "\n", absl::StrJoin(got->warnings(), "\n"));
  for (const std::string& w : k.words) EXPECT_THAT(text, ::testing::HasSubstr(w)) << dump;
  if (!k.host_indices.empty()) {
    std::vector<int> hosts;
    for (const v1::PlacedDevice& p : got->placed()) hosts.push_back(p.host_index());
    EXPECT_EQ(hosts, k.host_indices) << dump;
  }
  if (!k.accelerate_answered.empty()) {
    EXPECT_EQ(got->accelerate_version(), k.accelerate_answered);
  }
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_RESOLVE_CASE_H_
