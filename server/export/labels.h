// Node labels for cluster schedulers: a pure function of an Inventory, shared by `devplace labels`
// (offline or from the daemon) and devplaced's Node Feature Discovery feature file
// (--nfd_features_file). protobuf and absl only, no gRPC, no I/O.
//
// Namespace: every key is "devplace.feature.node.kubernetes.io/<name>". NFD accepts
// `*.feature.node.kubernetes.io` prefixes by default (the rest of kubernetes.io is denied), so no
// extra nfd-master configuration is needed.
//
// Names (<row> is the row name with '/' replaced by '-': cuda-nvidia, cuda-amd, neuron, tpu, xpu,
// mps, hpu, npu, mlu, musa). For every row with hardware present (Inventory.backends, cpu aside):
//   <row>.present        "true"
//   <row>.state          ready | driver_not_loaded | no_device_nodes | unusable
//   <row>.count          devices present (PCI functions), e.g. "2"
//   <row>.usable         devices a job can use now (Device.usable), e.g. "1"
//   <row>.healthy        devices whose health is OK (Device.health: not DEGRADED, FAULT or LOST;
//                        docs/PROBE.md "Device health"), e.g. "2"
//   <row>.product        the devices' name, sanitised (see SanitizeLabelValue); "mixed" when the
//                        named devices' names differ, or an unnamed device has a PCI id no named
//                        device has; omitted when no device is named
//   <row>.memory         per-device memory in MiB (floor): the MINIMUM over the row's devices, so
//                        a nodeAffinity `Gt` on it holds for every device; omitted when any
//                        device's memory is unknown (e.g. no vendor library read)
//   <row>.memory.source  the vendor library the memory figures came from (Device.attributes
//                        "memory_source": a registered library's, server/common/
//                        vendor_libraries.h, or neuron_sysfs); only with <row>.memory and
//                        when one library gave every device's figure
//   <row>.driver         the row's driver version, sanitised; omitted when unknown
//   <row>.driver.major, <row>.driver.minor
//                        leading "MAJOR.MINOR" numbers of the driver version (a leading "v" is
//                        skipped); omitted when it does not start with them. For in-tree drivers
//                        the driver version is the kernel release (Backend.driver_version)
//   <row>.device-type    PyTorch device type, e.g. "cuda"
//   <row>.package        the PyTorch package for the row, e.g. "torch", "torch-npu"
// NVIDIA (cuda-nvidia) only:
//   cuda-nvidia.cuda.driver.major, cuda-nvidia.cuda.driver.minor
//                        newest CUDA version the driver supports (NVML); omitted without NVML
//   cuda-nvidia.mig.capable, cuda-nvidia.mig.enabled
//                        "true"/"false": capable when NVML reported a MIG mode for some device or
//                        MIG instances exist; enabled when a device's mode is "enabled" or MIG
//                        instances exist. Omitted when neither is known (no NVML, no instances).
// Host:
//   cpu.arch             e.g. "x86_64", "aarch64"
//   cpu.capability       torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, NO-AVX (sanitised
//                        from "NO AVX"), SVE256, DEFAULT; omitted when unknown
//   torch.version        the daemon's libtorch version, sanitised ("2.1.0+cu121" -> "2.1.0-cu121");
//                        omitted when devplace-torch-probe did not report
//
// Every key and value satisfies Kubernetes' label syntax (names <= 63 characters of
// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, the prefix a DNS subdomain; values the same or empty).
#ifndef DEVPLACE_SERVER_EXPORT_LABELS_H_
#define DEVPLACE_SERVER_EXPORT_LABELS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::labels {

// The label namespace (key prefix, with its '/').
inline constexpr absl::string_view kLabelPrefix = "devplace.feature.node.kubernetes.io/";

using Label = std::pair<std::string, std::string>;  // full key (with prefix), value

// The node labels of `inventory`, sorted by key, keys unique.
std::vector<Label> NodeLabels(const v1::Inventory& inventory);

// A Kubernetes label value from arbitrary text: each run of characters outside [A-Za-z0-9_.-]
// (spaces, '/', '+', any non-ASCII byte, ...) becomes one '-'; then leading and trailing
// characters that are not alphanumeric are removed; then the text is cut to 63 characters (and
// trailing non-alphanumerics removed again). May return "" (a valid, empty value) when nothing
// alphanumeric is left.
std::string SanitizeLabelValue(absl::string_view text);

// The NFD local feature file (features.d) for `inventory`: a first line
// "# +expiry-time=<RFC 3339 UTC, seconds>" (NFD ignores the labels after `expiry`), a comment
// naming the inventory revision, then one "key=value" line per label, each ending in '\n'.
std::string FeatureFileText(const v1::Inventory& inventory, absl::Time expiry);

}  // namespace devplace::labels

#endif  // DEVPLACE_SERVER_EXPORT_LABELS_H_
