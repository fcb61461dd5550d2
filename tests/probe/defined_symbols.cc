#include "tests/probe/defined_symbols.h"

#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"

namespace devplace::testing {

std::map<std::string, std::string> DefinedSymbols(const std::string& library) {
  const CommandResult r = RunCommand("nm -D --defined-only --with-symbol-versions " + ShellQuote(library));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() != 3) continue;
    std::string name = words[2], version;
    if (const size_t at = name.find('@'); at != std::string::npos) {
      version = name.substr(at);
      name.resize(at);
    }
    out[name] = words[1] + version;
  }
  return out;
}

}  // namespace devplace::testing
