// devplaced's flag check (server/daemon/flags.h CheckFlags) walked over every flag it defines: each
// one that takes a number, a bool or a duration, given a value of the wrong type or past the type's
// range, gets one line naming the flag, the type wanted and the flag's help (with its range), never
// absl's bare "Illegal value".
#include "server/daemon/flags.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace devplace::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(DaemonFlags, EveryFlagThatIsNotTextNamesTheTypeWantedAndItsHelp) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "server/daemon/flags.cc") && !flag->IsOfType<std::string>() &&
        !flag->IsOfType<std::vector<std::string>>()) {
      flags.push_back(flag);
    }
  }
  ASSERT_GE(flags.size(), 20u);  // the walk found devplaced's flags (25 take a number, a bool or a duration)
  int numbers = 0;
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string name(flag->Name());
    // A value no number, bool or duration is, and a number past every integer type's range.
    for (const std::string value : {std::string("abc"), std::string("99999999999999999999999")}) {
      if ((flag->IsOfType<bool>() || flag->IsOfType<double>()) && value != "abc") continue;
      SCOPED_TRACE("--" + name + "=" + value);
      const std::optional<std::string> error = CheckFlags({"--" + name + "=" + value});
      ASSERT_TRUE(error.has_value());
      EXPECT_THAT(*error, StartsWith("--" + name + "=" + value + ": "));
      EXPECT_THAT(*error, Not(HasSubstr("Illegal value")));
      if (flag->IsOfType<absl::Duration>()) {
        EXPECT_THAT(*error, HasSubstr("a duration needs a unit"));
      } else {
        EXPECT_THAT(*error, HasSubstr(": want "));
        EXPECT_THAT(*error, HasSubstr("(--" + name + ": "));  // the help, which states the range
        numbers += !flag->IsOfType<bool>() && value == "abc";
      }
    }
  }
  EXPECT_GE(numbers, 10);
}

}  // namespace
}  // namespace devplace::daemon
