// The HLML, DCMI, CNDev and MTML probers (server/probe/vendor_libs/accel_library.h) against their fakes
// (tests/fakes/fake_<lib>.cc, loaded with a real dlopen) on the Gaudi, Ascend, Cambricon and Moore
// Threads fixture hosts: merge by bus id, names / UUIDs / memory with their source, lost and
// faulty devices, unsupported and failing calls, a missing library or symbol, a wrong library
// version, slow and never-returning calls, the health counters of the libraries' ECC calls
// (library_health.h), and one golden inventory per case
// (tests/golden/accel/<case>.json; regenerate with DEVPLACE_UPDATE_GOLDENS=1 and review the diff).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One library, its fake and its fixture host.
struct Vendor {
  const char* prober;       // ProbeReport.name, "memory_source"
  const char* config_env;   // FAKE_<LIB>_CONFIG
  const char* log_env;      // FAKE_<LIB>_LOG
  const char* fake;         // the fake library's path
  const char* host;         // tests/fixtures/hosts/<host>
  const char* script;       // tests/fixtures/<prober>/<script>.txt
  v1::Row row;
  std::string probe::ProbeOptions::*library;
  const char* init;         // the library's init function
  const char* not_loaded;   // its "driver not loaded" code name for the fake
  const char* memory_call;  // the call that reads memory
  const char* first_required;  // the first required function the prober looks up
  const char* hardware;
};

const Vendor kVendors[] = {
    {"hlml", "FAKE_HLML_CONFIG", "FAKE_HLML_LOG", DEVPLACE_FAKE_HLML, "hpu-2x-gaudi2", "gaudi2", v1::ROW_HPU,
     &probe::ProbeOptions::hlml_library, "hlml_init", "DRIVER_NOT_LOADED", "hlml_device_get_memory_info", "hlml_init",
     "Gaudi"},
    {"dcmi", "FAKE_DCMI_CONFIG", "FAKE_DCMI_LOG", DEVPLACE_FAKE_DCMI, "npu-2x-910b", "910b", v1::ROW_NPU,
     &probe::ProbeOptions::dcmi_library, "dcmi_init", "NOT_REDAY", "dcmi_get_device_hbm_info", "dcmi_init",
     "Ascend NPU"},
    {"cndev", "FAKE_CNDEV_CONFIG", "FAKE_CNDEV_LOG", DEVPLACE_FAKE_CNDEV, "mlu-2x-mlu370", "mlu370", v1::ROW_MLU,
     &probe::ProbeOptions::cndev_library, "cndevInit", "NO_DRIVER", "cndevGetMemoryUsage", "cndevInit",
     "Cambricon MLU"},
    {"mtml", "FAKE_MTML_CONFIG", "FAKE_MTML_LOG", DEVPLACE_FAKE_MTML, "musa-2x-s4000", "s4000", v1::ROW_MUSA,
     &probe::ProbeOptions::mtml_library, "mtmlLibraryInit", "DRIVER_NOT_LOADED", "mtmlMemoryGetTotal",
     "mtmlLibraryInit", "Moore Threads GPU"},
};

void PrintTo(const Vendor& v, std::ostream* os) { *os << v.prober; }

std::string ScriptPath(const Vendor& v, const std::string& name) {
  return absl::StrCat(DEVPLACE_FIXTURES_DIR, "/", v.prober, "/", name, ".txt");
}

// The inventory of `host` with only `v`'s prober loading `library` under `timeout`, the fake
// answering from `script`; probed_at and durations cleared.
v1::Inventory ProbeWith(const Vendor& v, const std::string& host, const std::string& script,
                        const std::string& library, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  setenv(v.config_env, script.c_str(), 1);
  probe::ProbeOptions options;
  options.nvml_library = "";
  options.*(v.library) = library;
  options.vendor_timeout = timeout;
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(HostDir(host)), options);
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

v1::Inventory ProbeFixture(const Vendor& v) { return ProbeWith(v, v.host, ScriptPath(v, v.script), v.fake); }

// The fixture script with `extra` directives in front (rules apply in file order).
std::string ScriptWith(const Vendor& v, TempDir& tmp, const std::string& extra) {
  return tmp.Write("script.txt", extra + "\n" + ReadFile(ScriptPath(v, v.script)));
}

const v1::ProbeReport& Report(const v1::Inventory& inv, const char* name) {
  const v1::ProbeReport* report = FindReport(inv, name);
  EXPECT_NE(report, nullptr) << name;
  static const v1::ProbeReport* none = new v1::ProbeReport;
  return report != nullptr ? *report : *none;
}

