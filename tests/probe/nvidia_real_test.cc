// NVIDIA's real libraries (Debian non-free: libnvidia-ml1, libcuda1, nvidia-smi; scripts/setup
// installs them) loaded by the probe on this host, which has none of NVIDIA's kernel driver:
// - the probe's diagnosis is nvidia-smi's own (both say the driver is not loaded), and the fake
//   NVML scripted for that case answers exactly as the real library did;
// - the fakes export every function the probe resolves the way the real libraries do (defined,
//   code, same symbol version), so a fake cannot drift from the ABI it stands in for. The list of
//   functions is what the probe really looked up (ld.so's LD_DEBUG=symbols trace of a probe run
//   against the fakes), not a copy of it.
// A missing package or tool makes the test SKIPPED, saying which.
#include <dlfcn.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/probe/defined_symbols.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// The path dlopen finds for `soname`, or "" when it is not installed.
std::string Installed(const std::string& soname) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return "";
  Dl_info info = {};
  std::string path;
  if (void* sym = dlsym(handle, soname.rfind("libcuda", 0) == 0 ? "cuInit" : "nvmlInit_v2");
      sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    path = info.dli_fname;
  }
  dlclose(handle);
  return path;
}

// Declares `var`, the path of `soname`; skips the test when it is not installed.
#define SKIP_WITHOUT(var, soname, package)                                                     \
  const std::string var = Installed(soname);                                                   \
  if (var.empty()) GTEST_SKIP() << soname << " is not installed (Debian non-free package " << package \
                                << "; scripts/setup installs it)"

// devplace-probe --json on `host` with the given library flags (every other library off).
v1::Inventory Probe(const std::string& host, const std::string& flags, const std::string& env = "",
                    std::string* err = nullptr) {
  const CommandResult r = RunCommand(env + " " + ShellQuote(DEVPLACE_PROBE_BINARY) + " --host_root=" +
                                     ShellQuote(HostDir(host)) + " --json" + NoVendorLibraryFlags() + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  v1::Inventory inv;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &inv).ok()) << r.out;
  if (err != nullptr) *err = r.err;
  return inv;
}

const v1::ProbeReport& ReportOf(const v1::Inventory& inv, const std::string& name) {
  static const v1::ProbeReport kNone;
  const v1::ProbeReport* report = FindReport(inv, name);
  EXPECT_NE(report, nullptr) << "no " << name << " report";
  return report != nullptr ? *report : kNone;
}

// nvidia-smi's exit status and output on this host.
CommandResult NvidiaSmi() { return RunCommand("nvidia-smi 2>&1"); }

