#include "server/probe/probe_flags.h"

#include "server/common/vendor_library_flags.h"

namespace devplace::probe {

ProbeOptions ProbeOptionsFromFlags(absl::Duration probe_timeout) {
  ProbeOptions options;
  static_cast<VendorLibraryPaths&>(options) = VendorLibraryPathsFromFlags();
  options.vendor_timeout = absl::ToChronoMilliseconds(probe_timeout);
  return options;
}

}  // namespace devplace::probe