// `inv` without its last probe report equals the file probers' inventory of the host.
void ExpectOnlyTheReportAdded(const v1::Inventory& inv, const std::string& host) {
  v1::Inventory without = inv;
  without.mutable_probe_reports()->RemoveLast();
  EXPECT_EQ(without.SerializeAsString(), ProbeHost(host).SerializeAsString());
}

class AccelLibraryTest : public ::testing::TestWithParam<Vendor> {};

TEST_P(AccelLibraryTest, EveryDeviceGetsNameUuidAndMemoryFromTheLibrary) {
  const Vendor& v = GetParam();
  const v1::Inventory inv = ProbeFixture(v);
  const v1::ProbeReport& report = Report(inv, v.prober);
  EXPECT_EQ(report.status(), v1::PROBE_STATUS_OK) << report.message();
  EXPECT_THAT(report.message(), HasSubstr("2 matched by bus id, 2 with memory"));
  const v1::Backend* row = FindRow(inv, v.row);
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->devices_size(), 2);
  for (const v1::Device& d : row->devices()) {
    SCOPED_TRACE(d.pci_bus_id());
    EXPECT_FALSE(d.name().empty());
    EXPECT_FALSE(d.uuid().empty());
    ASSERT_TRUE(d.has_memory_total_bytes());
    ASSERT_TRUE(d.has_memory_free_bytes());
    EXPECT_LE(d.memory_free_bytes(), d.memory_total_bytes());
    EXPECT_EQ(d.attributes().at("memory_source"), v.prober);
    EXPECT_TRUE(d.usable()) << d.unusable_reason();
  }
  // Without the library the same host has no memory: it came from the library.
  const v1::Inventory without = ProbeHost(v.host);
  for (const v1::Device& d : FindRow(without, v.row)->devices()) EXPECT_FALSE(d.has_memory_total_bytes());
}

TEST_P(AccelLibraryTest, MissingLibraryIsSkippedAndTheRestIntact) {
  const Vendor& v = GetParam();
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, v.script), "/nonexistent/libvendor.so");
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(Report(inv, v.prober).message(),
              AllOf(HasSubstr("/nonexistent/libvendor.so not found ("), HasSubstr("No such file or directory")));
  ExpectOnlyTheReportAdded(inv, v.host);
}

TEST_P(AccelLibraryTest, NotTheLibraryIsAnErrorNamingTheMissingFunctions) {
  const Vendor& v = GetParam();
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, v.script), "libc.so.6");
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(Report(inv, v.prober).message(), StartsWith(absl::StrCat("libc.so.6 lacks ", v.first_required)));
  ExpectOnlyTheReportAdded(inv, v.host);
}

TEST_P(AccelLibraryTest, HostWithoutTheRowDoesNotLoadTheLibrary) {
  const Vendor& v = GetParam();
  TempDir tmp;
  setenv(v.log_env, tmp.File("calls").c_str(), 1);
  const v1::Inventory inv = ProbeWith(v, "cpu-only", ScriptPath(v, v.script), v.fake);
  unsetenv(v.log_env);
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(Report(inv, v.prober).message(), absl::StrCat("no ", v.hardware, " on the PCI bus"));
  EXPECT_EQ(ReadFile(tmp.File("calls")), "");
}

TEST_P(AccelLibraryTest, DriverNotLoadedIsSkippedWithTheReason) {
  const Vendor& v = GetParam();
  TempDir tmp;
  const v1::Inventory inv =
      ProbeWith(v, v.host, ScriptWith(v, tmp, absl::StrCat("fail ", v.init, " - ", v.not_loaded)), v.fake);
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(Report(inv, v.prober).message(), HasSubstr(absl::StrCat(v.init, ": ")));
  ExpectOnlyTheReportAdded(inv, v.host);
}

TEST_P(AccelLibraryTest, UnsupportedMemoryCallLeavesThatMemoryUnset) {
  const Vendor& v = GetParam();
  TempDir tmp;
  const v1::Inventory inv =
      ProbeWith(v, v.host, ScriptWith(v, tmp, absl::StrCat("fail ", v.memory_call, " 0 NOT_SUPPORT",
                                                            v.row == v1::ROW_NPU ? "" : "ED")),
                v.fake);
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_OK) << Report(inv, v.prober).message();
  EXPECT_THAT(Report(inv, v.prober).message(), HasSubstr("2 matched by bus id, 1 with memory"));
  int with_memory = 0;
  for (const v1::Device& d : FindRow(inv, v.row)->devices()) {
    EXPECT_FALSE(d.uuid().empty());
    EXPECT_TRUE(d.usable());
    if (d.has_memory_total_bytes()) {
      ++with_memory;
      EXPECT_EQ(d.attributes().at("memory_source"), v.prober);
    } else {
      EXPECT_EQ(d.attributes().count("memory_source"), 0u);
    }
  }
  EXPECT_EQ(with_memory, 1);
}

