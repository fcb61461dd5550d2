// The Level Zero Sysman prober against the fake loader (tests/fakes/fake_ze.cc, a real dlopen in
// the prober's own process) on the xpu-2x-arc fixture host: merge by bus id, memory per module,
// tiles and the FLAT/COMPOSITE device counts, unhealthy memory, a lost device, unsupported and
// unexpected answers, a missing or wrong library, a hang and a crash that cost only Level Zero's
// data, and golden inventories (tests/golden/level_zero; DEVPLACE_UPDATE_GOLDENS=1 rewrites them);
// and Debian's real loader with the fake driver (tests/fakes/fake_ze_driver.cc), through the core API.
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/probe/vendor_libs/level_zero_prober.h"
#include "server/probe/probers.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kArc0[] = "0000:03:00.0";
constexpr char kArc1[] = "0000:07:00.0";
constexpr char kIgpu[] = "0000:00:02.0";

v1::Inventory ProbeWithZe(const std::string& script, const std::string& library = DEVPLACE_FAKE_ZE,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5),
                          const std::string& host = "xpu-2x-arc") {
  setenv("FAKE_ZE_CONFIG", (std::string(DEVPLACE_FIXTURES_DIR) + "/level_zero/" + script + ".txt").c_str(), 1);
  probe::ProbeOptions options;
  options.level_zero_library = library;
  options.vendor_timeout = timeout;
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(HostDir(host)), options);
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

const v1::ProbeReport& Ze(const v1::Inventory& inv) {
  const v1::ProbeReport* report = FindReport(inv, "level_zero");
  EXPECT_NE(report, nullptr);
  static const v1::ProbeReport* none = new v1::ProbeReport;
  return report != nullptr ? *report : *none;
}

// Each memory module's zes_mem_health_t is a health counter "memory.<where>.health".
const v1::HealthCounter* MemoryHealth(const v1::Device* d, const std::string& where) {
  for (const v1::HealthCounter& c : d->health_counters()) {
    if (c.name() == "memory." + where + ".health") return &c;
  }
  return nullptr;
}

TEST(LevelZeroTest, NamesUuidsAndMemoryMergedByBusId) {
  const v1::Inventory inv = ProbeWithZe("arc");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_OK) << Ze(inv).message();
  EXPECT_EQ(Ze(inv).message(), "driver 1.3.29735, 3 Level Zero devices, 3 matched by bus id");
  const v1::Device* arc1 = FindDevice(inv, kArc1);
  ASSERT_NE(arc1, nullptr);
  EXPECT_EQ(arc1->name(), "Intel(R) Arc(TM) A770 Graphics");
  EXPECT_EQ(arc1->uuid(), "8680a056-0800-0000-0700-000000000000");
  EXPECT_EQ(arc1->memory_total_bytes(), 16225243136u);  // Level Zero's, not sysfs' 17095983104
  EXPECT_EQ(arc1->memory_free_bytes(), 12884901888u);
  EXPECT_EQ(arc1->attributes().at("memory_source"), "level_zero");
  EXPECT_EQ(arc1->attributes().at("memory_modules"), "device:16225243136/12884901888");
  EXPECT_EQ(arc1->attributes().at("flat_device_count"), "1");
  ASSERT_NE(MemoryHealth(arc1, "device"), nullptr);
  EXPECT_EQ(MemoryHealth(arc1, "device")->value(), "ok");
  EXPECT_EQ(arc1->health(), v1::HEALTH_OK);
  EXPECT_EQ(FindDevice(inv, kArc0)->memory_free_bytes(), 16000000000u);
  const v1::Device* igpu = FindDevice(inv, kIgpu);
  EXPECT_EQ(igpu->name(), "Intel(R) UHD Graphics 770");
  EXPECT_FALSE(igpu->has_memory_total_bytes());  // no device memory module: shares system RAM
  EXPECT_EQ(FindRow(inv, v1::ROW_XPU)->attributes().at("level_zero_driver_version"), "1.3.29735");
}

