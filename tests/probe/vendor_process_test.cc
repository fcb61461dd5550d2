// The vendor-prober runner (server/probe/vendor_libs/vendor_process.h): every vendor prober runs in its own
// child process, forked after the sysfs probers. Probers written here hang, crash, exit and
// merge for real (a real fork, a real signal); the runner must report each one and keep the
// others' data.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/probe/probers.h"
#include "server/probe/vendor_libs/vendor_process.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kH100a[] = "0000:18:00.0";
constexpr char kH100b[] = "0000:9a:00.0";

probe::ProbeRun SysfsRun() { return probe::RunProbers(probe::HostRoot(HostDir("nvidia-2x-h100"))); }

// A prober whose read blocks for good inside `call` on `device`.
probe::VendorProber Hanging(const std::string& name) {
  return {name, [](const probe::HostFacts&, probe::VendorCall& call) -> probe::VendorMerge {
            call.Enter("slowGetEverything", 3);
            for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
          }};
}

// A prober whose read dies of SIGSEGV inside "crashyCall" on device 1.
probe::VendorProber Crashing(const std::string& name) {
  return {name, [](const probe::HostFacts&, probe::VendorCall& call) -> probe::VendorMerge {
            call.Enter("crashyCall", 1);
            std::signal(SIGSEGV, SIG_DFL);
            std::raise(SIGSEGV);
            return nullptr;
          }};
}

// A prober that names the first H100 `name` and records a driver version.
probe::VendorProber Naming(const std::string& prober, const std::string& name) {
  return {prober, [name](const probe::HostFacts& facts, probe::VendorCall& call) -> probe::VendorMerge {
            call.Enter("nameCall");
            const bool saw_sysfs = facts.pci.count(kH100a) == 1;  // a copy of what the probers found
            return [name, saw_sysfs](probe::HostFacts& facts) -> absl::StatusOr<probe::ProbeOutcome> {
              if (!saw_sysfs) return absl::InternalError("the sysfs facts were not there");
              facts.pci.at(kH100a).device.set_name(name);
              facts.driver_versions[v1::ROW_CUDA_NVIDIA] = "1.2.3";
              return probe::Found("named");
            };
          }};
}

const v1::ProbeReport& Last(const probe::ProbeRun& run) { return run.reports.back(); }

TEST(VendorProcessTest, FinishedProberIsMerged) {
  probe::ProbeRun run = SysfsRun();
  probe::RunVendorProber(Naming("quick", "Renamed"), std::chrono::seconds(5), run);
  EXPECT_EQ(Last(run).name(), "quick");
  EXPECT_EQ(Last(run).status(), v1::PROBE_STATUS_OK);
  EXPECT_EQ(Last(run).message(), "named");
  EXPECT_EQ(run.facts.pci.at(kH100a).device.name(), "Renamed");
  EXPECT_EQ(run.facts.driver_versions[v1::ROW_CUDA_NVIDIA], "1.2.3");
}

