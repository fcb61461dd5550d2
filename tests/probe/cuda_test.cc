// The cuda prober with the fake libcuda (tests/fakes/fake_cuda.cc) loaded by a
// real dlopen in the prober's child processes: both enumeration orders end up on the devices,
// the children enumerate the whole host whatever this process's CUDA_* variables say, failures
// are reported, and the resolver then numbers the job's GPUs as the runtime does.
#include <stdlib.h>

#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/build_inventory.h"
#include "server/placement/resolver.h"
#include "server/probe/host/host_root.h"
#include "server/probe/probers.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/placement/inventory_builder.h"
#include "tests/placement/request_builder.h"
#include "tests/probe/nvml_test_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr uint64_t k4GiB = 4294967296;     // nvml/mixed-models.txt, 0000:01:00.0
constexpr uint64_t k11GiB = 11811160064;   // nvml/mixed-models.txt, 0000:02:00.0

std::string CudaScript(const std::string& name) { return std::string(DEVPLACE_FIXTURES_DIR) + "/cuda/" + name + ".txt"; }

// The inventory of fixture `host` with the cuda prober loading `library`, the fake answering
// from cuda/<script>.txt; NVML from nvml/<nvml>.txt when given.
v1::Inventory Probe(const std::string& host, const std::string& script, const std::string& nvml = "",
                    const std::string& library = DEVPLACE_FAKE_CUDA,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  setenv("FAKE_CUDA_CONFIG", CudaScript(script).c_str(), 1);
  probe::ProbeOptions options;
  options.cuda_library = library;
  options.vendor_timeout = timeout;
  if (!nvml.empty()) {
    setenv("FAKE_NVML_CONFIG", NvmlScript(nvml).c_str(), 1);
    options.nvml_library = DEVPLACE_FAKE_NVML;
  }
  return probe::ProbeInventory(probe::HostRoot(HostDir(host)), options);
}

const v1::ProbeReport* Report(const v1::Inventory& inv, const std::string& name) {
  for (const v1::ProbeReport& r : inv.probe_reports()) {
    if (r.name() == name) return &r;
  }
  return nullptr;
}

const v1::Backend& Nvidia(const v1::Inventory& inv) {
  for (const v1::Backend& b : inv.backends()) {
    if (b.row() == v1::ROW_CUDA_NVIDIA) return b;
  }
  static const v1::Backend* none = new v1::Backend;
  return *none;
}

TEST(CudaProber, RecordsBothEnumerationOrdersPerDevice) {
  TempDir dir;
  const std::string log = dir.path() + "/cuda.log";
  setenv("FAKE_CUDA_LOG", log.c_str(), 1);
  // The daemon's own environment must not narrow or reorder the probe's view.
  setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  const v1::Inventory inv = Probe("nvidia-mixed-models", "mixed-models");
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("CUDA_DEVICE_ORDER");
  unsetenv("FAKE_CUDA_LOG");
  const v1::ProbeReport* report = Report(inv, "cuda");
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_OK) << report->message();
  EXPECT_THAT(report->message(), HasSubstr("FASTEST_FIRST (default): 0=0000:02:00.0, 1=0000:01:00.0"));
  EXPECT_THAT(report->message(), HasSubstr("PCI_BUS_ID: 0=0000:01:00.0, 1=0000:02:00.0"));
  EXPECT_THAT(report->message(), HasSubstr("the orders differ"));
  const v1::Backend& nv = Nvidia(inv);
  ASSERT_EQ(nv.devices_size(), 2);
  EXPECT_EQ(nv.devices(0).pci_bus_id(), "0000:01:00.0");  // the GTX 745
  EXPECT_EQ(nv.devices(0).runtime_ordinal(), 1);
  EXPECT_EQ(nv.devices(0).runtime_ordinal_pci(), 0);
  EXPECT_EQ(nv.devices(1).runtime_ordinal(), 0);         // the GTX 1080 Ti: fastest first
  EXPECT_EQ(nv.devices(1).runtime_ordinal_pci(), 1);
  // One child per order, each with CUDA_VISIBLE_DEVICES cleared.
  EXPECT_EQ(ReadFile(log), "cuInit CUDA_DEVICE_ORDER=unset CUDA_VISIBLE_DEVICES=unset\n"
                           "cuInit CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=unset\n");
}

