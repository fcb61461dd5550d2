// The fidelity search's devplace side (scripts/fidelity/search.py): reads scenarios, one JSON object
// per line on stdin (tests/placement/fidelity_scenario.h), resolves each with the placement library
// in this process and prints one line per scenario, in order:
//   {"id": ..., "device": ..., "maxMemory": {...}}   or   {"id": ..., "error": "CODE: message"}
// (with --warnings, an answer's "warnings" too)
// A line that is not a scenario is answered {"id": ..., "error": "harness: ..."}. One process
// answers thousands of scenarios where `devplace resolve` would start a process for each.
//
//   fidelity_batch_resolve [--warnings] [GOLDEN_DIR] < scenarios.jsonl
// GOLDEN_DIR: the probe goldens (default: this checkout's tests/golden/probe).
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/placement/resolver.h"
#include "tests/placement/fidelity_scenario.h"

namespace {

// `answer` (a JSON object) with "id" first.
std::string WithId(const std::string& id, const std::string& answer) {
  google::protobuf::Value v;
  v.set_string_value(id);
  std::string quoted;
  (void)google::protobuf::util::MessageToJsonString(v, &quoted);  // a string value always serializes
  return absl::StrCat("{\"id\":", quoted, answer.size() > 2 ? "," : "", answer.substr(1));
}

}  // namespace

int main(int argc, char** argv) {
  using devplace::testing::AnswerJson;
  const bool with_warnings = argc > 1 && std::string(argv[1]) == "--warnings";
  if (with_warnings) --argc, ++argv;
  if (argc > 2 || (argc == 2 && std::string(argv[1]).rfind("-", 0) == 0)) {
    std::cerr << "usage: fidelity_batch_resolve [--warnings] [GOLDEN_DIR] < scenarios.jsonl\n"
                 "Resolves each scenario line (scripts/fidelity/search.py writes them) against the fixture hosts'\n"
                 "probe goldens and prints one JSON answer per line (--warnings: with the answer's warnings).\n";
    return 2;
  }
  devplace::testing::ScenarioHosts hosts(argc == 2 ? argv[1] : DEVPLACE_PROBE_GOLDEN_DIR);
  std::string line;
  int n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (line.empty()) continue;
    absl::StatusOr<devplace::testing::Scenario> s = devplace::testing::ParseScenario(line);
    if (!s.ok()) {
      std::cout << WithId(absl::StrCat("line ", n), AnswerJson(absl::InvalidArgumentError(
                                                        absl::StrCat("harness: ", s.status().message()))))
                << "\n";
      continue;
    }
    absl::StatusOr<const devplace::v1::Inventory*> host = hosts.Host(*s);
    std::cout << WithId(s->id, host.ok() ? AnswerJson(devplace::placement::Resolve(**host, s->request), with_warnings)
                                         : AnswerJson(absl::FailedPreconditionError(
                                               absl::StrCat("harness: ", host.status().message()))))
              << "\n";
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}
