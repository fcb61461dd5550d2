// The AMD SMI prober against the fake AMD SMI (tests/fakes/fake_amdsmi.cc, loaded with a real
// dlopen in the prober's own process) on the AMD fixture hosts: merge by bus id, partition modes,
// lost / unsupported / unexpected answers, a missing or wrong library, a hang and a crash that cost
// only AMD SMI's data, and golden inventories (tests/golden/amdsmi/<case>.json; regenerate with
// DEVPLACE_UPDATE_GOLDENS=1 and review the diff).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/probe/vendor_libs/amdsmi_prober.h"
#include "server/probe/probers.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMi210Vram = 68702699520;
constexpr char kFirst[] = "0000:63:00.0";
constexpr char kSecond[] = "0000:83:00.0";

std::string AmdSmiScript(const std::string& name) {
  return std::string(DEVPLACE_FIXTURES_DIR) + "/amdsmi/" + name + ".txt";
}

// The inventory of fixture host `host` with the fake AMD SMI answering from `script` (and the
// fake NVML from `nvml_script` when given); durations and the timestamp cleared.
v1::Inventory ProbeWithAmdSmi(const std::string& host, const std::string& script,
                              const std::string& library = DEVPLACE_FAKE_AMDSMI,
                              std::chrono::milliseconds timeout = std::chrono::seconds(5),
                              const std::string& nvml_script = "") {
  setenv("FAKE_AMDSMI_CONFIG", AmdSmiScript(script).c_str(), 1);
  probe::ProbeOptions options;
  options.amd_smi_library = library;
  options.vendor_timeout = timeout;
  if (!nvml_script.empty()) {
    setenv("FAKE_NVML_CONFIG", NvmlScript(nvml_script).c_str(), 1);
    options.nvml_library = DEVPLACE_FAKE_NVML;
  }
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(HostDir(host)), options);
  inventory.clear_probed_at();
  for (v1::ProbeReport& report : *inventory.mutable_probe_reports()) report.set_duration_ms(0);
  return inventory;
}

const v1::ProbeReport& AmdSmi(const v1::Inventory& inv) {
  const v1::ProbeReport* report = FindReport(inv, "amd_smi");
  EXPECT_NE(report, nullptr);
  static const v1::ProbeReport* none = new v1::ProbeReport;
  return report != nullptr ? *report : *none;
}

TEST(AmdSmiTest, NamesUuidsMemoryAndPartitionsMergedByBusId) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "mi210");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_OK) << AmdSmi(inv).message();
  EXPECT_EQ(AmdSmi(inv).message(),
            "driver 6.7.0, 2 AMD SMI GPUs, 2 matched by bus id; AMD SMI's driver 6.7.0 differs from the kernel's "
            "6.1.0-18-amd64");
  const v1::Device* first = FindDevice(inv, kFirst);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name(), "AMD Instinct MI210");
  EXPECT_EQ(first->uuid(), "GPU-0de0b6b3a7640001");  // KFD's unique id stays: HIP matches that form
  EXPECT_EQ(first->attributes().at("amd_smi_uuid"), "9aff740f-0000-1000-80ab-000000000001");
  EXPECT_EQ(first->memory_total_bytes(), kMi210Vram);
  EXPECT_EQ(first->memory_free_bytes(), kMi210Vram - 1073741824);  // device 1 of the script: by bus id
  EXPECT_EQ(first->attributes().at("memory_source"), "amd_smi");
  EXPECT_EQ(first->attributes().at("compute_partition"), "SPX");
  EXPECT_EQ(first->attributes().at("compute_partition_count"), "1");
  EXPECT_EQ(first->attributes().at("memory_partition"), "NPS1");
  EXPECT_EQ(FindDevice(inv, kSecond)->memory_free_bytes(), kMi210Vram - 4294967296);
  EXPECT_EQ(FindRow(inv, v1::ROW_CUDA_AMD)->driver_version(), "6.1.0-18-amd64");  // the kernel's stays
}

TEST(AmdSmiTest, PartitionedGpuStaysOneDeviceWithItsModes) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "partitioned");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_OK) << AmdSmi(inv).message();
  EXPECT_THAT(AmdSmi(inv).message(), HasSubstr("2 AMD SMI GPUs, 2 matched by bus id"));
  ASSERT_EQ(FindRow(inv, v1::ROW_CUDA_AMD)->devices_size(), 2);
  const v1::Device* first = FindDevice(inv, kFirst);
  EXPECT_EQ(first->attributes().at("compute_partition"), "CPX");
  EXPECT_EQ(first->attributes().count("compute_partition_count"), 0u);  // CPX: depends on the XCDs
  EXPECT_EQ(first->attributes().at("memory_partition"), "NPS4");
  const v1::Device* second = FindDevice(inv, kSecond);
  EXPECT_EQ(second->attributes().count("compute_partition"), 0u);
  EXPECT_EQ(second->attributes().count("memory_partition"), 0u);
}

