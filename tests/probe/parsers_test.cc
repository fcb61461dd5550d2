// Parsers on literal strings and on the fixture hosts' real files.
#include "server/probe/host/parsers.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/probers.h"
#include "tests/probe/test_util.h"

namespace devplace::probe {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::IsSupersetOf;
using ::testing::Pair;

std::string ReadFixture(const std::string& host, const std::string& rel) {
  std::ifstream in(testing::HostDir(host) + "/" + rel, std::ios::binary);
  EXPECT_TRUE(in.good()) << host << "/" << rel;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(NormalizePciBusIdTest, AcceptsSysfsNvmlLegacyAndShortForms) {
  EXPECT_EQ(NormalizePciBusId("0000:9a:00.0").value(), "0000:9a:00.0");
  EXPECT_EQ(NormalizePciBusId("00000000:9A:00.0").value(), "0000:9a:00.0");  // NVML busId
  EXPECT_EQ(NormalizePciBusId("00000000:18:00.0").value(), "0000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:9A:00.0").value(), "0000:9a:00.0");      // NVML busIdLegacy
  EXPECT_EQ(NormalizePciBusId("9a:00.0").value(), "0000:9a:00.0");
  EXPECT_EQ(NormalizePciBusId(" 0000:0e:1f.7\n").value(), "0000:0e:1f.7");
  EXPECT_EQ(NormalizePciBusId("10000:E1:0.1").value(), "10000:e1:00.1");    // VMD domain
}

TEST(NormalizePciBusIdTest, RejectsMalformedIds) {
  for (const char* bad : {"", "0000:9a:00", "0000:9a:00.8", "0000:9a:20.0", "0000:9g:00.0",
                          "000000000:9a:00.0", "0000:9a:00.0.0", "0000:123:00.0", "card1"}) {
    EXPECT_FALSE(NormalizePciBusId(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(NormalizePciBusId("0000:9a:00.8").status().message()),
              ::testing::HasSubstr("function above 7"));
}

TEST(ParseHexTest, SysfsIds) {
  EXPECT_EQ(ParseHex("0x10de\n").value(), 0x10deu);
  EXPECT_EQ(ParseHex("0x030200").value(), 0x030200u);
  EXPECT_EQ(ParseHex("740F").value(), 0x740fu);
  EXPECT_EQ(ParseHex(ReadFixture("nvidia-2x-h100", "sys/bus/pci/devices/0000:18:00.0/class")).value(), 0x030200u);
  EXPECT_FALSE(ParseHex("0x").ok());
  EXPECT_FALSE(ParseHex("garbage").ok());
}

TEST(ParseDecimalTest, SignedNumaNode) {
  EXPECT_EQ(ParseDecimal("-1\n").value(), -1);
  EXPECT_EQ(ParseDecimal(ReadFixture("nvidia-2x-h100", "sys/bus/pci/devices/0000:9a:00.0/numa_node")).value(), 1);
  EXPECT_FALSE(ParseDecimal("one").ok());
}

TEST(ParseCpuListTest, RangesListsAndEmpty) {
  EXPECT_THAT(ParseCpuList("0-1,4-5\n").value(), ElementsAre(0, 1, 4, 5));
  EXPECT_THAT(ParseCpuList("3,1,2-3").value(), ElementsAre(1, 2, 3));
  EXPECT_THAT(ParseCpuList("").value(), IsEmpty());
  EXPECT_THAT(ParseCpuList("\n").value(), IsEmpty());
  EXPECT_THAT(ParseCpuList(ReadFixture("cpu-only", "sys/devices/system/node/node1/cpulist")).value(),
              ElementsAre(2, 3, 6, 7));
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
  EXPECT_FALSE(ParseCpuList("1-2-3").ok());
  EXPECT_FALSE(ParseCpuList("1,,2").ok());
}

TEST(ParseCpuRangesTest, MergesRangesWithoutMaterialisingCpus) {
  const CpuRanges merged = ParseCpuRanges("8-9,0-3,4,2-5,11\n").value();
  EXPECT_THAT(merged.ranges, ElementsAre(std::make_pair(0u, 5u), std::make_pair(8u, 9u), std::make_pair(11u, 11u)));
  EXPECT_EQ(merged.count, 9u);
  // 1 MiB of the widest range a list may hold, repeated: one range of 2^20 CPUs, not 10^11 entries.
  std::string bomb;
  while (bomb.size() < (1u << 20)) bomb += "0-1048575,";
  bomb += "4294967295";
  const CpuRanges parsed = ParseCpuRanges(bomb).value();
  EXPECT_THAT(parsed.ranges, ElementsAre(std::make_pair(0u, 1048575u), std::make_pair(4294967295u, 4294967295u)));
  EXPECT_EQ(parsed.count, (uint64_t{1} << 20) + 1);
  EXPECT_EQ(ParseCpuList(bomb).status().message(), "cpulist names 1048577 CPUs, more than the 65536 accepted");
  EXPECT_EQ(ParseCpuRanges("0-1048576").status().message(), "bad cpulist \"0-1048576\"");
  EXPECT_EQ(ParseCpuRanges(bomb + ",x").status().message(),
            "bad cpulist \"0-1048575,0-1048575,0-1048575,0-1048575,0-1048575,0-1048575,0-10...\"");
}

TEST(ParseColonFieldsTest, NvidiaInformationFile) {
  EXPECT_THAT(ParseColonFields(ReadFixture("nvidia-2x-h100", "proc/driver/nvidia/gpus/0000:9a:00.0/information")),
              IsSupersetOf({Pair("Model", "NVIDIA H100 80GB HBM3"),
                            Pair("GPU UUID", "GPU-00000000-0000-4000-8000-000000000002"),
                            Pair("Bus Location", "0000:9a:00.0"), Pair("Device Minor", "1"), Pair("GPU Excluded", "No")}));
}

TEST(ParseColonFieldsTest, CambriconInformationFile) {
  EXPECT_THAT(ParseColonFields(ReadFixture("mlu-2x-mlu370", "proc/driver/cambricon/mlus/0000:5e:00.0/information")),
              IsSupersetOf({Pair("Device name", "MLU370-X8"), Pair("Device Minor", "1"),
                            Pair("Driver Version", "v5.10.22"), Pair("Device inode path", "/dev/cambricon_dev1")}));
}

TEST(ParseColonFieldsTest, FirstOccurrenceWinsAndJunkIgnored) {
  EXPECT_THAT(ParseColonFields("a: 1\nno colon\na: 2\n b :\t3 \n"), ElementsAre(Pair("a", "1"), Pair("b", "3")));
}

TEST(ParseSpaceFieldsTest, KfdProperties) {
  const auto props = ParseSpaceFields(ReadFixture("amd-2x-mi210", "sys/class/kfd/kfd/topology/nodes/3/properties"));
  EXPECT_EQ(props.at("simd_count"), "416");
  EXPECT_EQ(props.at("location_id"), "33536");
  EXPECT_EQ(props.at("drm_render_minor"), "129");
  EXPECT_EQ(props.at("gfx_target_version"), "90010");
}

TEST(ParseMeminfoBytesTest, ProcAndNodeMeminfo) {
  const auto proc = ParseMeminfoBytes(ReadFixture("cpu-only", "proc/meminfo"));
  EXPECT_EQ(proc.at("MemTotal"), 131072000ull * 1024);
  EXPECT_EQ(proc.at("MemAvailable"), 124518400ull * 1024);
  const auto node = ParseMeminfoBytes(ReadFixture("cpu-only", "sys/devices/system/node/node0/meminfo"));
  EXPECT_EQ(node.at("MemTotal"), 65536000ull * 1024);
  EXPECT_EQ(ParseMeminfoBytes("HugePages_Total:       0\nBad: x kB\n"), (std::map<std::string, uint64_t>{{"HugePages_Total", 0}}));
}

TEST(ParseMigMinorsTest, DriverFile) {
  const auto minors = ParseMigMinors(ReadFixture("nvidia-mig", "proc/driver/nvidia-caps/mig-minors")).value();
  EXPECT_EQ(minors.size(), 2u + 2 * 15 * 9);
  EXPECT_EQ(minors.at("config"), 1u);
  EXPECT_EQ(minors.at("monitor"), 2u);
  EXPECT_EQ(minors.at("gpu0/gi0/access"), 3u);
  EXPECT_EQ(minors.at("gpu0/gi1/access"), 12u);
  EXPECT_EQ(minors.at("gpu0/gi1/ci0/access"), 13u);
  EXPECT_EQ(minors.at("gpu1/gi0/access"), 138u);
}

TEST(ParseMigMinorsTest, RejectsMalformedLines) {
  EXPECT_FALSE(ParseMigMinors("config 1\ngpu0/gi1/access\n").ok());
  EXPECT_FALSE(ParseMigMinors("config one\n").ok());
  EXPECT_TRUE(ParseMigMinors("").value().empty());
}

TEST(ParseNvidiaDriverVersionTest, ProcVersionFile) {
  EXPECT_EQ(ParseNvidiaDriverVersion(ReadFixture("nvidia-2x-h100", "proc/driver/nvidia/version")).value(), "550.54.15");
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n").value(),
            "535.104.05");
  EXPECT_TRUE(absl::IsNotFound(ParseNvidiaDriverVersion("GCC version: 12.2.0\n").status()));
}

TEST(GfxTargetNameTest, KfdVersions) {
  EXPECT_EQ(GfxTargetName(90010), "gfx90a");
  EXPECT_EQ(GfxTargetName(90402), "gfx942");
  EXPECT_EQ(GfxTargetName(100306), "gfx1036");
  EXPECT_EQ(GfxTargetName(110000), "gfx1100");
}

struct CpuInfoCase {
  const char* host;
  const char* architecture;
  const char* vendor;
  const char* model_name;  // arm64 cpuinfo has none
  uint32_t processors;
  std::vector<const char*> some_features;
  const char* torch_capability;
};

class ParseCpuInfoFixtureTest : public ::testing::TestWithParam<CpuInfoCase> {};

TEST_P(ParseCpuInfoFixtureTest, ParsesFixtureCpuinfo) {
  const CpuInfoCase& c = GetParam();
  const CpuInfo info = ParseCpuInfo(ReadFixture(c.host, "proc/cpuinfo")).value();
  EXPECT_EQ(info.architecture, c.architecture);
  EXPECT_EQ(info.vendor, c.vendor);
  EXPECT_EQ(info.model_name, c.model_name);
  EXPECT_EQ(info.processors, c.processors);
  for (const char* feature : c.some_features) EXPECT_TRUE(info.features.count(feature)) << feature;
  EXPECT_EQ(TorchCpuCapability(info.architecture, info.features), c.torch_capability);
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, ParseCpuInfoFixtureTest,
    ::testing::Values(
        CpuInfoCase{"cpu-only", "x86_64", "GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+", 8,
                    {"amx_tile", "avx512_bf16"}, "AVX512"},
        CpuInfoCase{"arm64-cpu", "aarch64", "0x41", "", 4, {"sve2", "i8mm"}, "SVE256"},
        CpuInfoCase{"npu-2x-910b", "aarch64", "0x48", "", 4, {"asimd"}, "DEFAULT"},
        CpuInfoCase{"xpu-2x-arc", "x86_64", "GenuineIntel", "13th Gen Intel(R) Core(TM) i9-13900K", 4,
                    {"avx2", "avx_vnni"}, "AVX2"}));

TEST(ParseCpuInfoTest, RejectsEmpty) { EXPECT_FALSE(ParseCpuInfo("").ok()); }

TEST(TorchCpuCapabilityTest, Rules) {
  EXPECT_EQ(TorchCpuCapability("x86_64", {"avx512f", "avx512bw", "avx512vl", "avx2", "fma"}), "AVX2");
  EXPECT_EQ(TorchCpuCapability("x86_64", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}), "AVX512");
  EXPECT_EQ(TorchCpuCapability("x86_64", {"avx2"}), "NO AVX");
  EXPECT_EQ(TorchCpuCapability("x86_64", {}), "NO AVX");
  EXPECT_EQ(TorchCpuCapability("aarch64", {"asimd", "bf16"}), "DEFAULT");
  EXPECT_EQ(TorchCpuCapability("", {}), "DEFAULT");
}

}  // namespace
}  // namespace devplace::probe
