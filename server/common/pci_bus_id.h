// The canonical form of a PCI address, shared by the probe (sysfs, vendor libraries) and the
// resolver (addresses a Kubernetes DRA driver reports, rule P-DRA).
#ifndef DEVPLACE_SERVER_COMMON_PCI_BUS_ID_H_
#define DEVPLACE_SERVER_COMMON_PCI_BUS_ID_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace {

// Canonical PCI address "dddd:bb:dd.f", lower-case hex, from any of the forms hosts print:
// sysfs / procfs "0000:9a:00.0", NVML busId "00000000:9A:00.0" (8-digit upper-case domain),
// legacy "0000:9A:00.0", or "9a:00.0" (domain 0). Surrounding whitespace is ignored.
// InvalidArgument for anything else (device > 0x1f, function > 7, non-hex digits, ...).
absl::StatusOr<std::string> NormalizePciBusId(absl::string_view bus_id);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_PCI_BUS_ID_H_
