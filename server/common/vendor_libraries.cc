#include "server/common/vendor_libraries.h"

namespace devplace {
namespace {

// VendorLibraryPaths' field of each registered library, in kVendorLibraries' order.
constexpr std::string VendorLibraryPaths::* kFields[] = {
#define DEVPLACE_VENDOR_LIBRARY_FIELD_POINTER(name, ...) &VendorLibraryPaths::name##_library,
    DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_VENDOR_LIBRARY_FIELD_POINTER)
#undef DEVPLACE_VENDOR_LIBRARY_FIELD_POINTER
};
static_assert(sizeof(kFields) / sizeof(kFields[0]) == kVendorLibraryCount);

}  // namespace

VendorLibraryPaths VendorLibraryPaths::Defaults() {
  VendorLibraryPaths paths;
  for (size_t i = 0; i < kVendorLibraryCount; ++i) paths[i] = kVendorLibraries[i].default_library;
  return paths;
}

std::string& VendorLibraryPaths::operator[](size_t index) { return this->*kFields[index]; }
const std::string& VendorLibraryPaths::operator[](size_t index) const { return this->*kFields[index]; }

}  // namespace devplace