TEST(LevelZeroTest, ProcessesFromSysmanBecomeTheDevicesUsage) {
  const v1::Inventory inv = ProbeWithZe("arc");
  const v1::DeviceUsage& used = FindDevice(inv, kArc1)->usage();
  EXPECT_EQ(used.source(), "level_zero");
  EXPECT_TRUE(used.processes_known());
  EXPECT_EQ(used.process_count(), 1u);
  ASSERT_EQ(used.processes_size(), 1);
  EXPECT_EQ(used.processes(0).pid(), 3131u);
  EXPECT_EQ(used.processes(0).used_memory_bytes(), 3221225472u);
  EXPECT_EQ(used.memory_used_bytes(), 16225243136u - 12884901888u);
  EXPECT_EQ(FindDevice(inv, kArc0)->usage().process_count(), 0u);
  EXPECT_TRUE(FindDevice(inv, kArc0)->usage().processes_known());
}

TEST(LevelZeroTest, TilesGiveSubDevicesAndTheFlatDeviceCount) {
  const v1::Inventory inv = ProbeWithZe("tiles");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_OK) << Ze(inv).message();
  const v1::Device* max = FindDevice(inv, kArc0);
  EXPECT_EQ(max->name(), "Intel(R) Data Center GPU Max 1550");
  EXPECT_EQ(max->sub_device_count(), 2u);
  EXPECT_EQ(max->attributes().at("level_zero_tiles"), "2");
  EXPECT_EQ(max->attributes().at("flat_device_count"), "2");
  EXPECT_EQ(max->attributes().at("composite_device_count"), "1");
  EXPECT_EQ(max->memory_total_bytes(), 2 * 68719476736u);
  EXPECT_EQ(max->memory_free_bytes(), 128000000000u);
  EXPECT_EQ(max->attributes().at("memory_modules"), "tile0:68719476736/60000000000,tile1:68719476736/68000000000");
  EXPECT_EQ(FindDevice(inv, kArc1)->uuid(), "");  // the library gave none (all zero)
  EXPECT_THAT(Ze(inv).message(), HasSubstr("0000:00:02.0 is not listed by Level Zero"));
}

TEST(LevelZeroTest, UnhealthyMemoryIsAFaultAndALostDeviceIsLost) {
  const v1::Inventory inv = ProbeWithZe("unhealthy");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_OK) << Ze(inv).message();
  const v1::Device* faulty = FindDevice(inv, kArc1);
  EXPECT_EQ(faulty->health(), v1::HEALTH_FAULT);
  EXPECT_EQ(faulty->health_reason(),
            "memory.device.health critical: the device runs on reduced memory, its banks with too many uncorrectable "
            "errors left out; memory.tile0.health degraded: correctable errors pile up on a memory channel (Sysman "
            "advises a reset): usable, picked last");
  ASSERT_NE(MemoryHealth(faulty, "device"), nullptr);
  EXPECT_EQ(MemoryHealth(faulty, "device")->source(), "Level Zero zesMemoryGetState");
  EXPECT_EQ(MemoryHealth(faulty, "device")->effect(), v1::HEALTH_FAULT);
  ASSERT_NE(MemoryHealth(faulty, "tile0"), nullptr);
  EXPECT_EQ(MemoryHealth(faulty, "tile0")->effect(), v1::HEALTH_DEGRADED);
  EXPECT_FALSE(faulty->usable());
  const v1::Device* lost = FindDevice(inv, kArc0);
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "Level Zero zesMemoryGetState: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)");
  EXPECT_FALSE(lost->usable());
  EXPECT_EQ(lost->memory_total_bytes(), 17095983104u);  // sysfs' figure stays
}

TEST(LevelZeroTest, UnsupportedKeepsSysfsAndUnexpectedErrorsAreReported) {
  const v1::Inventory inv = ProbeWithZe("not-supported");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(Ze(inv).message(),
              HasSubstr("0000:03:00.0: zesDeviceGetProperties: ZE_RESULT_ERROR_UNKNOWN (0x7ffffffe) (found anyway"));
  EXPECT_EQ(FindDevice(inv, kArc1)->memory_total_bytes(), 17095983104u);
  EXPECT_EQ(FindDevice(inv, kArc1)->attributes().count("memory_source"), 0u);
  EXPECT_EQ(FindDevice(inv, kArc1)->name(), "Intel(R) Arc(TM) A770 Graphics");
}

