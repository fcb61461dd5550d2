// The flags that turn every registered vendor library off, built from the registry
// (server/common/vendor_libraries.h) rather than written out, for the tests that run
// devplace-probe, `devplace probe` or devplaced on a fixture host with no vendor prober (only the
// sysfs/procfs probers): a library added to the registry is off in them by itself. Header-only:
// the registry is constexpr data, so any test binary may use it without linking the server.
#ifndef DEVPLACE_TESTS_COMMON_NO_VENDOR_LIBRARIES_H_
#define DEVPLACE_TESTS_COMMON_NO_VENDOR_LIBRARIES_H_

#include <string>
#include <vector>

#include "server/common/vendor_libraries.h"

namespace devplace::testing {

// {"--nvml_library=", "--cuda_library=", ...}: every registered library's flag, empty, in the
// registry's order.
inline std::vector<std::string> NoVendorLibraryFlagList() {
  std::vector<std::string> flags;
  for (const VendorLibrary& library : kVendorLibraries) flags.push_back(std::string("--") + library.flag + "=");
  return flags;
}

// The same as one string of shell words, each after a space: " --nvml_library= --cuda_library= ...".
inline std::string NoVendorLibraryFlags() {
  std::string flags;
  for (const std::string& flag : NoVendorLibraryFlagList()) flags += " " + flag;
  return flags;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_NO_VENDOR_LIBRARIES_H_