TEST_P(AccelLibraryTest, UnexpectedErrorIsAnErrorButTheRestIsMerged) {
  const Vendor& v = GetParam();
  TempDir tmp;
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptWith(v, tmp, absl::StrCat("fail ", v.memory_call, " 0 -7777")),
                                      v.fake);
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(Report(inv, v.prober).message(),
              AllOf(HasSubstr(v.memory_call), HasSubstr("-7777"), HasSubstr("(found anyway: ")));
  int with_memory = 0;
  for (const v1::Device& d : FindRow(inv, v.row)->devices()) with_memory += d.has_memory_total_bytes() ? 1 : 0;
  EXPECT_EQ(with_memory, 1);
}

TEST_P(AccelLibraryTest, SlowCallsWithinTheDeadlineAreOk) {
  const Vendor& v = GetParam();
  TempDir tmp;
  const v1::Inventory inv =
      ProbeWith(v, v.host, ScriptWith(v, tmp, absl::StrCat("sleep ", v.memory_call, " * 100")), v.fake);
  EXPECT_EQ(Report(inv, v.prober).status(), v1::PROBE_STATUS_OK) << Report(inv, v.prober).message();
  for (const v1::Device& d : FindRow(inv, v.row)->devices()) EXPECT_TRUE(d.has_memory_total_bytes());
}

// The never-returning call costs this prober's data only: the report names the call, nothing of
// the library is merged, every row keeps what the file probers found.
TEST_P(AccelLibraryTest, NeverReturningCallTimesOutAndMergesNothing) {
  const Vendor& v = GetParam();
  TempDir tmp;
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptWith(v, tmp, absl::StrCat("hang ", v.memory_call, " 1")),
                                      v.fake, std::chrono::milliseconds(300));
  const v1::ProbeReport& report = Report(inv, v.prober);
  EXPECT_EQ(report.status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_THAT(report.message(), AllOf(HasSubstr("gave up after 300 ms"), HasSubstr(v.memory_call),
                                      HasSubstr(absl::StrCat("nothing of ", v.prober, " merged"))));
  ExpectOnlyTheReportAdded(inv, v.host);
}

INSTANTIATE_TEST_SUITE_P(Libraries, AccelLibraryTest, ::testing::ValuesIn(kVendors),
                         [](const ::testing::TestParamInfo<Vendor>& info) { return std::string(info.param.prober); });

const Vendor& VendorNamed(const std::string& prober) {
  for (const Vendor& v : kVendors) {
    if (prober == v.prober) return v;
  }
  std::abort();
}

// ---- per-library cases ----

TEST(HlmlTest, MergedByBusIdNotIndexWithSerialAndModuleId) {
  const v1::Inventory inv = ProbeFixture(VendorNamed("hlml"));
  EXPECT_EQ(Report(inv, "hlml").message(),
            "driver 1.17.0-ee32e42, 2 HLML devices, 2 matched by bus id, 2 with memory");
  const v1::Device* first = FindDevice(inv, "0000:33:00.0");  // HLML index 1
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name(), "HL-225");
  EXPECT_EQ(first->uuid(), "01P0-HL2080A0-15-TNB8B2-03-07-01");
  EXPECT_EQ(first->attributes().at("serial"), "AN41000001");
  EXPECT_EQ(first->attributes().at("module_id"), "0");
  EXPECT_EQ(first->memory_total_bytes(), 103079215104u);
  EXPECT_EQ(first->memory_free_bytes(), 103079215104u - 1073741824u);
  EXPECT_EQ(FindDevice(inv, "0000:9a:00.0")->memory_free_bytes(), 103079215104u - 2147483648u);
}

