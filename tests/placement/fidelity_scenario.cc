#include "tests/placement/fidelity_scenario.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace devplace::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;
namespace pbjson = google::protobuf::util;

constexpr size_t kMaxFixtures = 4;

// The Apple GPU a macOS probe would list (the same row scripts/fidelity/compare.py adds).
v1::Backend MpsBackend() {
  v1::Backend b;
  b.set_row(v1::ROW_MPS);
  b.set_name("mps");
  b.set_device_type("mps");
  b.set_hardware("Apple GPU");
  b.set_vendor("Apple");
  b.set_package("torch");
  b.set_state(v1::BACKEND_STATE_READY);
  v1::Device* d = b.add_devices();
  d->set_host_index(0);
  d->set_name("Apple M2");
  d->set_driver_loaded(true);
  d->set_device_nodes_present(true);
  d->set_health(v1::HEALTH_OK);
  d->set_supported(true);
  d->set_usable(true);
  return b;
}

// A byte count from JSON (a number; doubles hold every count below 2^53 exactly).
bool Bytes(const Value& v, uint64_t& out) {
  if (v.kind_case() != Value::kNumberValue || !(v.number_value() >= 0) || v.number_value() > 9.0e15) return false;
  out = static_cast<uint64_t>(v.number_value());
  return true;
}

// [a, b] of two byte counts.
bool BytePair(const Value& v, uint64_t& a, uint64_t& b) {
  return v.kind_case() == Value::kListValue && v.list_value().values_size() == 2 &&
         Bytes(v.list_value().values(0), a) && Bytes(v.list_value().values(1), b);
}

// `inv` with the scenario's "memory" (fidelity_scenario.h) in place of the goldens' figures.
absl::Status ApplyMemory(const Struct& memory, v1::Inventory& inv) {
  for (const auto& [type, value] : memory.fields()) {
    uint64_t a = 0, b = 0;
    if (type == "ram") {
      if (!BytePair(value, a, b)) return absl::InvalidArgumentError("\"memory\": \"ram\" must be [available, total] bytes");
      inv.mutable_host()->set_memory_available_bytes(a);
      inv.mutable_host()->set_memory_total_bytes(b);
      continue;
    }
    if (value.kind_case() != Value::kListValue) {
      return absl::InvalidArgumentError(absl::StrCat("\"memory\": \"", type, "\" must list [free, total] bytes per device"));
    }
    int next = 0;
    const auto& pairs = value.list_value().values();
    for (v1::Backend& backend : *inv.mutable_backends()) {
      if (backend.device_type() != type) continue;
      for (v1::Device& d : *backend.mutable_devices()) {
        if (next >= pairs.size()) return absl::OkStatus();
        if (!BytePair(pairs[next++], a, b)) {
          return absl::InvalidArgumentError(absl::StrCat("\"memory\": \"", type, "\": each entry is [free, total] bytes"));
        }
        d.set_memory_free_bytes(a);
        d.set_memory_total_bytes(b);
      }
    }
    if (next < pairs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("\"memory\": \"", type, "\" lists ", pairs.size(),
                                                     " devices, the host has ", next));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string StringField(const Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  return it != s.fields().end() && it->second.kind_case() == Value::kStringValue ? it->second.string_value() : "";
}

absl::StatusOr<Scenario> ParseScenario(absl::string_view line) {
  if (line.size() > kMaxScenarioLineBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a scenario line of ", line.size(), " bytes (at most ",
                                                   kMaxScenarioLineBytes, ")"));
  }
  Scenario s;
  if (!pbjson::JsonStringToMessage(std::string(line), &s.fields).ok()) {
    return absl::InvalidArgumentError("a scenario line is one JSON object: {\"id\", \"fixtures\", \"mps\", \"request\"}");
  }
  const auto& f = s.fields.fields();
  s.id = StringField(s.fields, "id");
  if (s.id.empty()) return absl::InvalidArgumentError("scenario: \"id\" must be a non-empty string");
  auto fixtures = f.find("fixtures");
  if (fixtures == f.end() || fixtures->second.kind_case() != Value::kListValue ||
      fixtures->second.list_value().values_size() < 1 ||
      static_cast<size_t>(fixtures->second.list_value().values_size()) > kMaxFixtures) {
    return absl::InvalidArgumentError(absl::StrCat("scenario ", s.id, ": \"fixtures\" must list 1 to ", kMaxFixtures,
                                                   " fixture host names"));
  }
  for (const Value& v : fixtures->second.list_value().values()) {
    const std::string& name = v.string_value();
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
      return absl::InvalidArgumentError(absl::StrCat("scenario ", s.id, ": \"fixtures\": a fixture host's name, not ",
                                                     v.DebugString()));
    }
    s.fixtures.push_back(name);
  }
  auto mps = f.find("mps");
  s.mps = mps != f.end() && mps->second.kind_case() == Value::kBoolValue && mps->second.bool_value();
  auto request = f.find("request");
  if (request == f.end() || request->second.kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat("scenario ", s.id, ": \"request\" must be a ResolveDeviceRequest "
                                                   "in protobuf JSON"));
  }
  std::string json;
  if (!pbjson::MessageToJsonString(request->second.struct_value(), &json).ok() ||
      !pbjson::JsonStringToMessage(json, &s.request).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scenario ", s.id, ": \"request\" is not a ResolveDeviceRequest: ",
                                                   json.substr(0, 200)));
  }
  return s;
}

