// A vendor management library opened with dlopen, for the vendor probers that have no
// build-time dependency on the vendor (AMD SMI, Level Zero, ...): opening, telling "not installed"
// (the prober is skipped) from "cannot be loaded" (an error), and looking up the entry points,
// required and optional.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_LIBRARY_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_LIBRARY_H_

#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace devplace::probe {

class VendorLibrary {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL); `path` is a soname searched as dlopen does, or a path.
  explicit VendorLibrary(std::string path) : path_(std::move(path)) {
    dlerror();
    handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* error = dlerror();
      const std::string why = error != nullptr ? error : "dlopen failed";
      not_found_ = absl::StrContains(why, "No such file or directory");
      error_ = absl::StrCat(path_, not_found_ ? " not found (" : " cannot be loaded (", why, ")");
    }
  }
  ~VendorLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  VendorLibrary(const VendorLibrary&) = delete;
  VendorLibrary& operator=(const VendorLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  // The library is not installed (dlopen: no such file): the prober is skipped.
  bool not_found() const { return not_found_; }
  // Why dlopen failed: "<path> not found (...)" or "<path> cannot be loaded (...)".
  const std::string& error() const { return error_; }

  // Looks up `symbol` into `fn`; a missing one is recorded as required or optional.
  template <typename Fn>
  void Require(const char* symbol, Fn& fn) {
    if (!Find(symbol, fn)) missing_required_.emplace_back(symbol);
  }
  template <typename Fn>
  void Optional(const char* symbol, Fn& fn) {
    if (!Find(symbol, fn)) missing_optional_.emplace_back(symbol);
  }
  // "<path> lacks a, b (<what>)" when a required symbol is missing, else "".
  std::string MissingRequired(const std::string& what) const {
    if (missing_required_.empty()) return "";
    return absl::StrCat(path_, " lacks ", absl::StrJoin(missing_required_, ", "), " (", what, ")");
  }
  // "library lacks a, b" when an optional symbol is missing, else "".
  std::string MissingOptional() const {
    if (missing_optional_.empty()) return "";
    return absl::StrCat("library lacks ", absl::StrJoin(missing_optional_, ", "));
  }

 private:
  template <typename Fn>
  bool Find(const char* symbol, Fn& fn) {
    fn = handle_ == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(handle_, symbol));
    return fn != nullptr;
  }

  std::string path_;
  void* handle_ = nullptr;
  bool not_found_ = false;
  std::string error_;
  std::vector<std::string> missing_required_, missing_optional_;
};

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_VENDOR_LIBRARY_H_
