#include "server/probe/vendor_libs/vendor_prober.h"

#include "absl/strings/str_cat.h"
#include "server/probe/vendor_libs/vendor_process.h"

namespace devplace::probe {

void VendorCall::Enter(const char* call, int device) {
  device_.store(device, std::memory_order_relaxed);
  size_t i = 0;
  for (; call != nullptr && call[i] != '\0' && i + 1 < kMaxName; ++i) name_[i].store(call[i], std::memory_order_relaxed);
  name_[i].store('\0', std::memory_order_release);
}

std::string VendorCall::Describe() const {
  std::string call;
  for (size_t i = 0; i < kMaxName; ++i) {
    const char c = name_[i].load(std::memory_order_acquire);
    if (c == '\0') break;
    call.push_back(c);
  }
  if (call.empty()) return "no call yet";
  const int device = device_.load(std::memory_order_relaxed);
  return device < 0 ? call : absl::StrCat(call, " (device ", device, ")");
}

std::vector<VendorProber> VendorProbers(const ProbeOptions& options) {
  using Factory = VendorProber (*)(std::string library, const ProbeOptions& options);
  static constexpr Factory kFactories[] = {
#define DEVPLACE_PROBER_FACTORY(name, ...) &prober_factory::name,
      DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_PROBER_FACTORY)
#undef DEVPLACE_PROBER_FACTORY
  };
  static_assert(sizeof(kFactories) / sizeof(kFactories[0]) == kVendorLibraryCount);
  std::vector<VendorProber> probers;
  for (size_t i = 0; i < kVendorLibraryCount; ++i) {
    if (options[i].empty()) continue;
    if (options.usage_only && *kVendorLibraries[i].memory_source == '\0') continue;  // e.g. libcuda's numbering
    probers.push_back(kFactories[i](options[i], options));
  }
  return probers;
}

void RunVendorProbers(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout, ProbeRun& run,
                      std::chrono::steady_clock::time_point ends_by) {
  RunVendorProbersIsolated(probers, timeout, run, ends_by);
}

void RunVendorProber(const VendorProber& prober, std::chrono::milliseconds timeout, ProbeRun& run) {
  RunVendorProbers({prober}, timeout, run);
}

}  // namespace devplace::probe