TEST(HlmlTest, LostDeviceIsAttributedByBusIdAndTheOtherStaysUsable) {
  const Vendor& v = VendorNamed("hlml");
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, "lost"), v.fake);
  EXPECT_EQ(Report(inv, "hlml").status(), v1::PROBE_STATUS_OK) << Report(inv, "hlml").message();
  EXPECT_THAT(Report(inv, "hlml").message(),
              AllOf(HasSubstr("2 matched by bus id, 1 with memory, 1 lost"),
                    HasSubstr("HLML device 1: HLML hlml_device_get_handle_by_index: HLML_ERROR_AIP_IS_LOST (15)")));
  const v1::Device* lost = FindDevice(inv, "0000:33:00.0");
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "HLML hlml_device_get_handle_by_pci_bus_id: HLML_ERROR_AIP_IS_LOST (15)");
  EXPECT_FALSE(lost->usable());
  EXPECT_FALSE(lost->has_memory_total_bytes());
  EXPECT_EQ(lost->device_nodes_size(), 1);  // never dropped: sysfs' facts stay
  const v1::Device* ok = FindDevice(inv, "0000:9a:00.0");
  EXPECT_TRUE(ok->usable());
  EXPECT_EQ(ok->memory_free_bytes(), 103079215104u - 2147483648u);
  EXPECT_EQ(FindRow(inv, v1::ROW_HPU)->state_reason(), "1 of 2 devices usable");
}

TEST(DcmiTest, IdsNameVdieAndHbmPerChip) {
  const v1::Inventory inv = ProbeFixture(VendorNamed("dcmi"));
  EXPECT_EQ(Report(inv, "dcmi").message(), "2 DCMI devices, 2 matched by bus id, 2 with memory");
  const v1::Device* first = FindDevice(inv, "0000:01:00.0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name(), "Ascend 910B3");
  EXPECT_EQ(first->uuid(), "5A3F0C11-2B4D6E8F-00000000-1C2D3E4F-00000001");
  EXPECT_EQ(first->attributes().at("card_id"), "5");
  EXPECT_EQ(first->attributes().at("chip_id"), "0");
  EXPECT_EQ(first->attributes().at("logic_id"), "1");
  EXPECT_EQ(first->attributes().at("phy_id"), "0");
  EXPECT_EQ(first->attributes().at("aicore_count"), "20");
  EXPECT_EQ(first->memory_total_bytes(), 65536 * kMiB);  // DCMI answers MB
  EXPECT_EQ(first->memory_free_bytes(), (65536 - 2048) * kMiB);
  // Health 1 (general alarm) is recorded but leaves the chip usable.
  EXPECT_EQ(first->attributes().at("dcmi_health"), "1");
  EXPECT_EQ(first->health(), v1::HEALTH_OK);
  EXPECT_TRUE(first->usable());
}

TEST(DcmiTest, UrgentAlarmIsAFaultAndAVanishedChipIsLost) {
  const Vendor& v = VendorNamed("dcmi");
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, "faulty"), v.fake);
  EXPECT_EQ(Report(inv, "dcmi").status(), v1::PROBE_STATUS_OK) << Report(inv, "dcmi").message();
  EXPECT_THAT(Report(inv, "dcmi").message(), HasSubstr("1 lost, 1 faulty"));
  const v1::Device* faulty = FindDevice(inv, "0000:02:00.0");
  EXPECT_EQ(faulty->health(), v1::HEALTH_FAULT);
  EXPECT_EQ(faulty->health_reason(), "DCMI dcmi_get_device_health: 3 (urgent alarm)");
  EXPECT_FALSE(faulty->usable());
  EXPECT_TRUE(faulty->has_memory_total_bytes());  // what it read is kept
  const v1::Device* lost = FindDevice(inv, "0000:01:00.0");
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "DCMI dcmi_get_device_hbm_info: DCMI_ERR_CODE_DEVICE_NOT_EXIST (-8008)");
  EXPECT_FALSE(lost->usable());
  EXPECT_EQ(FindRow(inv, v1::ROW_NPU)->state(), v1::BACKEND_STATE_UNUSABLE);
}

TEST(CndevTest, UnhealthyDeviceIsAFaultWithItsStates) {
  const Vendor& v = VendorNamed("cndev");
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, "faulty"), v.fake);
  EXPECT_THAT(Report(inv, "cndev").message(), HasSubstr("2 matched by bus id, 1 with memory, 1 faulty"));
  const v1::Device* faulty = FindDevice(inv, "0000:5e:00.0");
  EXPECT_EQ(faulty->health(), v1::HEALTH_FAULT);
  EXPECT_EQ(faulty->health_reason(), "CNDev cndevGetCardHealthState: health 0 (device state 0, driver state 7)");
  EXPECT_FALSE(faulty->usable());
  EXPECT_EQ(faulty->uuid(), "20001012-1916-4000-8000-000000000002");
  EXPECT_TRUE(FindDevice(inv, "0000:3b:00.0")->usable());
}

