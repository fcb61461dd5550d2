// How a vendor library's status codes become what a vendor prober reports, for every prober that
// reads devices one call at a time (NVML, AMD SMI, Level Zero, and the libraries of
// accel_library.h): whether a call's answer is success, a field the device does not support (left
// unset, nothing said), a lost device (its health becomes HEALTH_LOST and no later call is made on
// it), a faulty one, one this process may not use, or an unexpected error (the report becomes
// PROBE_STATUS_ERROR, what was read is merged anyway), and how each is worded. Each library says
// which of its codes mean what (LibraryErrors::classify, from its vendor header's documentation);
// this file decides, once, what each meaning does.
//
// Wording (the goldens in tests/golden/ hold it):
//   a lost or faulty device's reason, a refusal kept on the device: "<library> <call>: <code>",
//     e.g. "NVML nvmlDeviceGetMemoryInfo: NVML_ERROR_GPU_IS_LOST (15)";
//   a problem, or a refusal noted: "<who>: <call>: <code>", or "<who>: <library> <call>: <code>"
//     with LibraryErrors::library_in_problems; <who> is the device's bus id, or
//     "<device_word> <index>" while its bus id is not known;
//   a system-wide call's problem: "<call>: <code>", or "<library> <call>: <code>".
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_STATUS_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_STATUS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// What a library's status code means for the call that returned it.
enum class CallResult {
  kOk,            // the call succeeded
  kNotSupported,  // the device or library does not have it: the field stays unset, nothing is said
  kLost,          // the device is gone (fell off the bus, reset): HEALTH_LOST, no later call on it
  kFault,         // the library says the device is faulty: HEALTH_FAULT
  kNoPermission,  // this process may not use the device
  kOther,         // anything else: a problem (PROBE_STATUS_ERROR)
};

// One library's status codes and how its findings are worded.
struct LibraryErrors {
  const char* library;               // "NVML": starts a lost, faulty or refused device's reason
  std::string (*name)(int code);     // "NVML_ERROR_GPU_IS_LOST (15)"
  CallResult (*classify)(int code);  // what each code means
  // Names a device before its bus id is known: "<device_word> <index>", e.g. "AMD SMI GPU 3".
  const char* device_word = "device";
  // Whether a problem names the library before the call ("0000:33:00.0: HLML hlml_x: ...") or not
  // ("0000:01:00.0: nvmlDeviceGetName: ...").
  bool library_in_problems = true;
};

// The device a per-device call was made on, as the prober's own record holds it: where a failed
// call's finding goes.
struct DeviceFindings {
  int index;                  // the library's device index; -1 when the device was found another way
  const std::string& bus_id;  // canonical "dddd:bb:dd.f"; "" while not known
  std::string& lost;          // kLost: the reason; once set, later calls on the device are not made
  // kNoPermission: the first refused call, which the merge makes the device's inaccessible reason;
  // null: a refusal is a note instead (the device stays usable).
  std::string* no_permission = nullptr;
  // kFault: the first faulty answer; null: a kFault code is a problem.
  std::string* fault = nullptr;
};

// Makes a reader's library calls and files their results: each call is announced on the
// VendorCall first (so a timeout or crash names it), then its code is classified and filed on the
// device, in `notes` or in `problems`. One per library session, on the prober's child thread.
class LibraryStatus {
 public:
  // `notes`: findings that are not failures; `problems`: unexpected errors (the snapshot's).
  LibraryStatus(const LibraryErrors& errors, VendorCall& call, std::vector<std::string>& notes,
                std::vector<std::string>& problems)
      : errors_(errors), call_(call), notes_(notes), problems_(problems) {}

  // A system-wide call: true on success; kNotSupported false, nothing said; anything else a
  // problem.
  template <typename Fn>
  bool System(const char* name, Fn fn) {
    call_.Enter(name);
    return SystemResult(name, fn());
  }
  // A per-device call, not made once the device is lost: true on success.
  template <typename Fn>
  bool Device(const DeviceFindings& device, const char* name, Fn fn) {
    if (!device.lost.empty()) return false;
    call_.Enter(name, device.index);
    return DeviceResult(device, name, fn());
  }
  // The same, for a call the reader made itself (announced on call()).
  bool SystemResult(const char* name, int code);
  bool DeviceResult(const DeviceFindings& device, const char* name, int code);

  // "<library> <call>: <code>".
  std::string Describe(const char* name, int code) const;
  // "<who>: [<library> ]<call>: <code>".
  std::string Finding(const DeviceFindings& device, const char* name, int code) const;
  // What `code` means, by the library's table.
  CallResult Classify(int code) const { return errors_.classify(code); }
  // "<name> (<code>)", e.g. "HLML_ERROR_NOT_SUPPORTED (3)".
  std::string CodeName(int code) const { return errors_.name(code); }
  VendorCall& call() { return call_; }

 private:

  const LibraryErrors& errors_;
  VendorCall& call_;
  std::vector<std::string>& notes_;
  std::vector<std::string>& problems_;
};

// "<name> (<code>)" for a code `names` lists (e.g. "HLML_ERROR_AIP_IS_LOST (15)"), else
// "<library> error <code>": a library's LibraryErrors::name.
std::string NamedCode(absl::Span<const std::pair<int, const char*>> names, const char* library, int code);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LIBRARY_STATUS_H_