TEST(NvidiaRealLibraries, ProbeDiagnosisAgreesWithNvidiaSmi) {
  SKIP_WITHOUT(nvml_path, "libnvidia-ml.so.1", "libnvidia-ml1");
  if (RunCommand("command -v nvidia-smi").exit_code != 0) GTEST_SKIP() << "nvidia-smi is not installed (Debian non-free package nvidia-smi)";
  const CommandResult smi = NvidiaSmi();
  // nvidia-smi(1), RETURN VALUE: 9 is "NVIDIA driver is not loaded".
  if (smi.exit_code != 9) GTEST_SKIP() << "nvidia-smi exit " << smi.exit_code << " (not a host without the driver): " << smi.out;
  EXPECT_THAT(smi.out, HasSubstr("couldn't communicate with the NVIDIA driver"));
  const v1::Inventory inv = Probe("nvidia-2x-h100", "--nvml_library=libnvidia-ml.so.1");
  const v1::ProbeReport& nvml = ReportOf(inv, "nvml");
  EXPECT_EQ(nvml.status(), v1::PROBE_STATUS_SKIPPED) << nvml.message();
  EXPECT_EQ(nvml.message(), "NVIDIA driver not loaded: nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)");
  // The GPUs stay as the PCI scan found them.
  const v1::Backend* cuda = FindRow(inv, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(cuda->devices_size(), 2);
}

TEST(NvidiaRealLibraries, FakeNvmlAnswersADriverlessHostAsTheRealOneDoes) {
  SKIP_WITHOUT(nvml_path, "libnvidia-ml.so.1", "libnvidia-ml1");
  if (NvidiaSmi().exit_code != 9) GTEST_SKIP() << "not a host without the NVIDIA driver (nvidia-smi does not exit 9)";
  const v1::ProbeReport real = ReportOf(Probe("nvidia-2x-h100", "--nvml_library=libnvidia-ml.so.1"), "nvml");
  const v1::ProbeReport fake =
      ReportOf(Probe("nvidia-2x-h100", std::string("--nvml_library=") + ShellQuote(DEVPLACE_FAKE_NVML),
                     "FAKE_NVML_CONFIG=" + ShellQuote(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/driver-not-loaded.txt")),
               "nvml");
  EXPECT_EQ(fake.status(), real.status());
  EXPECT_EQ(fake.message(), real.message());
}

TEST(NvidiaRealLibraries, RealLibcudaOnADriverlessHostAndTheFakeAgree) {
  SKIP_WITHOUT(cuda_path, "libcuda.so.1", "libcuda1");
  if (NvidiaSmi().exit_code != 9) GTEST_SKIP() << "not a host without the NVIDIA driver (nvidia-smi does not exit 9)";
  const v1::ProbeReport real = ReportOf(Probe("nvidia-2x-h100", "--cuda_library=libcuda.so.1"), "cuda");
  // No driver: no numbering, and the probe says why rather than failing.
  EXPECT_EQ(real.status(), v1::PROBE_STATUS_SKIPPED) << real.message();
  EXPECT_EQ(real.message(), "cuInit: CUDA_ERROR_NO_DEVICE (100)");
  // The fake libcuda scripted for a driver without a usable GPU answers the same.
  const v1::ProbeReport fake =
      ReportOf(Probe("nvidia-2x-h100", std::string("--cuda_library=") + ShellQuote(DEVPLACE_FAKE_CUDA),
                     "FAKE_CUDA_CONFIG=" + ShellQuote(std::string(DEVPLACE_FIXTURES_DIR) + "/cuda/no-device.txt")),
               "cuda");
  EXPECT_EQ(fake.status(), real.status());
  EXPECT_EQ(fake.message(), real.message());
}

// The symbols the probe looked up in `library` during a run (ld.so's LD_DEBUG=symbols lines
// "symbol=<name>;  lookup in file=<library> [n]"): its dlsym calls, as the library is opened
// RTLD_LOCAL and nothing else binds to it.
std::set<std::string> LookedUp(const std::string& trace, const std::string& library, const std::string& prefix) {
  std::set<std::string> out;
  const std::string in_file = ";  lookup in file=" + library + " [";
  for (absl::string_view line : absl::StrSplit(trace, '\n')) {
    const size_t at = line.find("symbol=");
    if (at == absl::string_view::npos || line.find(in_file) == absl::string_view::npos) continue;
    absl::string_view name = line.substr(at + 7);
    name = name.substr(0, name.find(';'));
    if (absl::StartsWith(name, prefix)) out.emplace(name);
  }
  return out;
}

// For every function the probe resolves, the fake defines it as the real library does.
void ExpectSameAbi(const std::string& what, const std::set<std::string>& resolved, const std::string& real,
                   const std::string& fake) {
  const std::map<std::string, std::string> real_symbols = DefinedSymbols(real), fake_symbols = DefinedSymbols(fake);
  ASSERT_FALSE(real_symbols.empty()) << real;
  for (const std::string& name : resolved) {
    const auto r = real_symbols.find(name);
    const auto f = fake_symbols.find(name);
    ASSERT_NE(r, real_symbols.end()) << what << ": the probe resolves " << name << ", which " << real << " does not define";
    ASSERT_NE(f, fake_symbols.end()) << what << ": the fake " << fake << " lacks " << name << " (real: " << r->second << ")";
    EXPECT_EQ(f->second, r->second) << what << ": " << name << " (symbol type and version, nm -D)";
  }
}

TEST(FakeAbi, FakesExportWhatTheProbeResolvesAsTheRealLibrariesDo) {
  SKIP_WITHOUT(nvml_path, "libnvidia-ml.so.1", "libnvidia-ml1");
  SKIP_WITHOUT(cuda_path, "libcuda.so.1", "libcuda1");
  if (RunCommand("command -v nm").exit_code != 0) GTEST_SKIP() << "nm is not installed (binutils)";
  const std::string fixtures = DEVPLACE_FIXTURES_DIR;
  std::string trace;
  Probe("nvidia-mixed-models",
        std::string("--nvml_library=") + ShellQuote(DEVPLACE_FAKE_NVML) + " --cuda_library=" + ShellQuote(DEVPLACE_FAKE_CUDA),
        "LD_DEBUG=symbols FAKE_NVML_CONFIG=" + ShellQuote(fixtures + "/nvml/mixed-models.txt") +
            " FAKE_CUDA_CONFIG=" + ShellQuote(fixtures + "/cuda/mixed-models.txt"),
        &trace);
  const std::set<std::string> nvml = LookedUp(trace, DEVPLACE_FAKE_NVML, "nvml");
  const std::set<std::string> cuda = LookedUp(trace, DEVPLACE_FAKE_CUDA, "cu");
  // The probe's required entry points are among them: the trace did see its dlsym calls.
  EXPECT_THAT(nvml, ::testing::IsSupersetOf({"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2",
                                             "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMemoryInfo"}));
  EXPECT_THAT(cuda, ::testing::IsSupersetOf({"cuInit", "cuDeviceGetCount", "cuDeviceGetPCIBusId"}));
  ExpectSameAbi("NVML", nvml, nvml_path, DEVPLACE_FAKE_NVML);
  ExpectSameAbi("libcuda", cuda, cuda_path, DEVPLACE_FAKE_CUDA);
}

// The XID watcher's event calls (devplace-probe --watch_xid) against the real library, the same
// way: what the watcher looked up, up to a wait that fails so that it ends.
TEST(FakeAbi, TheXidWatchersEventCallsAreExportedAsTheRealLibraryDoes) {
  SKIP_WITHOUT(nvml_path, "libnvidia-ml.so.1", "libnvidia-ml1");
  if (RunCommand("command -v nm").exit_code != 0) GTEST_SKIP() << "nm is not installed (binutils)";
  TempDir dir;
  const std::string script = dir.path() + "/nvml.txt";
  RunCommand("cat " + ShellQuote(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/h100.txt") + " > " + ShellQuote(script) +
             " && echo 'fail nvmlEventSetWait_v2 - UNKNOWN' >> " + ShellQuote(script));
  const CommandResult r = RunCommand("LD_DEBUG=symbols FAKE_NVML_CONFIG=" + ShellQuote(script) + " " +
                                     ShellQuote(DEVPLACE_PROBE_BINARY) + " --watch_xid --nvml_library=" +
                                     ShellQuote(DEVPLACE_FAKE_NVML));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("watching 2 2\n"));
  const std::set<std::string> nvml = LookedUp(r.err, DEVPLACE_FAKE_NVML, "nvml");
  EXPECT_THAT(nvml, ::testing::IsSupersetOf({"nvmlEventSetCreate", "nvmlDeviceGetSupportedEventTypes",
                                             "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlEventSetFree"}));
  ExpectSameAbi("NVML", nvml, nvml_path, DEVPLACE_FAKE_NVML);
}

}  // namespace
}  // namespace devplace::testing
