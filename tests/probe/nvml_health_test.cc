// NVML's health counters (server/probe/vendor_libs/nvml_health.h) read from the fake NVML by a
// real dlopen on the nvidia-2x-h100 tree: each rule of docs/PROBE.md "Device health" (NVML), the
// counters' names, values and sources, and that an unreadable counter is unknown, never a fault.
#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/vendor_libs/library_status.h"
#include "server/probe/vendor_libs/nvml_health.h"
#include "server/probe/vendor_libs/nvml_prober.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The device's counter named `name`; a failure (and an empty counter) when it has none.
v1::HealthCounter Counter(const v1::Device& d, const std::string& name) {
  for (const v1::HealthCounter& c : d.health_counters()) {
    if (c.name() == name) return c;
  }
  ADD_FAILURE() << d.pci_bus_id() << " has no counter " << name;
  return {};
}

const v1::ProbeReport& Nvml(const v1::Inventory& inv) {
  static const v1::ProbeReport kNone;
  const v1::ProbeReport* report = FindReport(inv, "nvml");
  EXPECT_NE(report, nullptr);
  return report != nullptr ? *report : kNone;
}

// h100-remap-pending.txt with `extra` directives after it, written to a temp script.
std::string RemapPendingWith(const TempDir& tmp, const std::string& extra) {
  return tmp.Write("nvml.txt", ReadFile(NvmlScript("h100-remap-pending")) + "\n" + extra + "\n");
}

TEST(NvmlHealth, RowsPendingRemapAreAFaultNamingTheCounterAndItsSource) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100-remap-pending");
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  const v1::Device& bad = *FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(bad.health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(bad.usable());
  EXPECT_EQ(bad.health_reason(),
            "remapped_rows.pending 1: rows are pending remapping: the remap takes effect when the GPU is reset "
            "(reset required)");
  const v1::HealthCounter pending = Counter(bad, "remapped_rows.pending");
  EXPECT_EQ(pending.value(), "1");
  EXPECT_EQ(pending.source(), "NVML nvmlDeviceGetRemappedRows");
  EXPECT_EQ(pending.effect(), v1::HEALTH_FAULT);
  EXPECT_EQ(Counter(bad, "remapped_rows.uncorrectable").value(), "1");
  EXPECT_EQ(Counter(bad, "remapped_rows.uncorrectable").effect(), v1::HEALTH_OK);  // a raw count
  // A lifetime uncorrectable error, contained: a raw count.
  const v1::HealthCounter lifetime = Counter(bad, "ecc.errors.uncorrected.aggregate.total");
  EXPECT_EQ(lifetime.value(), "1");
  EXPECT_EQ(lifetime.effect(), v1::HEALTH_OK);
  EXPECT_EQ(lifetime.source(),
            "NVML nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)");
  // H100s do not retire pages: unknown, no change.
  const v1::HealthCounter retired = Counter(bad, "retired_pages.pending");
  EXPECT_EQ(retired.effect(), v1::HEALTH_UNSPECIFIED);
  EXPECT_EQ(retired.rule(), "unknown: NVML_ERROR_NOT_SUPPORTED (3) (this GPU does not offer it)");

  const v1::Device& good = *FindDevice(inv, "0000:18:00.0");
  EXPECT_EQ(good.health(), v1::HEALTH_OK);
  EXPECT_TRUE(good.usable());
  EXPECT_EQ(Counter(good, "ecc.errors.corrected.volatile.total").value(), "2");
  EXPECT_EQ(Counter(good, "clocks_event_reasons.hw_thermal_slowdown").value(), "0");
}

TEST(NvmlHealth, UncorrectableEccSinceTheDriverLoadedIsAFaultAndAThermalSlowdownDegraded) {
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", "h100-uncorrectable-ecc");
  const v1::Device& ecc = *FindDevice(inv, "0000:18:00.0");
  EXPECT_EQ(ecc.health(), v1::HEALTH_FAULT);
  EXPECT_THAT(ecc.health_reason(), HasSubstr("ecc.errors.uncorrected.volatile.total 1: uncorrectable ECC errors "
                                             "since the driver loaded"));
  EXPECT_EQ(Counter(ecc, "ecc.errors.uncorrected.volatile.total").source(),
            "NVML nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)");
  const v1::Device& hot = *FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(hot.health(), v1::HEALTH_DEGRADED);
  EXPECT_TRUE(hot.usable());
  EXPECT_EQ(hot.health_reason(), "clocks_event_reasons.sw_thermal_slowdown 1: active: software thermal slowdown: "
                                 "clocks lowered, the GPU or its memory above its maximum operating temperature");
  EXPECT_EQ(Counter(hot, "clocks_event_reasons.sw_thermal_slowdown").source(),
            "NVML nvmlDeviceGetCurrentClocksEventReasons");
  // Holding the power limit is a note.
  EXPECT_EQ(Counter(hot, "clocks_event_reasons.sw_power_cap").value(), "1");
  EXPECT_EQ(Counter(hot, "clocks_event_reasons.sw_power_cap").effect(), v1::HEALTH_OK);
}

