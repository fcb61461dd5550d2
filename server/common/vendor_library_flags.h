// The --<name>_library flag of every registered vendor library (vendor_libraries.h), defined once
// (vendor_library_flags.cc) for the three binaries that take them: devplace-probe, `devplace
// probe` and devplaced (which passes them on to its probe child). A binary that links this gets
// the flags; each lists them in its --help: devplace-probe and devplaced by mapping
// VendorLibraryFlagsFile() to their own file in absl's usage config, the CLI by naming
// kVendorLibraries' flags among `probe`'s.
#ifndef DEVPLACE_SERVER_COMMON_VENDOR_LIBRARY_FLAGS_H_
#define DEVPLACE_SERVER_COMMON_VENDOR_LIBRARY_FLAGS_H_

#include "absl/strings/string_view.h"
#include "server/common/vendor_libraries.h"

namespace devplace {

// Every library's path as the parsed command line gives it (its default when the flag is absent).
VendorLibraryPaths VendorLibraryPathsFromFlags();

// The file that defines the flags, as absl records it (CommandLineFlag::Filename() before a
// FlagsUsageConfig::normalize_filename).
absl::string_view VendorLibraryFlagsFile();

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_VENDOR_LIBRARY_FLAGS_H_