TEST(CudaProber, SkippedOrFailedCasesLeaveTheOrderUnknown) {
  struct Row {
    std::string what, host, script, library;
    v1::ProbeStatus status;
    std::string message;
  };
  const std::vector<Row> rows = {
      {"no device", "nvidia-mixed-models", "no-device", DEVPLACE_FAKE_CUDA, v1::PROBE_STATUS_SKIPPED,
       "cuInit: CUDA_ERROR_NO_DEVICE (100)"},
      {"no library", "nvidia-mixed-models", "mixed-models", "libdevplace-no-such-cuda.so.1", v1::PROBE_STATUS_SKIPPED,
       "not found"},
      {"not libcuda", "nvidia-mixed-models", "mixed-models", DEVPLACE_FAKE_NVML, v1::PROBE_STATUS_ERROR,
       "not a CUDA driver library"},
      {"no NVIDIA GPU", "amd-2x-mi210", "mixed-models", DEVPLACE_FAKE_CUDA, v1::PROBE_STATUS_SKIPPED,
       "no NVIDIA GPU on the PCI bus"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    const v1::Inventory inv = Probe(row.host, row.script, "", row.library);
    const v1::ProbeReport* report = Report(inv, "cuda");
    ASSERT_NE(report, nullptr);
    EXPECT_EQ(report->status(), row.status) << report->message();
    EXPECT_THAT(report->message(), HasSubstr(row.message));
    for (const v1::Device& d : Nvidia(inv).devices()) {
      EXPECT_FALSE(d.has_runtime_ordinal());
      EXPECT_FALSE(d.has_runtime_ordinal_pci());
    }
  }
}

TEST(CudaProber, HungCuInitChildIsKilledAtTheDeadline) {
  // 2 s: the child is killed at 1.5 s, leaving 500 ms to reap it and report on a loaded machine.
  const v1::Inventory inv = Probe("nvidia-mixed-models", "hang", "", DEVPLACE_FAKE_CUDA, std::chrono::seconds(2));
  const v1::ProbeReport* report = Report(inv, "cuda");
  ASSERT_NE(report, nullptr);
  // The child is killed inside the prober's own deadline, so the prober itself finishes: an
  // error naming the call, not an abandoned thread.
  EXPECT_EQ(report->status(), v1::PROBE_STATUS_ERROR) << report->message();
  EXPECT_THAT(report->message(), HasSubstr("child killed at the prober's deadline in cuInit"));
  ASSERT_EQ(Nvidia(inv).devices_size(), 2);  // the rest of the inventory is there
  EXPECT_FALSE(Nvidia(inv).devices(0).has_runtime_ordinal());
}

// The mixed-card reproduction, end to end: GTX 745 at bus 01, GTX 1080 Ti at bus 02.
TEST(CudaProber, ResolvesInTheRuntimesNumbering) {
  const v1::Inventory inv = Probe("nvidia-mixed-models", "mixed-models", "mixed-models");
  auto masked = placement::Resolve(inv, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1"));
  ASSERT_TRUE(masked.ok()) << masked.status();
  EXPECT_EQ(masked->device(), "cuda:0");
  EXPECT_EQ(masked->placed(0).pci_bus_id(), "0000:01:00.0");  // ordinal 1 fastest first: the GTX 745
  EXPECT_EQ(masked->placed(0).name(), "NVIDIA GeForce GTX 745");
  EXPECT_THAT(absl::StrJoin(masked->warnings(), "\n"), ::testing::Not(HasSubstr("may differ")));
  auto pci = placement::Resolve(inv, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1").Env("CUDA_DEVICE_ORDER", "PCI_BUS_ID"));
  ASSERT_TRUE(pci.ok()) << pci.status();
  EXPECT_EQ(pci->placed(0).pci_bus_id(), "0000:02:00.0");
  // device_map=auto: budgets keyed the way the job numbers the cards.
  auto automap = placement::Resolve(inv, Req::Infer("auto"));
  ASSERT_TRUE(automap.ok()) << automap.status();
  EXPECT_EQ(automap->placed(0).pci_bus_id(), "0000:02:00.0");
  EXPECT_THAT(automap->max_memory(), UnorderedElementsAre(Pair("0", k11GiB), Pair("1", k4GiB),
                                                          Pair("cpu", CpuBudget(inv.host().memory_available_bytes()))));
  // Without libcuda the order is unknown: PCI order with the caveat.
  const v1::Inventory blind = ProbeHostWithNvml("nvidia-mixed-models", "mixed-models");
  auto guess = placement::Resolve(blind, Req::Train().Env("CUDA_VISIBLE_DEVICES", "1"));
  ASSERT_TRUE(guess.ok()) << guess.status();
  EXPECT_EQ(guess->placed(0).pci_bus_id(), "0000:02:00.0");
  EXPECT_THAT(absl::StrJoin(guess->warnings(), "\n"), HasSubstr("may differ"));
}

TEST(CudaProber, ProbeBinaryTakesCudaLibraryAndDocumentsIt) {
  const CommandResult r = RunCommand("FAKE_CUDA_CONFIG=" + ShellQuote(CudaScript("mixed-models")) + " " +
                                     ShellQuote(DEVPLACE_PROBE_BINARY) + " --json --nvml_library= --cuda_library=" +
                                     ShellQuote(DEVPLACE_FAKE_CUDA) + " --host_root=" +
                                     ShellQuote(HostDir("nvidia-mixed-models")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"runtimeOrdinal\": 1"));
  EXPECT_THAT(r.out, HasSubstr("\"runtimeOrdinalPci\": 1"));
  const CommandResult help = RunCommand(ShellQuote(DEVPLACE_PROBE_BINARY) + " --help 2>&1");
  EXPECT_THAT(help.out, HasSubstr("--cuda_library"));
  EXPECT_THAT(help.out, HasSubstr("CUDA_DEVICE_ORDER"));
}

}  // namespace
}  // namespace devplace::testing