TEST(CndevTest, ProcessesBecomeTheDevicesUsage) {
  const v1::Inventory inv = ProbeFixture(VendorNamed("cndev"));
  const v1::DeviceUsage& busy = FindDevice(inv, "0000:5e:00.0")->usage();
  EXPECT_EQ(busy.source(), "cndev");
  EXPECT_EQ(busy.process_count(), 1u);
  ASSERT_EQ(busy.processes_size(), 1);
  EXPECT_EQ(busy.processes(0).pid(), 7070u);
  EXPECT_EQ(busy.processes(0).used_memory_bytes(), 4294967296u);  // 4194304 KiB
  EXPECT_EQ(busy.memory_used_bytes(), 4294967296u);
  const v1::DeviceUsage& idle = FindDevice(inv, "0000:3b:00.0")->usage();
  EXPECT_TRUE(idle.processes_known());
  EXPECT_EQ(idle.process_count(), 0u);
  // A library that lists no processes (HLML) gives the memory in use only.
  const v1::Inventory gaudi = ProbeFixture(VendorNamed("hlml"));
  const v1::DeviceUsage& hlml = FindDevice(gaudi, "0000:33:00.0")->usage();
  EXPECT_EQ(hlml.source(), "hlml");
  EXPECT_TRUE(hlml.has_memory_used_bytes());
  EXPECT_FALSE(hlml.processes_known());
}

TEST(CndevTest, LibraryTooOldForTheApiVersionIsAnError) {
  const Vendor& v = VendorNamed("cndev");
  TempDir tmp;
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptWith(v, tmp, "fail cndevInit - UNSUPPORTED_API_VERSION"), v.fake);
  EXPECT_EQ(Report(inv, "cndev").status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(Report(inv, "cndev").message(),
            "cndevInit: CNDEV_ERROR_UNSUPPORTED_API_VERSION (3) (the library or driver cannot serve CNDev API "
            "version 5)");
  ExpectOnlyTheReportAdded(inv, v.host);
}

TEST(CndevTest, NoPermissionMakesThatDeviceInaccessible) {
  const Vendor& v = VendorNamed("cndev");
  TempDir tmp;
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptWith(v, tmp, "fail cndevGetUUID 1 NO_PERMISSION"), v.fake);
  const v1::Device* refused = FindDevice(inv, "0000:5e:00.0");
  EXPECT_FALSE(refused->usable());
  EXPECT_THAT(refused->unusable_reason(),
              HasSubstr("CNDev cndevGetUUID: CNDEV_ERROR_NO_PERMISSION (13): this process may not use 0000:5e:00.0"));
  EXPECT_EQ(refused->health(), v1::HEALTH_OK);
  EXPECT_TRUE(FindDevice(inv, "0000:3b:00.0")->usable());
}

TEST(MtmlTest, DriverFailureOnADeviceIsAFault) {
  const Vendor& v = VendorNamed("mtml");
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, "faulty"), v.fake);
  const v1::Device* faulty = FindDevice(inv, "0000:2a:00.0");
  EXPECT_EQ(faulty->health(), v1::HEALTH_FAULT);
  EXPECT_EQ(faulty->health_reason(), "MTML mtmlDeviceInitMemory: MTML_ERROR_DRIVER_FAILURE (2)");
  EXPECT_FALSE(faulty->has_memory_total_bytes());
  EXPECT_EQ(faulty->name(), "MTT S4000");
  const v1::Device* ok = FindDevice(inv, "0000:3a:00.0");
  EXPECT_TRUE(ok->usable());
  EXPECT_EQ(ok->memory_free_bytes(), 51539607552u - 1073741824u);
}

TEST(MtmlTest, DriverTooOldIsAnError) {
  const Vendor& v = VendorNamed("mtml");
  TempDir tmp;
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptWith(v, tmp, "fail mtmlLibraryInit - DRIVER_TOO_OLD"), v.fake);
  EXPECT_EQ(Report(inv, "mtml").status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(Report(inv, "mtml").message(), "mtmlLibraryInit: MTML_ERROR_DRIVER_TOO_OLD (9)");
}

