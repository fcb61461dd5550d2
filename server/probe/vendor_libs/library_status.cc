#include "server/probe/vendor_libs/library_status.h"

#include "absl/strings/str_cat.h"

namespace devplace::probe {

std::string NamedCode(absl::Span<const std::pair<int, const char*>> names, const char* library, int code) {
  for (const auto& [value, name] : names) {
    if (value == code) return absl::StrCat(name, " (", code, ")");
  }
  return absl::StrCat(library, " error ", code);
}

std::string LibraryStatus::Describe(const char* name, int code) const {
  return absl::StrCat(errors_.library, " ", name, ": ", errors_.name(code));
}

std::string LibraryStatus::Finding(const DeviceFindings& device, const char* name, int code) const {
  const std::string who =
      device.bus_id.empty() ? absl::StrCat(errors_.device_word, " ", device.index) : device.bus_id;
  return absl::StrCat(who, ": ",
                      errors_.library_in_problems ? Describe(name, code)
                                                  : absl::StrCat(name, ": ", errors_.name(code)));
}

bool LibraryStatus::SystemResult(const char* name, int code) {
  switch (errors_.classify(code)) {
    case CallResult::kOk:
      return true;
    case CallResult::kNotSupported:
      return false;
    default:
      problems_.push_back(errors_.library_in_problems ? Describe(name, code)
                                                      : absl::StrCat(name, ": ", errors_.name(code)));
      return false;
  }
}

bool LibraryStatus::DeviceResult(const DeviceFindings& device, const char* name, int code) {
  switch (errors_.classify(code)) {
    case CallResult::kOk:
      return true;
    case CallResult::kNotSupported:
      return false;
    case CallResult::kLost:
      device.lost = Describe(name, code);
      return false;
    case CallResult::kFault:
      if (device.fault == nullptr) break;
      if (device.fault->empty()) *device.fault = Describe(name, code);
      return false;
    case CallResult::kNoPermission:
      if (device.no_permission == nullptr) {
        notes_.push_back(Finding(device, name, code));
      } else if (device.no_permission->empty()) {
        *device.no_permission = Describe(name, code);
      }
      return false;
    case CallResult::kOther:
      break;
  }
  problems_.push_back(Finding(device, name, code));
  return false;
}

}  // namespace devplace::probe
