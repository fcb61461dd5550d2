#include "server/probe/vendor_libs/nvml_xid_watch.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/common/pci_bus_id.h"
#include "server/common/xid_lines.h"
#include "server/probe/vendor_libs/nvml_api.h"
#include "server/probe/vendor_libs/nvml_prober.h"

namespace devplace::probe {
namespace {

// The calls the watcher makes; all are needed.
struct EventCalls {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) by_index = nullptr;
  decltype(&nvmlDeviceGetPciInfo_v3) pci_info = nullptr;
  decltype(&nvmlEventSetCreate) set_create = nullptr;
  decltype(&nvmlDeviceGetSupportedEventTypes) supported = nullptr;
  decltype(&nvmlDeviceRegisterEvents) register_events = nullptr;
  decltype(&nvmlEventSetWait_v2) wait = nullptr;
  decltype(&nvmlEventSetFree) set_free = nullptr;
};

// Looks every call up; the names of those missing.
std::vector<std::string> LookUp(void* library, EventCalls& calls) {
  std::vector<std::string> missing;
  const auto look_up = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
    if (fn == nullptr) missing.emplace_back(name);
  };
  look_up("nvmlInit_v2", calls.init);
  look_up("nvmlDeviceGetCount_v2", calls.count);
  look_up("nvmlDeviceGetHandleByIndex_v2", calls.by_index);
  look_up("nvmlDeviceGetPciInfo_v3", calls.pci_info);
  look_up("nvmlEventSetCreate", calls.set_create);
  look_up("nvmlDeviceGetSupportedEventTypes", calls.supported);
  look_up("nvmlDeviceRegisterEvents", calls.register_events);
  look_up("nvmlEventSetWait_v2", calls.wait);
  look_up("nvmlEventSetFree", calls.set_free);
  return missing;
}

class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  bool Line(const XidLine& line) {
    const std::string text = FormatXidLine(line);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  int Say(XidLine::Kind kind, std::string text, int exit_status) {
    XidLine line;
    line.kind = kind;
    line.text = std::move(text);
    return Line(line) ? exit_status : 1;
  }

 private:
  int fd_;
};

// The canonical bus id of a GPU handle, or "" when NVML cannot tell.
std::string BusId(const EventCalls& calls, nvmlDevice_t device) {
  nvmlPciInfo_t pci = {};
  if (calls.pci_info(device, &pci) != NVML_SUCCESS) return "";
  pci.busId[sizeof(pci.busId) - 1] = '\0';
  absl::StatusOr<std::string> bus = NormalizePciBusId(pci.busId);
  return bus.ok() ? *bus : "";
}

// Registers the XID event on every GPU that offers it; fills `bus_ids` (by handle) and says why
// for each GPU left out. Returns how many GPUs there are.
unsigned int Register(const EventCalls& calls, nvmlEventSet_t set, std::map<nvmlDevice_t, std::string>& bus_ids,
                      std::vector<std::string>& left_out) {
  unsigned int count = 0;
  if (const nvmlReturn_t r = calls.count(&count); r != NVML_SUCCESS) {
    left_out.push_back(absl::StrCat("nvmlDeviceGetCount_v2: ", NvmlReturnName(r)));
    return 0;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlReturn_t r = calls.by_index(i, &device);
    const std::string bus = r == NVML_SUCCESS ? BusId(calls, device) : "";
    const std::string who = absl::StrCat("GPU ", i, bus.empty() ? "" : " ", bus);
    if (r != NVML_SUCCESS || bus.empty()) {
      left_out.push_back(absl::StrCat(who, ": ", r != NVML_SUCCESS ? NvmlReturnName(r) : "no PCI bus id"));
      continue;
    }
    unsigned long long types = 0;
    r = calls.supported(device, &types);
    if (r == NVML_SUCCESS && (types & nvmlEventTypeXidCriticalError) == 0) r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) r = calls.register_events(device, nvmlEventTypeXidCriticalError, set);
    if (r != NVML_SUCCESS) {
      left_out.push_back(absl::StrCat(who, ": ", NvmlReturnName(r)));
      continue;
    }
    bus_ids[device] = bus;
  }
  return count;
}

}  // namespace

int WatchXidEvents(const std::string& library, int out_fd) {
  Writer out(out_fd);
  const pid_t parent = getppid();
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return out.Say(XidLine::Kind::kUnknown, absl::StrCat(library, " cannot be loaded: ", error ? error : "?"), 0);
  }
  EventCalls calls;
  if (const std::vector<std::string> missing = LookUp(handle, calls); !missing.empty()) {
    return out.Say(XidLine::Kind::kUnknown, absl::StrCat("the library lacks ", absl::StrJoin(missing, ", ")), 0);
  }
  if (const nvmlReturn_t r = calls.init(); r != NVML_SUCCESS) {
    return out.Say(XidLine::Kind::kUnknown, absl::StrCat("nvmlInit_v2: ", NvmlReturnName(r)), 0);
  }
  nvmlEventSet_t set = nullptr;
  if (const nvmlReturn_t r = calls.set_create(&set); r != NVML_SUCCESS) {
    return out.Say(XidLine::Kind::kUnknown, absl::StrCat("nvmlEventSetCreate: ", NvmlReturnName(r)), 0);
  }
  std::map<nvmlDevice_t, std::string> bus_ids;
  std::vector<std::string> left_out;
  const unsigned int total = Register(calls, set, bus_ids, left_out);
  if (bus_ids.empty()) {
    calls.set_free(set);
    return out.Say(XidLine::Kind::kUnknown,
                   absl::StrCat("no GPU offers the XID event",
                                left_out.empty() ? "" : absl::StrCat(" (", absl::StrJoin(left_out, "; "), ")")),
                   0);
  }
  XidLine watching;
  watching.kind = XidLine::Kind::kWatching;
  watching.gpus = static_cast<int>(bus_ids.size());
  watching.gpus_total = static_cast<int>(total);
  if (!out.Line(watching)) return 1;
  while (getppid() == parent) {
    nvmlEventData_t data = {};
    const nvmlReturn_t r = calls.wait(set, &data, kXidWaitMs);
    if (r == NVML_ERROR_TIMEOUT) continue;
    if (r != NVML_SUCCESS) {
      calls.set_free(set);
      return out.Say(XidLine::Kind::kError, absl::StrCat("nvmlEventSetWait_v2: ", NvmlReturnName(r)), 1);
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    XidLine event;
    event.kind = XidLine::Kind::kXid;
    const auto known = bus_ids.find(data.device);
    event.bus_id = known != bus_ids.end() ? known->second : BusId(calls, data.device);
    event.xid = data.eventData;
    event.unix_seconds = absl::ToUnixSeconds(absl::Now());
    if (event.bus_id.empty()) continue;  // a device NVML cannot place: nothing to mark
    if (!out.Line(event)) return 1;
  }
  calls.set_free(set);
  return 0;
}

}  // namespace devplace::probe