TEST(MtmlTest, LibraryWithoutTheMemoryFunctionsLosesMemoryOnly) {
  const Vendor& v = VendorNamed("mtml");
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPath(v, v.script), DEVPLACE_FAKE_MTML_NOMEMORY);
  EXPECT_EQ(Report(inv, "mtml").status(), v1::PROBE_STATUS_OK) << Report(inv, "mtml").message();
  EXPECT_THAT(Report(inv, "mtml").message(),
              HasSubstr("library lacks mtmlDeviceInitMemory, mtmlMemoryGetTotal, mtmlMemoryGetUsed"));
  for (const v1::Device& d : FindRow(inv, v1::ROW_MUSA)->devices()) {
    EXPECT_FALSE(d.uuid().empty());
    EXPECT_FALSE(d.has_memory_total_bytes());
  }
}

TEST(AccelLibraryMergeTest, LibraryDeviceOutsideTheRowIsOnlyReportedAndUnlistedOnesAreKept) {
  probe::ProbeRun run = probe::RunProbers(probe::HostRoot(HostDir("hpu-2x-gaudi2")));
  probe::LibrarySnapshot snapshot;
  snapshot.count = 2;
  probe::LibraryDevice& stranger = snapshot.devices.emplace_back();
  stranger.index = 0;
  stranger.bus_id = "0000:00:0b.0";  // on the PCI bus, not a Gaudi
  stranger.memory_total_bytes = 1;
  const absl::StatusOr<probe::ProbeOutcome> outcome = probe::MergeLibrarySnapshot(
      {"hlml", "HLML", v1::ROW_HPU, "Gaudi"}, snapshot, run.facts);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->message,
            "2 HLML devices, 0 matched by bus id; HLML device 0000:00:0b.0 (index 0) is not a Gaudi of the PCI scan; "
            "0000:33:00.0 is not listed by HLML (kept as sysfs found it); 0000:9a:00.0 is not listed by HLML (kept "
            "as sysfs found it)");
  EXPECT_EQ(run.facts.OfRow(v1::ROW_HPU).size(), 2u);
  for (probe::PciFunction* fn : run.facts.OfRow(v1::ROW_HPU)) EXPECT_FALSE(fn->device.has_memory_total_bytes());
}

TEST(AccelLibraryMergeTest, EmptyPathsRunNoLibraryProber) {
  probe::ProbeOptions options;
  EXPECT_THAT(probe::VendorProbers(options), IsEmpty());
  options.dcmi_library = "libdcmi.so";
  options.mtml_library = "libmtml.so";
  const std::vector<probe::VendorProber> probers = probe::VendorProbers(options);
  ASSERT_EQ(probers.size(), 2u);
  EXPECT_EQ(probers[0].name, "dcmi");
  EXPECT_EQ(probers[1].name, "mtml");
}

// ---- health counters (library_health.h) ----

// A library's ECC call on a fixture whose first device counts uncorrectable errors.
struct EccCase {
  const char* prober;
  const char* script;         // tests/fixtures/<prober>/<script>.txt
  const char* faulty;         // its bus id
  const char* healthy;        // the other device's
  const char* counter;        // the FAULT counter
  const char* value;          // its reading
  const char* call;           // the library call that reads it
  const char* library;        // how sources name the library
  const char* not_supported;  // the fake's code name for "not supported"
  const char* failure;        // and for an unexpected error
};

const EccCase kEccCases[] = {
    {"hlml", "gaudi2-uncorrectable-ecc", "0000:33:00.0", "0000:9a:00.0", "ecc.errors.uncorrected.volatile.total", "2",
     "hlml_device_get_total_ecc_errors", "HLML", "NOT_SUPPORTED", "UNKNOWN"},
    {"dcmi", "910b-uncorrectable-ecc", "0000:01:00.0", "0000:02:00.0", "hbm_ecc.double_bit_error_cnt", "2",
     "dcmi_get_device_ecc_info", "DCMI", "NOT_SUPPORT", "INNER_ERR"},
    {"mtml", "s4000-uncorrectable-ecc", "0000:2a:00.0", "0000:3a:00.0", "ecc.errors.uncorrected.volatile.total", "2",
     "mtmlMemoryGetEccErrorCounter", "MTML", "NOT_SUPPORTED", "UNKNOWN"},
};

void PrintTo(const EccCase& c, std::ostream* os) { *os << c.prober; }

