// The scripted core shared by the fake accelerator libraries (fake_hlml, fake_dcmi, fake_cndev,
// fake_mtml, fake_rocm_smi): each fake exports its vendor's functions (declared in server/probe/vendor_libs/<lib>_api.h)
// and answers them from a script file named by an environment variable, in the spirit of
// fake_nvml.cc. The script is read when the library is initialised (hlml_init, dcmi_init,
// cndevInit, mtmlLibraryInit, rsmi_init); an unset variable or a malformed script makes that call
// fail (with the library's "unknown" code; ROCm SMI's INIT_ERROR) and says why on stderr. When <PREFIX>_LOG names a file, every call
// is appended to it as "<function> <target>".
//
// Script format: one directive per line; '#' starts a comment; blank lines are ignored.
//
//   driver_version <text>                 the library's driver version, where it tells one
//   device <i> <key> <text to end>        a fact of device i (devices 0..n-1; the count is n);
//                                         keys every fake reads: bus_id ("0000:33:00.0"), name,
//                                         uuid, memory <total bytes> <used bytes> (DCMI and CNDev
//                                         answer in MB: use multiples of 1048576); the
//                                         fake-specific keys are listed in each fake
//   fail / sleep / hang / crash           the common directives of fake_script.h (the core every
//                                         scripted fake shares: reading, rules, call log); `fail`
//                                         codes are named from the fake's table without the
//                                         library's prefix, or numbers
//
// This file is only the key/value device format of these fakes on top of that core.
#ifndef DEVPLACE_TESTS_FAKES_ACCEL_FAKE_SCRIPT_H_
#define DEVPLACE_TESTS_FAKES_ACCEL_FAKE_SCRIPT_H_

#include <map>
#include <string>
#include <vector>

#include "tests/fakes/fake_script.h"

namespace fake {

struct Script {
  std::string driver_version;
  std::vector<std::map<std::string, std::string>> devices;  // facts by key
  std::vector<Rule> rules;

  // The fact `key` of device `i`, or "" when absent.
  std::string Fact(size_t i, const std::string& key) const;
  bool Has(size_t i, const std::string& key) const;
};

// What a fake tells the core about its library.
struct Library {
  const char* config_env;  // e.g. "FAKE_HLML_CONFIG"
  const char* log_env;     // e.g. "FAKE_HLML_LOG"
  const std::map<std::string, long long>* codes;  // code names for `fail`
};

// Loads a new script from library.config_env (kept alive for the process, so a pointer handed out
// earlier stays valid); null with the reason on stderr when it cannot.
const Script* Load(const Library& library);
// The script of the last successful Load, or null.
const Script* Current();
// Logs the call and applies the script's directives for it: the scripted code (0 when none),
// after any sleeps; never returns for `hang`; crashes for `crash`.
int Apply(const Library& library, const Script* script, const char* function, const std::string& target);
// Logs the call only.
void Log(const Library& library, const char* function, const std::string& target);
// The library's initialisation call `function`: loads the script (Load) and applies its directives
// for the call (Apply, target "-"); `unusable` (the call logged) when the script cannot be loaded.
int Init(const Library& library, const char* function, int unusable);

}  // namespace fake

#endif  // DEVPLACE_TESTS_FAKES_ACCEL_FAKE_SCRIPT_H_