absl::StatusOr<const v1::Inventory*> ScenarioHosts::Host(const Scenario& s) {
  auto memory = s.fields.fields().find("memory");
  if (memory != s.fields.fields().end()) {
    if (memory->second.kind_case() != Value::kStructValue) {
      return absl::InvalidArgumentError("\"memory\" must be an object: {\"<device type>\": [[free, total], ...], \"ram\": [available, total]}");
    }
    Scenario plain = s;
    plain.fields.mutable_fields()->erase("memory");
    absl::StatusOr<const v1::Inventory*> base = Host(plain);
    if (!base.ok()) return base;
    with_memory_ = **base;
    if (absl::Status st = ApplyMemory(memory->second.struct_value(), with_memory_); !st.ok()) return st;
    return &with_memory_;
  }
  const std::string key = absl::StrCat(absl::StrJoin(s.fixtures, "+"), s.mps ? "+mps" : "");
  auto it = built_.find(key);
  if (it != built_.end()) return &it->second;
  v1::Inventory merged;
  for (size_t i = 0; i < s.fixtures.size(); ++i) {
    const std::string path = absl::StrCat(golden_dir_, "/", s.fixtures[i], ".json");
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("no golden inventory ", path));
    std::stringstream text;
    text << in.rdbuf();
    v1::Inventory inv;
    if (!pbjson::JsonStringToMessage(text.str(), &inv).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not an Inventory in protobuf JSON"));
    }
    if (i == 0) {
      merged = std::move(inv);
      continue;
    }
    for (const v1::Backend& b : inv.backends()) {
      if (b.row() != v1::ROW_CPU) *merged.add_backends() = b;
    }
  }
  if (s.mps) *merged.add_backends() = MpsBackend();
  return &built_.emplace(key, std::move(merged)).first->second;
}

std::string AnswerJson(const absl::StatusOr<v1::ResolveDeviceResponse>& answer, bool with_warnings) {
  std::string out;
  if (!answer.ok()) {
    Struct error;
    (*error.mutable_fields())["error"].set_string_value(
        absl::StrCat(absl::StatusCodeToString(answer.status().code()), ": ", answer.status().message()));
    (void)pbjson::MessageToJsonString(error, &out);  // a Struct of one string always serializes
    return out;
  }
  v1::ResolveDeviceResponse brief;
  brief.set_device(answer->device());
  *brief.mutable_max_memory() = answer->max_memory();
  if (with_warnings) *brief.mutable_warnings() = answer->warnings();
  (void)pbjson::MessageToJsonString(brief, &out);  // strings, a map and a list always serialize
  return out;
}

}  // namespace devplace::testing
