// Checks shared by the resolver's case tables.
#ifndef DEVPLACE_TESTS_PLACEMENT_ANSWER_CHECK_H_
#define DEVPLACE_TESTS_PLACEMENT_ANSWER_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "devplace/v1/devplace.pb.h"
#include "gtest/gtest.h"

namespace devplace::testing {

// Whether every word is a substring of the error message (when `got` is an error) or else of the
// answer's explanation and warnings; the failure names the missing words and the whole text.
inline ::testing::AssertionResult SaysAll(const absl::StatusOr<v1::ResolveDeviceResponse>& got,
                                          const std::vector<std::string>& words) {
  const std::string text = got.ok() ? absl::StrCat(absl::StrJoin(got->explanation(), "\n"), "\n",
                                                   absl::StrJoin(got->warnings(), "\n"))
                                    : std::string(got.status().message());
  std::vector<std::string> missing;
  for (const std::string& w : words) {
    if (text.find(w) == std::string::npos) missing.push_back(w);
  }
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "missing [" << absl::StrJoin(missing, "] [") << "] in:\n" << text;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_ANSWER_CHECK_H_