TEST(LevelZeroTest, NoGpuDriverIsSkipped) {
  const v1::Inventory inv = ProbeWithZe("no-driver");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(Ze(inv).message(), "no Level Zero GPU driver: zesInit: ZE_RESULT_ERROR_UNINITIALIZED (0x78000001)");
}

TEST(LevelZeroTest, MissingAndWrongLibraries) {
  const v1::Inventory missing = ProbeWithZe("arc", "/nonexistent/libze_loader.so.1");
  EXPECT_EQ(Ze(missing).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(Ze(missing).message(), HasSubstr("/nonexistent/libze_loader.so.1 not found"));
  const v1::Inventory wrong = ProbeWithZe("arc", DEVPLACE_FAKE_NVML);
  EXPECT_EQ(Ze(wrong).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(Ze(wrong).message(), HasSubstr("lacks zesInit, zesDriverGet, zesDeviceGet, zesDeviceGetProperties, "
                                             "zesDevicePciGetProperties (not a Level Zero loader with Sysman 1.5"));
  const v1::Inventory no_xpu = ProbeWithZe("arc", "/nonexistent/libze_loader.so.1", std::chrono::seconds(5),
                                           "nvidia-2x-h100");
  EXPECT_EQ(Ze(no_xpu).message(), "no Intel GPU on the PCI bus");
}

TEST(LevelZeroTest, NeverReturningCallCostsOnlyLevelZero) {
  const v1::Inventory inv = ProbeWithZe("hang", DEVPLACE_FAKE_ZE, std::chrono::milliseconds(500));
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_EQ(Ze(inv).message(),
            "gave up after 500 ms (--probe_timeout): zesMemoryGetState (device 1) did not return; nothing of "
            "level_zero merged");
  EXPECT_EQ(FindDevice(inv, kArc1)->name(), "");  // sysfs has none; nothing of Level Zero
  EXPECT_TRUE(FindDevice(inv, kArc1)->usable());
}

TEST(LevelZeroTest, CrashingCallCostsOnlyLevelZero) {
  const v1::Inventory inv = ProbeWithZe("crash");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_EQ(Ze(inv).message(),
            "its process was killed by SIGSEGV (Segmentation fault) in zesDeviceGetProperties (device 1); nothing of "
            "level_zero merged");
  EXPECT_EQ(FindDevice(inv, kArc1)->memory_total_bytes(), 17095983104u);
  EXPECT_TRUE(FindDevice(inv, kArc0)->usable());
}

TEST(LevelZeroUnitTest, ResultNames) {
  EXPECT_EQ(probe::ZeResultName(0x70000001), "ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)");
  EXPECT_EQ(probe::ZeResultName(0x12), "Level Zero result 0x00000012");
}

// ---- goldens ----

struct GoldenCase {
  const char* name;    // tests/golden/level_zero/<name>.json
  const char* script;  // tests/fixtures/level_zero/<script>.txt, on xpu-2x-arc
};

const GoldenCase kGoldenCases[] = {{"2x-arc", "arc"}, {"tiles", "tiles"}, {"unhealthy", "unhealthy"}};

class LevelZeroGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(LevelZeroGoldenTest, MatchesGoldenJson) {
  const GoldenCase& c = GetParam();
  ExpectMatchesGolden(ProbeWithZe(c.script), std::string(DEVPLACE_LEVEL_ZERO_GOLDEN_DIR) + "/" + c.name + ".json",
                      std::string("inventory of xpu-2x-arc with Level Zero script ") + c.script);
}

INSTANTIATE_TEST_SUITE_P(Cases, LevelZeroGoldenTest, ::testing::ValuesIn(kGoldenCases),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) ch = (ch == '-') ? '_' : ch;
                           return name;
                         });

