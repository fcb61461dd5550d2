// LibraryStatus (server/probe/vendor_libs/library_status.h), the one place where NVML's, AMD SMI's,
// Level Zero's and the accelerator libraries' status codes become a lost, faulty or refused device,
// a note or a problem: each meaning, each wording choice, and the calls it announces or skips.
// The probers' own tests (nvml_test, amdsmi_test, level_zero_test, accel_library_test,
// rocm_smi_test) hold the same wording through the fakes and the goldens.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/vendor_libs/library_status.h"

namespace devplace::testing {
namespace {

using probe::CallResult;
using probe::DeviceFindings;
using probe::LibraryErrors;
using probe::LibraryStatus;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A library whose code N means CallResult N (kOk = 0, ... kOther = 5).
std::string CodeName(int code) { return "CODE_" + std::to_string(code); }
CallResult Classify(int code) { return static_cast<CallResult>(code); }
constexpr int kOk = 0, kNotSupported = 1, kLost = 2, kFault = 3, kNoPermission = 4, kOther = 5;

constexpr LibraryErrors kWithLibrary = {"Vendor", CodeName, Classify};
constexpr LibraryErrors kWithoutLibrary = {"Vendor", CodeName, Classify, "Vendor GPU", false};

// One session's findings.
struct Session {
  explicit Session(const LibraryErrors& errors) : status(errors, call, notes, problems) {}
  probe::VendorCall call;
  std::vector<std::string> notes, problems;
  LibraryStatus status;
};

// One device record, as a prober's own struct holds it.
struct Device {
  int index = 3;
  std::string bus_id, lost, no_permission, fault;
  DeviceFindings Findings(bool on_device) {
    return {index, bus_id, lost, on_device ? &no_permission : nullptr, on_device ? &fault : nullptr};
  }
};

TEST(LibraryStatus, SystemCallsSucceedSayNothingWhenUnsupportedAndElseAreProblems) {
  Session s(kWithLibrary);
  EXPECT_TRUE(s.status.System("vendor_init", [] { return kOk; }));
  EXPECT_EQ(s.call.Describe(), "vendor_init");
  EXPECT_FALSE(s.status.System("vendor_count", [] { return kNotSupported; }));
  EXPECT_FALSE(s.status.SystemResult("vendor_count", kOther));
  EXPECT_FALSE(s.status.SystemResult("vendor_count", kLost));  // no device to lose: a problem
  EXPECT_THAT(s.problems, ElementsAre("Vendor vendor_count: CODE_5", "Vendor vendor_count: CODE_2"));
  Session bare(kWithoutLibrary);
  bare.status.SystemResult("vendor_count", kOther);
  EXPECT_THAT(bare.problems, ElementsAre("vendor_count: CODE_5"));
  EXPECT_THAT(s.notes, IsEmpty());
}

TEST(LibraryStatus, ALostDeviceGetsItsReasonAndNoFurtherCall) {
  Session s(kWithoutLibrary);
  Device d;
  EXPECT_FALSE(s.status.Device(d.Findings(true), "vendor_memory", [] { return kLost; }));
  EXPECT_EQ(d.lost, "Vendor vendor_memory: CODE_2");
  EXPECT_EQ(s.call.Describe(), "vendor_memory (device 3)");
  bool called = false;
  EXPECT_FALSE(s.status.Device(d.Findings(true), "vendor_name", [&] {
    called = true;
    return kOk;
  }));
  EXPECT_FALSE(called);
  EXPECT_EQ(s.call.Describe(), "vendor_memory (device 3)");  // the skipped call is not announced
  EXPECT_THAT(s.problems, IsEmpty());
  EXPECT_THAT(s.notes, IsEmpty());
}

TEST(LibraryStatus, ARefusalStaysOnTheDeviceOrIsANote) {
  Session s(kWithoutLibrary);
  Device kept;
  kept.bus_id = "0000:63:00.0";
  s.status.DeviceResult(kept.Findings(true), "vendor_name", kNoPermission);
  s.status.DeviceResult(kept.Findings(true), "vendor_uuid", kNoPermission);
  EXPECT_EQ(kept.no_permission, "Vendor vendor_name: CODE_4");  // the first refused call
  Device noted;
  s.status.DeviceResult(noted.Findings(false), "vendor_bus_id", kNoPermission);
  EXPECT_THAT(s.notes, ElementsAre("Vendor GPU 3: vendor_bus_id: CODE_4"));  // no bus id yet: its index
  EXPECT_EQ(noted.no_permission, "");
  EXPECT_THAT(s.problems, IsEmpty());
}

TEST(LibraryStatus, AFaultStaysOnTheDeviceWhereTheProberKeepsOneElseIsAProblem) {
  Session s(kWithLibrary);
  Device d;
  d.bus_id = "0000:33:00.0";
  EXPECT_FALSE(s.status.DeviceResult(d.Findings(true), "vendor_health", kFault));
  EXPECT_EQ(d.fault, "Vendor vendor_health: CODE_3");
  Device without;
  EXPECT_FALSE(s.status.DeviceResult(without.Findings(false), "vendor_health", kFault));
  EXPECT_THAT(s.problems, ElementsAre("device 3: Vendor vendor_health: CODE_3"));
}

TEST(LibraryStatus, OtherCodesAreProblemsNamingTheDevice) {
  Session with(kWithLibrary), without(kWithoutLibrary);
  Device d;
  d.bus_id = "0000:83:00.0";
  EXPECT_TRUE(with.status.DeviceResult(d.Findings(true), "vendor_memory", kOk));
  EXPECT_FALSE(with.status.DeviceResult(d.Findings(true), "vendor_memory", kNotSupported));
  EXPECT_FALSE(with.status.DeviceResult(d.Findings(true), "vendor_memory", kOther));
  EXPECT_FALSE(without.status.DeviceResult(d.Findings(true), "vendor_memory", kOther));
  EXPECT_THAT(with.problems, ElementsAre("0000:83:00.0: Vendor vendor_memory: CODE_5"));
  EXPECT_THAT(without.problems, ElementsAre("0000:83:00.0: vendor_memory: CODE_5"));
  EXPECT_EQ(d.lost, "");
}

TEST(LibraryStatus, NamedCodesAndTheirFallback) {
  static constexpr std::pair<int, const char*> kNames[] = {{0, "V_SUCCESS"}, {15, "V_ERROR_LOST"}};
  EXPECT_EQ(probe::NamedCode(kNames, "Vendor", 15), "V_ERROR_LOST (15)");
  EXPECT_EQ(probe::NamedCode(kNames, "Vendor", -7), "Vendor error -7");
}

}  // namespace
}  // namespace devplace::testing