const v1::HealthCounter* LibraryCounter(const v1::Device* d, const std::string& name) {
  for (const v1::HealthCounter& c : d->health_counters()) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

class LibraryHealthTest : public ::testing::TestWithParam<EccCase> {
 protected:
  std::string ScriptPathOf() { return ScriptPath(VendorNamed(GetParam().prober), GetParam().script); }
  TempDir tmp_;
};

// ScriptWith prepends to the vendor's own fixture; these cases use the ECC fixture instead.
std::string EccScript(const EccCase& c, TempDir& tmp, const std::string& extra) {
  return tmp.Write("ecc.txt", extra + "\n" + ReadFile(ScriptPath(VendorNamed(c.prober), c.script)));
}

TEST_P(LibraryHealthTest, AnUncorrectableCountIsAFaultNamingItsCounterAndSource) {
  const EccCase& c = GetParam();
  const Vendor& v = VendorNamed(c.prober);
  const v1::Inventory inv = ProbeWith(v, v.host, ScriptPathOf(), v.fake);
  EXPECT_EQ(Report(inv, c.prober).status(), v1::PROBE_STATUS_OK) << Report(inv, c.prober).message();
  const v1::Device* faulty = FindDevice(inv, c.faulty);
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(faulty->health(), v1::HEALTH_FAULT);
  EXPECT_FALSE(faulty->usable());
  EXPECT_THAT(faulty->health_reason(), StartsWith(absl::StrCat(c.counter, " ", c.value, ": uncorrectable")));
  const v1::HealthCounter* counter = LibraryCounter(faulty, c.counter);
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(counter->effect(), v1::HEALTH_FAULT);
  EXPECT_THAT(counter->source(), StartsWith(absl::StrCat(c.library, " ", c.call)));
  const v1::Device* healthy = FindDevice(inv, c.healthy);
  ASSERT_NE(healthy, nullptr);
  EXPECT_EQ(healthy->health(), v1::HEALTH_OK);
  EXPECT_TRUE(healthy->usable());
  ASSERT_NE(LibraryCounter(healthy, c.counter), nullptr);
  EXPECT_EQ(LibraryCounter(healthy, c.counter)->value(), "0");
  EXPECT_EQ(LibraryCounter(healthy, c.counter)->effect(), v1::HEALTH_OK);
}

TEST_P(LibraryHealthTest, AFailingCallIsUnknownAndANoteNeverAFault) {
  const EccCase& c = GetParam();
  const Vendor& v = VendorNamed(c.prober);
  const v1::Inventory inv = ProbeWith(v, v.host, EccScript(c, tmp_, absl::StrCat("fail ", c.call, " * ", c.failure)), v.fake);
  const v1::ProbeReport& report = Report(inv, c.prober);
  EXPECT_EQ(report.status(), v1::PROBE_STATUS_OK) << report.message();  // a note, not an error
  EXPECT_THAT(report.message(), HasSubstr(absl::StrCat(c.faulty, ": ")));
  EXPECT_THAT(report.message(), HasSubstr("(its health counters unknown, not a health change)"));
  const v1::Device* faulty = FindDevice(inv, c.faulty);
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(faulty->health(), v1::HEALTH_OK) << faulty->health_reason();
  EXPECT_TRUE(faulty->usable());
  const v1::HealthCounter* counter = LibraryCounter(faulty, c.counter);
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(counter->effect(), v1::HEALTH_UNSPECIFIED);
  EXPECT_THAT(counter->rule(), StartsWith("unknown: "));
  EXPECT_TRUE(counter->value().empty());
}

TEST_P(LibraryHealthTest, AnUnsupportedCallIsUnknownWithoutANote) {
  const EccCase& c = GetParam();
  const Vendor& v = VendorNamed(c.prober);
  const v1::Inventory inv =
      ProbeWith(v, v.host, EccScript(c, tmp_, absl::StrCat("fail ", c.call, " * ", c.not_supported)), v.fake);
  const v1::ProbeReport& report = Report(inv, c.prober);
  EXPECT_EQ(report.status(), v1::PROBE_STATUS_OK) << report.message();
  EXPECT_THAT(report.message(), Not(HasSubstr("health counters unknown")));
  const v1::Device* faulty = FindDevice(inv, c.faulty);
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(faulty->health(), v1::HEALTH_OK);
  ASSERT_NE(LibraryCounter(faulty, c.counter), nullptr);
  EXPECT_THAT(LibraryCounter(faulty, c.counter)->rule(), HasSubstr("(this device does not offer it)"));
}

TEST_P(LibraryHealthTest, AUsageRefreshMakesNoHealthCall) {
  const EccCase& c = GetParam();
  const Vendor& v = VendorNamed(c.prober);
  setenv(v.config_env, ScriptPathOf().c_str(), 1);
  ScopedEnv log(v.log_env, tmp_.File("calls"));
  probe::ProbeOptions options;
  options.nvml_library = "";
  options.*(v.library) = v.fake;
  options.usage_only = true;
  const v1::Inventory inv = probe::ProbeInventory(probe::HostRoot(HostDir(v.host)), options);
  EXPECT_THAT(ReadFile(tmp_.File("calls")), AllOf(HasSubstr(v.memory_call), Not(HasSubstr(c.call))));
  const v1::Device* faulty = FindDevice(inv, c.faulty);
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(LibraryCounter(faulty, c.counter), nullptr);
}

// MTML's own "the device fails" code from a health call is the library's verdict, as from any call:
// FAULT naming the call, its counters unknown.
TEST(MtmlHealth, DriverFailureFromAHealthCallMakesTheDeviceFault) {
  const EccCase& c = kEccCases[2];
  ASSERT_STREQ(c.prober, "mtml");
  const Vendor& v = VendorNamed(c.prober);
  TempDir tmp;
  const v1::Inventory inv =
      ProbeWith(v, v.host, EccScript(c, tmp, "fail mtmlMemoryGetEccErrorCounter 0 DRIVER_FAILURE"), v.fake);
  const v1::Device* failing = FindDevice(inv, c.healthy);  // 3a:00.0, MTML index 0
  ASSERT_NE(failing, nullptr);
  EXPECT_EQ(failing->health(), v1::HEALTH_FAULT);
  EXPECT_THAT(failing->health_reason(), HasSubstr("mtmlMemoryGetEccErrorCounter: MTML_ERROR_DRIVER_FAILURE"));
  EXPECT_FALSE(failing->usable());
  ASSERT_NE(LibraryCounter(failing, "ecc.errors.uncorrected.volatile.total"), nullptr);
  EXPECT_EQ(LibraryCounter(failing, "ecc.errors.uncorrected.volatile.total")->effect(), v1::HEALTH_UNSPECIFIED);
  ASSERT_NE(LibraryCounter(failing, "retired_pages.pending"), nullptr);
  EXPECT_EQ(LibraryCounter(failing, "retired_pages.pending")->effect(), v1::HEALTH_OK);  // its own call answered
}

INSTANTIATE_TEST_SUITE_P(Libraries, LibraryHealthTest, ::testing::ValuesIn(kEccCases),
                         [](const ::testing::TestParamInfo<EccCase>& info) { return std::string(info.param.prober); });

// ---- goldens ----

struct GoldenCase {
  const char* name;    // tests/golden/accel/<name>.json
  const char* prober;  // the vendor
  const char* script;  // tests/fixtures/<prober>/<script>.txt
};

const GoldenCase kGoldenCases[] = {
    {"hlml-gaudi2", "hlml", "gaudi2"}, {"hlml-lost", "hlml", "lost"},
    {"dcmi-910b", "dcmi", "910b"},     {"dcmi-faulty", "dcmi", "faulty"},
    {"cndev-mlu370", "cndev", "mlu370"}, {"cndev-faulty", "cndev", "faulty"},
    {"mtml-s4000", "mtml", "s4000"},   {"mtml-faulty", "mtml", "faulty"},
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

class AccelGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AccelGoldenTest, MatchesGoldenJson) {
  const GoldenCase& c = GetParam();
  const Vendor& v = VendorNamed(c.prober);
  ExpectMatchesGolden(ProbeWith(v, v.host, ScriptPath(v, c.script), v.fake),
                      absl::StrCat(DEVPLACE_ACCEL_GOLDEN_DIR, "/", c.name, ".json"),
                      absl::StrCat("inventory of ", v.host, " with ", c.prober, " script ", c.script));
}

INSTANTIATE_TEST_SUITE_P(Cases, AccelGoldenTest, ::testing::ValuesIn(kGoldenCases),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) ch = (ch == '-') ? '_' : ch;
                           return name;
                         });

TEST(AccelGoldenCoverageTest, EveryGoldenHasACase) {
  if (UpdateGoldens()) return;
  std::set<std::string> cases, goldens;
  for (const GoldenCase& c : kGoldenCases) cases.insert(c.name);
  for (const auto& entry : std::filesystem::directory_iterator(DEVPLACE_ACCEL_GOLDEN_DIR)) {
    goldens.insert(entry.path().stem().string());
  }
  EXPECT_EQ(goldens, cases);
}

}  // namespace
}  // namespace devplace::testing