TEST(LevelZeroGoldenCoverageTest, EveryGoldenHasACase) {
  if (UpdateGoldens()) return;
  std::set<std::string> cases, goldens;
  for (const GoldenCase& c : kGoldenCases) cases.insert(c.name);
  for (const auto& entry : std::filesystem::directory_iterator(DEVPLACE_LEVEL_ZERO_GOLDEN_DIR)) {
    goldens.insert(entry.path().stem().string());
  }
  EXPECT_EQ(goldens, cases);
}

// Debian 12's own loader (libze1 1.8: no zesInit, so no Sysman 1.5) with the fake driver
// (tests/fakes/fake_ze_driver.cc) that the loader loads through ZE_ENABLE_ALT_DRIVERS: the prober
// falls back to the core API, and every call goes through the real loader's dispatch.
namespace {
std::string RealLoaderUnavailable() {
#ifndef DEVPLACE_FAKE_ZE_DRIVER
  return "the fake Level Zero driver was not built (Debian package libze-dev missing at configure time)";
#else
  void* handle = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return "libze_loader.so.1 is not installed (Debian package libze1)";
  const bool sysman = dlsym(handle, "zesInit") != nullptr;
  dlclose(handle);
  if (sysman) return "this libze_loader.so.1 has zesInit (Sysman 1.5): the core fallback is not used";
  return "";
#endif
}
}  // namespace

TEST(LevelZeroRealLoader, CoreApiListsDevicesWithoutSysman) {
  if (const std::string why = RealLoaderUnavailable(); !why.empty()) GTEST_SKIP() << why;
#ifdef DEVPLACE_FAKE_ZE_DRIVER
  setenv("ZE_ENABLE_ALT_DRIVERS", DEVPLACE_FAKE_ZE_DRIVER, 1);
  const v1::Inventory inv = ProbeWithZe("arc", "libze_loader.so.1");
  unsetenv("ZE_ENABLE_ALT_DRIVERS");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_OK) << Ze(inv).message();
  EXPECT_EQ(Ze(inv).message(),
            "3 Level Zero devices, 3 matched by bus id; core API only (libze_loader.so.1 lacks zesInit, zesDriverGet, "
            "zesDeviceGet (not a Level Zero loader with Sysman 1.5, or one too old)): memory, processes and the "
            "driver version not read");
  const v1::Device* arc1 = FindDevice(inv, kArc1);
  ASSERT_NE(arc1, nullptr);
  EXPECT_EQ(arc1->name(), "Intel(R) Arc(TM) A770 Graphics");
  EXPECT_EQ(arc1->attributes().at("level_zero_uuid"), "8680a056-0800-0000-0700-000000000000");
  EXPECT_EQ(FindDevice(inv, kIgpu)->name(), "Intel(R) UHD Graphics 770");
  // Nothing Sysman gives is claimed: memory stays sysfs', no usage, no tile counts.
  const v1::Inventory sysfs = ProbeTree(HostDir("xpu-2x-arc"));
  EXPECT_EQ(arc1->memory_total_bytes(), FindDevice(sysfs, kArc1)->memory_total_bytes());
  EXPECT_EQ(arc1->attributes().count("memory_source"), 0u);
  EXPECT_FALSE(arc1->has_usage());
  EXPECT_EQ(arc1->attributes().count("flat_device_count"), 0u);
#endif
}

TEST(LevelZeroRealLoader, NoDriverIsSkipped) {
  if (const std::string why = RealLoaderUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // The real loader with no driver to load (this host has no Intel GPU driver).
  setenv("ZE_ENABLE_ALT_DRIVERS", "/nonexistent/libze_intel_gpu.so.1", 1);
  const v1::Inventory inv = ProbeWithZe("arc", "libze_loader.so.1");
  unsetenv("ZE_ENABLE_ALT_DRIVERS");
  EXPECT_EQ(Ze(inv).status(), v1::PROBE_STATUS_SKIPPED) << Ze(inv).message();
  EXPECT_THAT(Ze(inv).message(), HasSubstr("no Level Zero GPU driver: zeInit: ZE_RESULT_ERROR_UNINITIALIZED"));
}

}  // namespace
}  // namespace devplace::testing
