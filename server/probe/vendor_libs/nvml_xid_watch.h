// The XID watcher (docs/PROBE.md "XID critical errors"): `devplace-probe --watch_xid` opens its own
// NVML session, registers nvmlEventTypeXidCriticalError on every GPU that offers it
// (nvmlDeviceGetSupportedEventTypes, nvmlDeviceRegisterEvents) and waits on the set with
// nvmlEventSetWait_v2 (1 s at a time), writing one line per event (server/common/xid_lines.h) for
// devplaced, which runs it as a long-lived child (server/inventory/xid_watcher.h) so that a crash
// or a hang inside NVML never reaches the daemon or a probe.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_XID_WATCH_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_XID_WATCH_H_

#include <string>

namespace devplace::probe {

// How long one nvmlEventSetWait_v2 waits; between waits the watcher checks that devplaced (its
// parent) is still there.
inline constexpr unsigned int kXidWaitMs = 1000;

// Watches until the parent goes away (exit 0), the library fails (an "error" line, exit 1) or
// writing to `out_fd` fails (exit 1). Nothing to watch (the library cannot be loaded or lacks an
// event call, nvmlInit_v2 fails, no GPU offers the XID event): an "unknown" line, exit 0. Never
// throws.
int WatchXidEvents(const std::string& library, int out_fd);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_XID_WATCH_H_
