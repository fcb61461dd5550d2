#include "server/common/vendor_library_flags.h"

#include <string>

#include "absl/flags/flag.h"

// --nvml_library, --cuda_library, ...: each library's default soname, and its description with
// what every library flag means.
#define DEVPLACE_VENDOR_LIBRARY_FLAG(name, library, memory_source, description)                      \
  ABSL_FLAG(std::string, name##_library, library,                                                  \
            description ". A soname (found as dlopen finds it) or a path; empty: not read; not found: " \
                        "the " #name " prober is reported skipped");
DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_VENDOR_LIBRARY_FLAG)
#undef DEVPLACE_VENDOR_LIBRARY_FLAG

namespace devplace {

VendorLibraryPaths VendorLibraryPathsFromFlags() {
  VendorLibraryPaths paths;
#define DEVPLACE_VENDOR_LIBRARY_FROM_FLAG(name, ...) paths.name##_library = absl::GetFlag(FLAGS_##name##_library);
  DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_VENDOR_LIBRARY_FROM_FLAG)
#undef DEVPLACE_VENDOR_LIBRARY_FROM_FLAG
  return paths;
}

absl::string_view VendorLibraryFlagsFile() { return __FILE__; }

}  // namespace devplace
