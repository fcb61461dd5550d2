// The dynamic symbols a shared library defines, as nm lists them: for the tests that hold a fake
// vendor library's exports to the real library's (nvidia_real_test.cc, rocm_smi_test.cc).
#ifndef DEVPLACE_TESTS_PROBE_DEFINED_SYMBOLS_H_
#define DEVPLACE_TESTS_PROBE_DEFINED_SYMBOLS_H_

#include <map>
#include <string>

namespace devplace::testing {

// name -> "T" / "T@@VER" / ... as `nm -D --defined-only --with-symbol-versions` lists them:
// "<type>[@version]" for every defined dynamic symbol of the shared library `library` (a failure
// of the running test when nm fails).
std::map<std::string, std::string> DefinedSymbols(const std::string& library);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PROBE_DEFINED_SYMBOLS_H_