TEST(VendorProcessTest, TimeoutKillsTheProcessNamesTheCallAndMergesNothing) {
  probe::ProbeRun run = SysfsRun();
  const probe::HostFacts before = run.facts;
  const size_t reports = run.reports.size();
  probe::RunVendorProber(Hanging("slowlib"), std::chrono::milliseconds(100), run);
  ASSERT_EQ(run.reports.size(), reports + 1);
  EXPECT_EQ(Last(run).name(), "slowlib");
  EXPECT_EQ(Last(run).status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_EQ(Last(run).message(),
            "gave up after 100 ms (--probe_timeout): slowGetEverything (device 3) did not return; nothing of slowlib "
            "merged");
  EXPECT_EQ(probe::EncodeFacts(run.facts), probe::EncodeFacts(before));
}

TEST(VendorProcessTest, CrashIsReportedWithTheSignalAndTheCall) {
  probe::ProbeRun run = SysfsRun();
  const probe::HostFacts before = run.facts;
  probe::RunVendorProber(Crashing("crashy"), std::chrono::seconds(5), run);
  EXPECT_EQ(Last(run).name(), "crashy");
  EXPECT_EQ(Last(run).status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_EQ(Last(run).message(),
            "its process was killed by SIGSEGV (Segmentation fault) in crashyCall (device 1); nothing of crashy merged");
  EXPECT_EQ(probe::EncodeFacts(run.facts), probe::EncodeFacts(before));
}

TEST(VendorProcessTest, ExitWithoutAResultIsAnError) {
  probe::ProbeRun run = SysfsRun();
  probe::VendorProber exiting{"exits", [](const probe::HostFacts&, probe::VendorCall& call) -> probe::VendorMerge {
                                call.Enter("libraryCallsExit");
                                _exit(7);
                              }};
  probe::RunVendorProber(exiting, std::chrono::seconds(5), run);
  EXPECT_EQ(Last(run).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(Last(run).message(),
            "its process exited with status 7 in libraryCallsExit without a result; nothing of exits merged");
}

TEST(VendorProcessTest, ErrorOutcomeKeepsWhatTheMergeRecorded) {
  probe::ProbeRun run = SysfsRun();
  probe::VendorProber partial{"partial", [](const probe::HostFacts&, probe::VendorCall&) -> probe::VendorMerge {
                                return [](probe::HostFacts& facts) -> absl::StatusOr<probe::ProbeOutcome> {
                                  facts.pci.at(kH100b).device.set_uuid("GPU-partial");
                                  return absl::InternalError("device 0: unexpected error 99");
                                };
                              }};
  probe::RunVendorProber(partial, std::chrono::seconds(5), run);
  EXPECT_EQ(Last(run).status(), v1::PROBE_STATUS_ERROR);
  EXPECT_EQ(Last(run).message(), "device 0: unexpected error 99");
  EXPECT_EQ(run.facts.pci.at(kH100b).device.uuid(), "GPU-partial");
}

// Several vendor libraries at once: a hung one and a crashing one cost only their own data; the
// reports come in the probers' order; two probers touching different fields of the same device
// both land.
TEST(VendorProcessTest, HangAndCrashCostOnlyTheirOwnProbers) {
  probe::ProbeRun run = SysfsRun();
  const size_t reports = run.reports.size();
  probe::VendorProber uuids{"uuids", [](const probe::HostFacts&, probe::VendorCall&) -> probe::VendorMerge {
                              return [](probe::HostFacts& facts) -> absl::StatusOr<probe::ProbeOutcome> {
                                facts.pci.at(kH100a).device.set_uuid("GPU-a");
                                facts.pci.at(kH100b).device.set_uuid("GPU-b");
                                facts.backend_attributes[v1::ROW_CUDA_NVIDIA]["from_uuids"] = "yes";
                                return probe::Found("2 uuids");
                              };
                            }};
  probe::RunVendorProbers({Hanging("hangs"), Naming("names", "Named"), Crashing("crashes"), uuids},
                          std::chrono::milliseconds(300), run);
  ASSERT_EQ(run.reports.size(), reports + 4);
  EXPECT_EQ(run.reports[reports].name(), "hangs");
  EXPECT_EQ(run.reports[reports].status(), v1::PROBE_STATUS_TIMED_OUT);
  EXPECT_EQ(run.reports[reports + 1].name(), "names");
  EXPECT_EQ(run.reports[reports + 1].status(), v1::PROBE_STATUS_OK);
  EXPECT_EQ(run.reports[reports + 2].name(), "crashes");
  EXPECT_EQ(run.reports[reports + 2].status(), v1::PROBE_STATUS_CRASHED);
  EXPECT_EQ(run.reports[reports + 3].name(), "uuids");
  EXPECT_EQ(run.reports[reports + 3].status(), v1::PROBE_STATUS_OK);
  const v1::Device& a = run.facts.pci.at(kH100a).device;
  EXPECT_EQ(a.name(), "Named");
  EXPECT_EQ(a.uuid(), "GPU-a");
  EXPECT_EQ(run.facts.pci.at(kH100b).device.uuid(), "GPU-b");
  EXPECT_EQ(run.facts.driver_versions[v1::ROW_CUDA_NVIDIA], "1.2.3");
  EXPECT_EQ(run.facts.backend_attributes[v1::ROW_CUDA_NVIDIA]["from_uuids"], "yes");
  EXPECT_EQ(run.facts.pci.size(), 2u);
}

TEST(VendorProcessTest, FactsSurviveTheWire) {
  probe::ProbeRun run = SysfsRun();
  run.facts.pci.at(kH100a).missing_nodes = {"/dev/nvidia0"};
  run.facts.pci.at(kH100a).inaccessible_reason = "refused";
  run.facts.backend_attributes[v1::ROW_CUDA_NVIDIA]["k"] = "v";
  const std::string bytes = probe::EncodeFacts(run.facts);
  absl::StatusOr<probe::HostFacts> back = probe::DecodeFacts(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(probe::EncodeFacts(*back), bytes);
  EXPECT_EQ(back->pci.at(kH100a).sysfs_path, run.facts.pci.at(kH100a).sysfs_path);
  EXPECT_EQ(back->pci.at(kH100a).vendor_id, 0x10de);
  EXPECT_EQ(back->pci.at(kH100a).missing_nodes, std::vector<std::string>{"/dev/nvidia0"});
  EXPECT_EQ(back->host.cpu().threads(), run.facts.host.cpu().threads());
  EXPECT_FALSE(probe::DecodeFacts(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(probe::DecodeFacts(bytes + "x").ok());
}

TEST(VendorProcessTest, ChangesApplyFieldByFieldAndNeverDropADevice) {
  probe::HostFacts before = SysfsRun().facts;
  probe::HostFacts target = before;
  target.pci.at(kH100a).device.set_uuid("GPU-from-an-earlier-prober");
  probe::HostFacts after = before;
  after.pci.at(kH100a).device.set_name("New name");
  after.pci.at(kH100a).device.mutable_attributes()->insert({"mode", "SPX"});
  after.pci.erase(kH100b);
  probe::ApplyVendorChanges(before, after, target);
  EXPECT_EQ(target.pci.at(kH100a).device.name(), "New name");
  EXPECT_EQ(target.pci.at(kH100a).device.uuid(), "GPU-from-an-earlier-prober");
  EXPECT_EQ(target.pci.at(kH100a).device.attributes().at("mode"), "SPX");
  EXPECT_EQ(target.pci.count(kH100b), 1u);
}

TEST(VendorProcessTest, NoProbersNoReports) {
  probe::ProbeRun run = SysfsRun();
  const size_t reports = run.reports.size();
  probe::RunVendorProbers({}, std::chrono::seconds(1), run);
  EXPECT_EQ(run.reports.size(), reports);
}

}  // namespace
}  // namespace devplace::testing
