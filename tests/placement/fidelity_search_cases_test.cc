// What the fidelity search found, kept: every line of tests/placement/fidelity_search_cases.jsonl is a
// scenario scripts/fidelity/search.py generated, on which devplace and the libraries' own code (executed at
// the release tags the line names) disagreed, shrunk to its fewest fields. The line carries the libraries'
// answer and the evidence (tag, file, what the library picked). "expect": "library" (the rules were fixed):
// devplace must give the library's device, or an error where the library raised. "expect": "known" (an
// intended difference, docs/SEMANTICS.md section 10, or one listed in docs/FIDELITY.md, not yet fixed): devplace
// must still give the answer it gave when found (the device, or an error with the same gRPC code), so a change
// that fixes it (or moves it) is seen and the line updated.
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "google/protobuf/struct.pb.h"
#include "gtest/gtest.h"
#include "server/placement/resolver.h"
#include "tests/placement/fidelity_scenario.h"

namespace devplace::testing {
namespace {

using google::protobuf::Struct;

// The answer of a recorded side ({"device": ...} or {"error": ...}) as "device X", or "an error" (the library's:
// its exception) or "error CODE" (devplace's, "CODE: message": its gRPC code).
std::string Side(const Struct& line, const std::string& field) {
  auto it = line.fields().find(field);
  if (it == line.fields().end() || !it->second.has_struct_value()) return "";
  const std::string device = StringField(it->second.struct_value(), "device");
  if (!device.empty()) return "device " + device;
  if (field != "devplace") return "an error";
  const std::string error = StringField(it->second.struct_value(), "error");
  return "error " + error.substr(0, error.find(':'));
}

std::string Got(const absl::StatusOr<v1::ResolveDeviceResponse>& got, bool with_code) {
  if (got.ok()) return "device " + got->device();
  return with_code ? "error " + absl::StatusCodeToString(got.status().code()) : "an error";
}

TEST(FidelitySearch, ShrunkCasesGiveTheLibrarysAnswerOrTheirKnownDifference) {
  std::ifstream in(DEVPLACE_FIDELITY_SEARCH_CASES);
  ASSERT_TRUE(in) << DEVPLACE_FIDELITY_SEARCH_CASES;
  ScenarioHosts hosts(DEVPLACE_PROBE_GOLDEN_DIR);
  int cases = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    absl::StatusOr<Scenario> s = ParseScenario(line);
    ASSERT_TRUE(s.ok()) << s.status() << "\n" << line;
    ++cases;
    absl::StatusOr<const v1::Inventory*> host = hosts.Host(*s);
    ASSERT_TRUE(host.ok()) << host.status();
    const absl::StatusOr<v1::ResolveDeviceResponse> got = placement::Resolve(**host, s->request);
    const std::string expect = StringField(s->fields, "expect");
    const std::string evidence = StringField(s->fields, "evidence");
    if (expect == "library") {
      EXPECT_EQ(Got(got, false), Side(s->fields, "library"))
          << s->id << ": the libraries' own code answered otherwise (" << evidence << ")\n"
          << (got.ok() ? "" : got.status().ToString());
    } else {
      ASSERT_EQ(expect, "known") << s->id << ": \"expect\" is \"library\" or \"known\"";
      EXPECT_EQ(Got(got, true), Side(s->fields, "devplace"))
          << s->id << ": a known difference moved; if devplace now gives the library's answer ("
          << Side(s->fields, "library") << ", " << evidence << "), set \"expect\": \"library\"";
    }
  }
  EXPECT_GT(cases, 0) << DEVPLACE_FIDELITY_SEARCH_CASES << ": scripts/fidelity/search.py writes it";
}

// The batch resolver's reader: a line that is not a scenario is an error naming the field, never a crash.
TEST(FidelitySearch, ALineThatIsNotAScenarioIsAnErrorNamingTheField) {
  EXPECT_TRUE(absl::StrContains(ParseScenario("not json").status().message(), "one JSON object"));
  EXPECT_TRUE(absl::StrContains(ParseScenario(R"({"fixtures": ["cpu-only"], "request": {}})").status().message(),
                                "\"id\""));
  EXPECT_TRUE(absl::StrContains(
      ParseScenario(R"({"id": "a", "fixtures": ["../etc"], "request": {}})").status().message(), "\"fixtures\""));
  EXPECT_TRUE(absl::StrContains(
      ParseScenario(R"({"id": "a", "fixtures": ["cpu-only"], "request": {"workload": "NO"}})").status().message(),
      "\"request\""));
  const absl::StatusOr<Scenario> ok =
      ParseScenario(R"({"id": "a", "fixtures": ["nvidia-2x-h100"], "mps": true, "request": {"workload": )"
                    R"("WORKLOAD_TRAINING", "localRank": 1, "worldSize": 2}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ScenarioHosts hosts(DEVPLACE_PROBE_GOLDEN_DIR);
  absl::StatusOr<const v1::Inventory*> host = hosts.Host(*ok);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(Got(placement::Resolve(**host, ok->request), true), "device cuda:1");
  Scenario missing = *ok;
  missing.fixtures = {"no-such-host"};
  EXPECT_EQ(hosts.Host(missing).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace devplace::testing