TEST(AmdSmiTest, LostGpuIsHealthLostAndTheOtherStaysUsable) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "lost");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_OK) << AmdSmi(inv).message();
  EXPECT_THAT(AmdSmi(inv).message(), HasSubstr("1 lost"));
  const v1::Device* lost = FindDevice(inv, kSecond);
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->health(), v1::HEALTH_LOST);
  EXPECT_EQ(lost->health_reason(), "AMD SMI amdsmi_get_gpu_memory_total: AMDSMI_STATUS_NOT_FOUND (31)");
  EXPECT_FALSE(lost->usable());
  EXPECT_EQ(lost->attributes().count("compute_partition"), 0u);  // no call after the loss
  const v1::Device* first = FindDevice(inv, kFirst);
  EXPECT_EQ(first->health(), v1::HEALTH_OK);
  EXPECT_TRUE(first->usable());
  EXPECT_EQ(first->attributes().at("compute_partition"), "SPX");
}

TEST(AmdSmiTest, NotSupportedKeepsSysfsAndUnexpectedErrorsAreReported) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "not-supported");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(AmdSmi(inv).message(),
              HasSubstr("0000:83:00.0: amdsmi_get_gpu_asic_info: AMDSMI_STATUS_IO (12) (found anyway: "));
  const v1::Device* first = FindDevice(inv, kFirst);
  // Memory NOT_SUPPORTED by the library: sysfs' figures stay, with no memory_source.
  EXPECT_EQ(first->memory_total_bytes(), 68702699520u);
  EXPECT_EQ(first->memory_free_bytes(), 68691628032u);
  EXPECT_EQ(first->attributes().count("memory_source"), 0u);
  EXPECT_EQ(first->attributes().count("amd_smi_uuid"), 0u);
  EXPECT_EQ(FindDevice(inv, kSecond)->name(), "AMD Instinct MI210");  // sysfs' name stays
}

TEST(AmdSmiTest, DriverNotLoadedIsSkippedWithTheReason) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "driver-not-loaded");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(AmdSmi(inv).message(), "amdgpu driver not loaded: amdsmi_init: AMDSMI_STATUS_DRIVER_NOT_LOADED (34)");
}

TEST(AmdSmiTest, MissingLibraryIsSkippedAndTheRestIntact) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "mi210", "/nonexistent/libamd_smi.so");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_THAT(AmdSmi(inv).message(), HasSubstr("/nonexistent/libamd_smi.so not found"));
  EXPECT_EQ(FindDevice(inv, kFirst)->name(), "AMD Instinct MI210");
  EXPECT_EQ(FindDevice(inv, kFirst)->memory_total_bytes(), kMi210Vram);
}

// The wrong library (NVML where AMD SMI was expected: none of the required symbols).
TEST(AmdSmiTest, WrongLibraryIsAnErrorNamingTheMissingSymbols) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "mi210", DEVPLACE_FAKE_NVML);
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_THAT(AmdSmi(inv).message(),
              HasSubstr("lacks amdsmi_init, amdsmi_shut_down, amdsmi_get_socket_handles, amdsmi_get_processor_handles, "
                        "amdsmi_get_gpu_device_bdf (not an AMD SMI library, or one too old)"));
}

// An older library without the partition functions: those attributes only are lost.
TEST(AmdSmiTest, LibraryWithoutPartitionFunctionsLosesThemOnly) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "mi210", DEVPLACE_FAKE_AMDSMI_NOPARTITION);
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_OK);
  EXPECT_THAT(AmdSmi(inv).message(),
              HasSubstr("library lacks amdsmi_get_gpu_compute_partition, amdsmi_get_gpu_memory_partition"));
  const v1::Device* first = FindDevice(inv, kFirst);
  EXPECT_EQ(first->attributes().count("compute_partition"), 0u);
  EXPECT_EQ(first->attributes().at("amd_smi_uuid"), "9aff740f-0000-1000-80ab-000000000001");
}

TEST(AmdSmiTest, HostWithoutAmdGpuDoesNotLoadTheLibrary) {
  const v1::Inventory inv = ProbeWithAmdSmi("nvidia-2x-h100", "mi210", "/nonexistent/libamd_smi.so");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_SKIPPED);
  EXPECT_EQ(AmdSmi(inv).message(), "no AMD GPU on the PCI bus");
}

TEST(AmdSmiTest, SlowCallsWithinTheDeadlineAreOk) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "slow");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_OK);
  EXPECT_EQ(FindDevice(inv, kSecond)->memory_free_bytes(), kMi210Vram - 4294967296);
}

TEST(AmdSmiTest, NeverReturningCallCostsOnlyAmdSmi) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "hang", DEVPLACE_FAKE_AMDSMI, std::chrono::milliseconds(500));
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_EQ(AmdSmi(inv).message(),
            "gave up after 500 ms (--probe_timeout): amdsmi_get_gpu_memory_total (device 1) did not return; nothing "
            "of amd_smi merged");
  EXPECT_EQ(FindDevice(inv, kFirst)->name(), "AMD Instinct MI210");  // sysfs' name, not "(from AMD SMI)"
  EXPECT_EQ(FindDevice(inv, kFirst)->attributes().count("memory_source"), 0u);
  EXPECT_TRUE(FindDevice(inv, kFirst)->usable());
}

