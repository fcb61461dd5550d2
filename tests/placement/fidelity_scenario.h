// One scenario of the fidelity search (scripts/fidelity/search.py) on devplace's side: the host it
// names, built from the probe goldens of the fixture hosts (tests/golden/probe/<fixture>.json), and
// the ResolveDeviceRequest it sends, both read from one JSON object per line; and the answer written
// back as JSON. The batch resolver (fidelity_batch_resolve.cc, which the search runs) and the ctest
// that holds the resolver to the search's shrunk cases (fidelity_search_cases_test.cc) share it, so
// the suite asks exactly what the search asked.
//
// A scenario line: {"id": "...", "fixtures": ["nvidia-2x-h100", "xpu-2x-arc"], "mps": false,
// "request": {ResolveDeviceRequest in protobuf JSON}, "memory": {...}, ...}; other fields are ignored here.
// "memory" (optional, the landing comparison's simulated memory): {"<device type>": [[free, total], ...] in
// bytes, one pair per device of that type's rows in the inventory's order, "ram": [available, total]}; it
// replaces what the goldens say, so devplace's budgets come from the memory the libraries' side simulates.
#ifndef DEVPLACE_TESTS_PLACEMENT_FIDELITY_SCENARIO_H_
#define DEVPLACE_TESTS_PLACEMENT_FIDELITY_SCENARIO_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "google/protobuf/struct.pb.h"

namespace devplace::testing {

// Lines longer than this are refused (a scenario is a few hundred bytes).
inline constexpr size_t kMaxScenarioLineBytes = 1 << 20;

struct Scenario {
  std::string id;
  std::vector<std::string> fixtures;  // 1 to 4 fixture hosts, their rows merged (the cpu row of the first)
  bool mps = false;                   // plus one Apple GPU (the Linux probe cannot find one)
  v1::ResolveDeviceRequest request;
  google::protobuf::Struct fields;  // the whole line, for a reader's own fields
};

// The line parsed; INVALID_ARGUMENT naming the field for a line that is not a scenario.
absl::StatusOr<Scenario> ParseScenario(absl::string_view line);

// The inventories of scenarios, each built once from the goldens in `golden_dir`.
class ScenarioHosts {
 public:
  explicit ScenarioHosts(std::string golden_dir) : golden_dir_(std::move(golden_dir)) {}
  // NOT_FOUND for a fixture with no golden, INVALID_ARGUMENT for a golden that does not parse or a
  // "memory" field that is not of the form above (more pairs than devices, a value that is not a
  // non-negative number). A scenario with "memory" gets an inventory of its own (valid until the next call).
  absl::StatusOr<const v1::Inventory*> Host(const Scenario& s);

 private:
  v1::Inventory with_memory_;
  std::string golden_dir_;
  std::map<std::string, v1::Inventory> built_;
};

// The answer as one JSON object: {"device": ..., "maxMemory": {...}} (with_warnings: and "warnings": [...])
// or {"error": "CODE: message"}.
std::string AnswerJson(const absl::StatusOr<v1::ResolveDeviceResponse>& answer, bool with_warnings = false);

// A string field of `s`, "" when absent or not a string.
std::string StringField(const google::protobuf::Struct& s, const std::string& name);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_FIDELITY_SCENARIO_H_
