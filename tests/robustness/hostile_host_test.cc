// The probe against a hostile host tree (the sysfs a local user or a broken driver could present):
// a 1 MiB cpulist of huge ranges under an address-space cap, and FIFOs where sysfs attributes
// should be, for the standalone devplace-probe and `devplace probe`. Each runs the real binary on a
// copy of a fixture host, bounded in time by `timeout` (a Debian program), and is measured with
// GNU time.
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "devplace/v1/devplace.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/no_vendor_libraries.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// No vendor library: only the sysfs/procfs probers run.
const std::string kNoLibraries = NoVendorLibraryFlags();

struct Measured {
  CommandResult result;
  int64_t max_rss_kib = -1;
  double seconds = -1;
};

// Runs `command` (shell words) under `timeout -s KILL <limit>` and GNU time, which writes the peak
// RSS and the elapsed time to `stats` (stderr stays the command's).
Measured RunMeasured(const TempDir& dir, const std::string& command, int limit_s) {
  const std::string stats = dir.File("time.txt");
  Measured m;
  m.result = RunCommand(absl::StrCat("/usr/bin/time -o ", stats, " -f '%M %e' timeout -s KILL ", limit_s, " ", command));
  const std::vector<std::string> words = absl::StrSplit(absl::StripAsciiWhitespace(ReadFile(stats)), ' ');
  if (words.size() >= 2) {
    absl::SimpleAtoi(words[words.size() - 2], &m.max_rss_kib);
    absl::SimpleAtod(words.back(), &m.seconds);
  }
  return m;
}

// 1 MiB of "0-1048575," ranges (each the widest one range may be): about 105,000 ranges naming
// 2^20 CPUs each, 110 billion in all before duplicates are merged.
std::string CpuListBomb() {
  std::string list;
  while (list.size() + 10 < (1u << 20)) list += "0-1048575,";
  list += "7\n";
  return list;
}

TEST(HostileHost, CpuListBombIsRefusedUnderAnAddressSpaceCap) {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves ~15 TB of shadow address space at start, so no binary of this build
  // can run under an address-space cap at all. The cap is asserted in the ordinary builds.
  GTEST_SKIP() << "an AddressSanitizer binary cannot start under prlimit --as";
#endif
  TempDir dir;
  ASSERT_EQ(RunCommand(absl::StrCat("cp -r ", ShellQuote(FixtureHost("cpu-only")), " ", dir.File("host"))).exit_code, 0);
  dir.Write("host/sys/devices/system/cpu/online", CpuListBomb());
  dir.Write("host/sys/devices/system/node/node0/cpulist", CpuListBomb());
  // A 1 GiB address-space cap, set by Debian's prlimit: before the fix the probe materialised each
  // CPU (2.7 GB in the daemon's child, 4.2 GB standalone) and died of std::bad_alloc here.
  const Measured m = RunMeasured(
      dir,
      absl::StrCat("prlimit --as=", uint64_t{1} << 30, " ", ShellQuote(DEVPLACE_PROBE_BINARY), " --json --probe_timeout=20s",
                   " --host_root=", dir.File("host"), kNoLibraries),
      60);
  ASSERT_EQ(m.result.exit_code, 0) << m.result.err;
  const v1::Inventory inv = ParseInventoryJson(m.result.out);
  const v1::ProbeReport* cpu = FindReport(inv, "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(cpu->message(), "/sys/devices/system/cpu/online names 1048576 CPUs, more than the 65536 accepted");
  const v1::ProbeReport* numa = FindReport(inv, "numa");
  ASSERT_NE(numa, nullptr);
  EXPECT_EQ(numa->status(), v1::PROBE_STATUS_OK) << numa->message();  // a well-formed list: kept as text
  // The rest of the inventory is still there.
  EXPECT_EQ(inv.host().hostname(), "cpu-only");
  EXPECT_GT(inv.host().memory_total_bytes(), 0u);
  // One pair per range: a few MB over the binary's own size, in well under the deadline.
  EXPECT_LT(m.max_rss_kib, 64 * 1024) << "peak RSS " << m.max_rss_kib << " KiB";
  EXPECT_LT(m.seconds, 10) << m.seconds << " s";
  std::printf("cpulist bomb: exit %d, peak RSS %lld KiB, %.2f s\n", m.result.exit_code,
              static_cast<long long>(m.max_rss_kib), m.seconds);
}

// A host whose online-CPU list and a GPU's PCI vendor attribute are FIFOs that nothing writes:
// opening either for reading would block for good.
void MakeFifoHost(const TempDir& dir) {
  ASSERT_EQ(RunCommand(absl::StrCat("cp -r ", ShellQuote(FixtureHost("nvidia-2x-h100")), " ", dir.File("host"))).exit_code, 0);
  for (const std::string rel : {"host/sys/devices/system/cpu/online", "host/sys/bus/pci/devices/0000:18:00.0/vendor"}) {
    ASSERT_EQ(RunCommand(absl::StrCat("rm -f '", dir.File(rel), "' && mkfifo '", dir.File(rel), "'")).exit_code, 0);
  }
}

void ExpectFifoHostProbed(const Measured& m) {
  // Before the fix: still blocked in open(2) when `timeout` killed it (exit 137).
  ASSERT_EQ(m.result.exit_code, 0) << m.result.err;
  EXPECT_LT(m.seconds, 5.0) << "--probe_timeout=5s is for the whole probe";
  const v1::Inventory inv = ParseInventoryJson(m.result.out);
  const v1::ProbeReport* cpu = FindReport(inv, "cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->status(), v1::PROBE_STATUS_OK) << cpu->message();  // online unreadable: /proc/cpuinfo's count
  const v1::ProbeReport* pci = FindReport(inv, "pci");
  ASSERT_NE(pci, nullptr);
  EXPECT_THAT(pci->message(), HasSubstr("0000:18:00.0/vendor is a FIFO, not a regular file"));
  std::printf("FIFO host: exit %d, %.2f s\n", m.result.exit_code, m.seconds);
}

TEST(HostileHost, FifoInSysfsStandaloneProbeFinishesWithinItsTimeout) {
  TempDir dir;
  MakeFifoHost(dir);
  ExpectFifoHostProbed(RunMeasured(
      dir, absl::StrCat(ShellQuote(DEVPLACE_PROBE_BINARY), " --json --probe_timeout=5s --host_root=", dir.File("host"), kNoLibraries),
      30));
}

TEST(HostileHost, FifoInSysfsCliProbeFinishesWithinItsTimeout) {
  TempDir dir;
  MakeFifoHost(dir);
  ExpectFifoHostProbed(RunMeasured(
      dir, absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " probe --json --probe_timeout=5s --host_root=", dir.File("host"), kNoLibraries),
      30));
}

}  // namespace
}  // namespace devplace::testing
