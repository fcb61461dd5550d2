// The health counters a management library's calls give one device, for the probers of
// accel_library.h (HLML, DCMI, ...): docs/PROBE.md "Device health", each library's table names
// the counters, their rules and the rules' sources. Read in the prober's child process during a
// full probe (a usage refresh reads none); the merge puts them in Device.health_counters and
// BuildInventory derives the device's health from them, as from the sysfs and NVML counters.
//
// Every call is optional: one the library lacks, one the device answers as not supported (the
// library's LibraryErrors classify it kNotSupported) and one that fails make its counters unknown
// (effect HEALTH_UNSPECIFIED, the rule saying why), never a health change; a failure other than
// "not supported" is also a note in the prober's report, never a problem. Only the codes that are a
// library's verdict on the device change it, as from any call: kLost HEALTH_LOST (no later call is
// made on it), kFault HEALTH_FAULT (MTML_ERROR_DRIVER_FAILURE; the call named in the reason).
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_HEALTH_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_HEALTH_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "devplace/v1/devplace.pb.h"
#include "server/probe/vendor_libs/accel_library.h"

namespace devplace::probe {

// One counter a call answers, and what a reading of it means.
struct CounterRule {
  const char* name;       // e.g. "ecc.errors.uncorrected.volatile.total"
  v1::Health if_nonzero;  // the effect of a reading other than 0; HEALTH_OK: a raw count, never a change
  const char* rule;       // what the reading means (HealthCounter.rule)
};

// Reads one device's health counters through `calls` into device.health_counters.
class LibraryHealthReader {
 public:
  LibraryHealthReader(LibraryCalls& calls, LibraryDevice& device) : calls_(calls), device_(device) {}

  // Makes `call` unless the device is lost; `available`: whether the library has it; `source`:
  // the counters' source, "<library> <call>(<arguments>)"; `fn` makes the call and returns the
  // library's code. True when it answered success (the caller then Adds the readings); otherwise
  // each of `rules` is an unknown counter (none when the device is lost).
  template <typename Fn>
  bool Call(const char* call, bool available, const std::string& source, absl::Span<const CounterRule> rules,
            Fn fn) {
    if (!device_.lost.empty()) return false;
    if (!available) {
      Unknown(rules, source, std::string("the library lacks ") + call);
      return false;
    }
    calls_.call().Enter(call, device_.index);
    return Answered(call, source, rules, fn());
  }

  // A count: effect rule.if_nonzero when not 0, else HEALTH_OK.
  void Add(const CounterRule& rule, const std::string& source, uint64_t value);
  // A reading with its own effect and rule text (a flag, a mode).
  void Add(const char* name, std::string value, const std::string& source, v1::Health effect, std::string rule);
  // An ECC mode reading (`name` e.g. "ecc.mode.current"; `when`: "now", "after the next reset"):
  // value 1 on, 0 off; never a health change, off is a note in the rule (errors go undetected).
  void AddEccMode(const char* name, bool on, const std::string& source, const char* when);

 private:
  bool Answered(const char* call, const std::string& source, absl::Span<const CounterRule> rules, int code);
  void Unknown(absl::Span<const CounterRule> rules, const std::string& source, const std::string& why);

  LibraryCalls& calls_;
  LibraryDevice& device_;
};

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_HEALTH_H_