TEST(NvmlHealth, PagesPendingRetirementAreAFault) {
  TempDir tmp;  // as a GPU before Ampere answers (the rule, scripted on the H100 tree)
  const v1::Inventory inv = ProbeHostWithNvml("nvidia-2x-h100", tmp.Write("nvml.txt", ReadFile(NvmlScript("h100")) +
                                                                                        "device 1 retired_pages_pending 1\n"
                                                                                        "device 0 retired_pages_pending 0\n"));
  const v1::Device& pending = *FindDevice(inv, "0000:18:00.0");  // NVML device 1
  EXPECT_EQ(pending.health(), v1::HEALTH_FAULT);
  EXPECT_EQ(pending.health_reason(),
            "retired_pages.pending 1: pages are pending retirement: they are retired when the GPU is reset (reset "
            "required)");
  EXPECT_EQ(Counter(pending, "retired_pages.pending").source(), "NVML nvmlDeviceGetRetiredPagesPendingStatus");
  const v1::Device& none = *FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(none.health(), v1::HEALTH_OK);
  EXPECT_EQ(Counter(none, "retired_pages.pending").value(), "0");
}

// A call that fails: its counters unknown and a note, never a fault; the report stays OK.
TEST(NvmlHealth, ACallThatFailsIsUnknownAndANoteNeverAFault) {
  TempDir tmp;
  const v1::Inventory inv = ProbeHostWithNvml(
      "nvidia-2x-h100", RemapPendingWith(tmp, "fail nvmlDeviceGetRemappedRows 0 UNKNOWN\n"
                                              "fail nvmlDeviceGetTotalEccErrors * TIMEOUT\n"));
  EXPECT_EQ(Nvml(inv).status(), v1::PROBE_STATUS_OK) << Nvml(inv).message();
  EXPECT_THAT(Nvml(inv).message(), HasSubstr("0000:9a:00.0: nvmlDeviceGetRemappedRows: NVML_ERROR_UNKNOWN (999) "
                                             "(its health counters unknown, not a health change)"));
  const v1::Device& gpu = *FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(gpu.health(), v1::HEALTH_OK);
  EXPECT_TRUE(gpu.usable());
  for (const char* name : {"remapped_rows.pending", "remapped_rows.failure", "ecc.errors.uncorrected.volatile.total"}) {
    const v1::HealthCounter c = Counter(gpu, name);
    EXPECT_EQ(c.effect(), v1::HEALTH_UNSPECIFIED) << name;
    EXPECT_THAT(c.rule(), HasSubstr("unknown: NVML_ERROR_")) << name;
  }
  EXPECT_EQ(Counter(gpu, "clocks_event_reasons.hw_slowdown").effect(), v1::HEALTH_OK);  // the rest still read
}

TEST(NvmlHealth, AGpuLostDuringAHealthCallIsLost) {
  TempDir tmp;
  const v1::Inventory inv =
      ProbeHostWithNvml("nvidia-2x-h100", RemapPendingWith(tmp, "fail nvmlDeviceGetRemappedRows 0 GPU_IS_LOST\n"));
  const v1::Device& gpu = *FindDevice(inv, "0000:9a:00.0");
  EXPECT_EQ(gpu.health(), v1::HEALTH_LOST);
  EXPECT_THAT(gpu.health_reason(), HasSubstr("NVML nvmlDeviceGetRemappedRows: NVML_ERROR_GPU_IS_LOST (15)"));
  for (const v1::HealthCounter& c : gpu.health_counters()) {
    EXPECT_THAT(c.name(), Not(HasSubstr("clocks_event_reasons"))) << "no call after the GPU was lost";
  }
}

// A library without the calls (the test binary itself defines none of them): every counter
// unknown, naming the call the library lacks.
TEST(NvmlHealth, ALibraryWithoutTheCallsLeavesEveryCounterUnknown) {
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  probe::NvmlHealthCalls calls;
  std::vector<std::string> missing, notes, problems;
  probe::ResolveNvmlHealthCalls(self, calls, missing);
  EXPECT_THAT(missing, ::testing::ElementsAre("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPagesPendingStatus",
                                              "nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksThrottleReasons"));
  probe::VendorCall call;
  const probe::LibraryErrors errors = {"NVML", probe::NvmlReturnName, nullptr};
  probe::LibraryStatus status(errors, call, notes, problems);
  std::string lost;
  std::vector<v1::HealthCounter> counters;
  probe::ReadNvmlHealth(calls, nullptr, {0, "0000:18:00.0", lost, counters}, status, notes);
  EXPECT_EQ(counters.size(), 14u);
  for (const v1::HealthCounter& c : counters) {
    EXPECT_EQ(c.effect(), v1::HEALTH_UNSPECIFIED) << c.name();
    EXPECT_THAT(c.rule(), HasSubstr("unknown: the library lacks nvmlDeviceGet")) << c.name();
  }
  EXPECT_TRUE(notes.empty());  // the library's missing calls are one note of the prober's
  dlclose(self);
}

}  // namespace
}  // namespace devplace::testing