TEST(AmdSmiTest, CrashingCallCostsOnlyAmdSmi) {
  const v1::Inventory inv = ProbeWithAmdSmi("amd-2x-mi210", "crash");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_EQ(AmdSmi(inv).message(),
            "its process was killed by SIGSEGV (Segmentation fault) in amdsmi_get_gpu_asic_info (device 1); nothing "
            "of amd_smi merged");
  EXPECT_EQ(FindDevice(inv, kFirst)->name(), "AMD Instinct MI210");
  EXPECT_EQ(FindDevice(inv, kFirst)->memory_free_bytes(), 68691628032u);  // sysfs' figure
  EXPECT_TRUE(FindDevice(inv, kSecond)->usable());
}

// Two vendor libraries on one host: AMD SMI crashes, NVML's data for the NVIDIA GPU still lands.
TEST(AmdSmiTest, CrashOnAMixedHostLeavesNvmlsRowEnriched) {
  const v1::Inventory inv = ProbeWithAmdSmi("mixed-nvidia-amd-igpu", "mixed-crash", DEVPLACE_FAKE_AMDSMI,
                                            std::chrono::seconds(5), "mixed-4090");
  EXPECT_EQ(AmdSmi(inv).status(), v1::PROBE_STATUS_CRASHED);
  ASSERT_NE(FindReport(inv, "nvml"), nullptr);
  EXPECT_EQ(FindReport(inv, "nvml")->status(), v1::PROBE_STATUS_OK) << FindReport(inv, "nvml")->message();
  const v1::Device* nvidia = FindDevice(inv, "0000:01:00.0");
  ASSERT_NE(nvidia, nullptr);
  EXPECT_EQ(nvidia->uuid(), "GPU-00000000-0000-4000-8000-000000004090");
  EXPECT_EQ(nvidia->memory_free_bytes(), 24146608128u);
  const v1::Device* igpu = FindDevice(inv, "0000:0e:00.0");
  ASSERT_NE(igpu, nullptr);
  EXPECT_EQ(igpu->name(), "");  // nothing of AMD SMI
  EXPECT_EQ(igpu->memory_total_bytes(), 536870912u);
}

TEST(AmdSmiUnitTest, StatusNames) {
  EXPECT_EQ(probe::AmdSmiStatusName(31), "AMDSMI_STATUS_NOT_FOUND (31)");
  EXPECT_EQ(probe::AmdSmiStatusName(2), "AMDSMI_STATUS_NOT_SUPPORTED (2)");
  EXPECT_EQ(probe::AmdSmiStatusName(99), "AMD SMI status 99");
}

// ---- goldens ----

struct GoldenCase {
  const char* name;         // tests/golden/amdsmi/<name>.json
  const char* host;         // tests/fixtures/hosts/<host>
  const char* script;       // tests/fixtures/amdsmi/<script>.txt
  const char* nvml_script;  // tests/fixtures/nvml/<script>.txt, or "" for no NVML
};

const GoldenCase kGoldenCases[] = {
    {"2x-mi210", "amd-2x-mi210", "mi210", ""},
    {"partitioned", "amd-2x-mi210", "partitioned", ""},
    {"lost", "amd-2x-mi210", "lost", ""},
    {"mixed", "mixed-nvidia-amd-igpu", "mixed-igpu", "mixed-4090"},
};

class AmdSmiGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AmdSmiGoldenTest, MatchesGoldenJson) {
  const GoldenCase& c = GetParam();
  ExpectMatchesGolden(
      ProbeWithAmdSmi(c.host, c.script, DEVPLACE_FAKE_AMDSMI, std::chrono::seconds(5), c.nvml_script),
      std::string(DEVPLACE_AMDSMI_GOLDEN_DIR) + "/" + c.name + ".json",
      std::string("inventory of ") + c.host + " with AMD SMI script " + c.script);
}

INSTANTIATE_TEST_SUITE_P(Cases, AmdSmiGoldenTest, ::testing::ValuesIn(kGoldenCases),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) ch = (ch == '-') ? '_' : ch;
                           return name;
                         });

TEST(AmdSmiGoldenCoverageTest, EveryGoldenHasACase) {
  if (UpdateGoldens()) return;
  std::set<std::string> cases, goldens;
  for (const GoldenCase& c : kGoldenCases) cases.insert(c.name);
  for (const auto& entry : std::filesystem::directory_iterator(DEVPLACE_AMDSMI_GOLDEN_DIR)) {
    goldens.insert(entry.path().stem().string());
  }
  EXPECT_EQ(goldens, cases);
}

}  // namespace
}  // namespace devplace::testing
