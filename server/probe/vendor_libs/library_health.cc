#include "server/probe/vendor_libs/library_health.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/probe/host/pci_health.h"

namespace devplace::probe {

void LibraryHealthReader::Add(const char* name, std::string value, const std::string& source, v1::Health effect,
                              std::string rule) {
  if (device_.health_counters.size() >= static_cast<size_t>(kMaxHealthCounters)) return;
  v1::HealthCounter& c = device_.health_counters.emplace_back();
  c.set_name(name);
  c.set_value(std::move(value));
  c.set_source(source);
  c.set_effect(effect);
  c.set_rule(std::move(rule));
}

void LibraryHealthReader::Add(const CounterRule& rule, const std::string& source, uint64_t value) {
  Add(rule.name, absl::StrCat(value), source, value != 0 ? rule.if_nonzero : v1::HEALTH_OK, rule.rule);
}

void LibraryHealthReader::AddEccMode(const char* name, bool on, const std::string& source, const char* when) {
  Add(name, on ? "1" : "0", source, v1::HEALTH_OK,
      absl::StrCat("ECC ", on ? "on" : "off", " ", when,
                   on ? "" : ": the device's memory errors are not detected (a note, not a health change)"));
}

void LibraryHealthReader::Unknown(absl::Span<const CounterRule> rules, const std::string& source,
                                  const std::string& why) {
  for (const CounterRule& rule : rules) Add(rule.name, "", source, v1::HEALTH_UNSPECIFIED, absl::StrCat("unknown: ", why));
}

bool LibraryHealthReader::Answered(const char* call, const std::string& source, absl::Span<const CounterRule> rules,
                                   int code) {
  switch (calls_.Classify(code)) {
    case CallResult::kOk:
      return true;
    case CallResult::kLost:
      calls_.DeviceResult(device_, call, code);  // HEALTH_LOST, as from any call
      return false;
    case CallResult::kFault:  // the library says the device fails (MTML_ERROR_DRIVER_FAILURE): FAULT, as from any call
      calls_.DeviceResult(device_, call, code);
      Unknown(rules, source, calls_.CodeName(code));
      return false;
    case CallResult::kNotSupported:
      Unknown(rules, source, absl::StrCat(calls_.CodeName(code), " (this device does not offer it)"));
      return false;
    default:  // a library error is a note, never a health change
      Unknown(rules, source, calls_.CodeName(code));
      calls_.out().notes.push_back(absl::StrCat(
          calls_.Finding({device_.index, device_.bus_id, device_.lost}, call, code),
          " (its health counters unknown, not a health change)"));
      return false;
  }
}

}  // namespace devplace::probe
