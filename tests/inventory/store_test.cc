// InventoryStore with real probe processes: revisions on fixture hosts, last-good snapshots across
// every kind of probe failure, coalesced refreshes, subscribers, the augment hook and the timer.
#include "server/inventory/store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/eventually.h"
#include "tests/common/temp_dir.h"
#include "tests/inventory/child_util.h"
#include "tests/probe/test_util.h"

namespace devplace::testing {
namespace {

using inventory::InventoryStore;
using inventory::StoreOptions;
using inventory::ProbeOutcome;
using inventory::MergeUsage;
using inventory::SameContent;
using inventory::Snapshot;
using ::testing::HasSubstr;

StoreOptions ProbeOf(const std::string& host_root) {
  StoreOptions options;
  options.probe_command = ProbeCommand(host_root);
  return options;
}

// Collects what a subscriber was given.
class Recorder {
 public:
  InventoryStore::Callback callback() {
    return [this](const Snapshot& s) {
      absl::MutexLock lock(&mu_);
      seen_.push_back(s);
    };
  }
  std::vector<Snapshot> seen() const {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Snapshot> seen_;
};

TEST(SameContentTest, IgnoresRevisionTimestampDurationsAndTelemetryOnly) {
  v1::Inventory a;
  a.mutable_host()->set_hostname("h");
  a.add_probe_reports()->set_name("pci");
  v1::Inventory b = a;
  b.set_revision(7);
  b.mutable_probed_at()->set_seconds(123);
  b.mutable_probe_reports(0)->set_duration_ms(42);
  EXPECT_TRUE(SameContent(a, b));
  b.mutable_host()->set_memory_available_bytes(1);  // telemetry: not a new revision
  b.add_backends()->add_devices()->set_memory_free_bytes(5);
  a.add_backends()->add_devices()->set_memory_free_bytes(9);
  EXPECT_TRUE(SameContent(a, b));
  b.mutable_host()->set_memory_total_bytes(1);
  EXPECT_FALSE(SameContent(a, b));
  b = a;
  b.mutable_probe_reports(0)->set_message("found 1 device");
  EXPECT_FALSE(SameContent(a, b));
}

TEST(SameContentTest, UsageFiguresAreTelemetryButWhoUsesADeviceIsContent) {
  v1::Inventory a;
  v1::Device& d = *a.add_backends()->add_devices();
  v1::DeviceUsage& u = *d.mutable_usage();
  u.set_source("nvml");
  u.set_processes_known(true);
  u.set_process_count(1);
  u.add_processes()->set_pid(42);
  d.add_partitions()->set_memory_free_bytes(1);
  v1::Inventory b = a;
  b.mutable_usage_read_at()->set_seconds(99);
  b.mutable_backends(0)->mutable_devices(0)->mutable_usage()->set_memory_used_bytes(5);
  b.mutable_backends(0)->mutable_devices(0)->mutable_usage()->mutable_processes(0)->set_used_memory_bytes(5);
  b.mutable_backends(0)->mutable_devices(0)->mutable_partitions(0)->set_memory_free_bytes(7);
  EXPECT_TRUE(SameContent(a, b));
  b.mutable_backends(0)->mutable_devices(0)->mutable_usage()->mutable_processes(0)->set_pid(43);
  EXPECT_FALSE(SameContent(a, b));
  b = a;
  b.mutable_backends(0)->mutable_devices(0)->mutable_usage()->set_busy(true);
  EXPECT_FALSE(SameContent(a, b));
}

// Answers budget with a known free memory (rule I-MEM) and leave max_memory empty, with a warning,
// without one: a figure that appears or goes is a new revision, its value moving is not.
TEST(SameContentTest, WhetherFreeMemoryIsKnownIsContent) {
  v1::Inventory a;
  v1::Device& d = *a.add_backends()->add_devices();
  d.set_memory_free_bytes(10);
  d.add_partitions()->set_memory_free_bytes(1);
  v1::Inventory b = a;
  b.mutable_backends(0)->mutable_devices(0)->set_memory_free_bytes(20);
  EXPECT_TRUE(SameContent(a, b));
  b.mutable_backends(0)->mutable_devices(0)->clear_memory_free_bytes();
  EXPECT_FALSE(SameContent(a, b));
  EXPECT_FALSE(SameContent(b, a));
  b = a;
  b.mutable_backends(0)->mutable_devices(0)->mutable_partitions(0)->clear_memory_free_bytes();
  EXPECT_FALSE(SameContent(a, b));
}

TEST(MergeUsageTest, ReplacesUsageAndFreeMemoryByBusIdAndClearsWhatTheReadLacks) {
  v1::Inventory into;
  v1::Backend& b = *into.add_backends();
  b.set_row(v1::ROW_CUDA_NVIDIA);
  for (const char* bus : {"0000:18:00.0", "0000:9a:00.0", "0000:aa:00.0"}) {
    v1::Device& d = *b.add_devices();
    d.set_pci_bus_id(bus);
    d.set_memory_free_bytes(100);
    d.mutable_usage()->set_process_count(9);
  }
  b.mutable_devices(1)->add_partitions()->set_uuid("MIG-a");
  v1::Inventory usage;
  v1::Backend& ub = *usage.add_backends();
  ub.set_row(v1::ROW_CUDA_NVIDIA);
  v1::Device& u0 = *ub.add_devices();
  u0.set_pci_bus_id("0000:18:00.0");
  u0.set_memory_free_bytes(60);
  u0.mutable_usage()->set_process_count(1);
  v1::Device& u1 = *ub.add_devices();
  u1.set_pci_bus_id("0000:9a:00.0");  // read without usage or free memory
  v1::Partition& p = *u1.add_partitions();
  p.set_uuid("MIG-a");
  p.set_memory_free_bytes(7);
  p.mutable_usage()->set_process_count(2);
  MergeUsage(usage, absl::FromUnixSeconds(1000), into);
  EXPECT_EQ(into.backends(0).devices(0).memory_free_bytes(), 60u);
  EXPECT_EQ(into.backends(0).devices(0).usage().process_count(), 1u);
  EXPECT_FALSE(into.backends(0).devices(1).has_usage());
  EXPECT_FALSE(into.backends(0).devices(1).has_memory_free_bytes());
  EXPECT_EQ(into.backends(0).devices(1).partitions(0).usage().process_count(), 2u);
  EXPECT_EQ(into.backends(0).devices(1).partitions(0).memory_free_bytes(), 7u);
  EXPECT_FALSE(into.backends(0).devices(2).has_usage());  // not in the read: unknown now
  EXPECT_EQ(into.backends(0).devices(2).memory_free_bytes(), 100u);
  EXPECT_EQ(into.usage_read_at().seconds(), 1000);
}

// The usage refresh re-reads what the full probe read, and nothing else: on a host whose files do
// not move, merging it leaves every device's usage and free memory as the full probe had them, and
// the revision stays 1. (A usage read that lacked a full prober's figures, e.g. Neuron's per-core
// device memory, would erase them at the first refresh after start-up: the answers of one revision
// would then differ, with and without placed[].memory_free_bytes, by when they were asked.)
TEST(InventoryStoreTest, AUsageRefreshOnASettledHostChangesNothingOnEveryFixtureHost) {
  std::vector<std::string> hosts;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(DEVPLACE_FIXTURES_DIR) + "/hosts")) {
    if (entry.is_directory()) hosts.push_back(entry.path().filename().string());
  }
  std::sort(hosts.begin(), hosts.end());
  ASSERT_GE(hosts.size(), 17u);
  int with_figures = 0;
  for (const std::string& host : hosts) {
    SCOPED_TRACE(host);
    StoreOptions options = ProbeOf(HostDir(host));
    for (absl::string_view flag : absl::StrSplit(NoVendorLibraryFlags(), ' ', absl::SkipEmpty())) {
      options.probe_command.emplace_back(flag);
    }
    options.usage_command = options.probe_command;
    options.usage_command.push_back("--usage_only");
    InventoryStore store(options);
    absl::StatusOr<Snapshot> full = store.Refresh();
    ASSERT_TRUE(full.ok()) << full.status();
    absl::StatusOr<Snapshot> merged = store.RefreshUsage();
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ((*merged)->revision(), 1u);
    ASSERT_EQ((*merged)->backends_size(), (*full)->backends_size());
    for (int i = 0; i < (*full)->backends_size(); ++i) {
      for (int j = 0; j < (*full)->backends(i).devices_size(); ++j) {
        const v1::Device& before = (*full)->backends(i).devices(j);
        const v1::Device& after = (*merged)->backends(i).devices(j);
        SCOPED_TRACE(before.pci_bus_id());
        EXPECT_EQ(after.has_memory_free_bytes(), before.has_memory_free_bytes());
        EXPECT_EQ(after.memory_free_bytes(), before.memory_free_bytes());
        EXPECT_EQ(after.usage().SerializeAsString(), before.usage().SerializeAsString());
        with_figures += before.has_memory_free_bytes() ? 1 : 0;
      }
    }
  }
  // The hosts whose files give memory in use: AMD's two MI210 trees and the mixed host's MI210,
  // Neuron's Trainium (sysfs per-core memory).
  EXPECT_GE(with_figures, 4);
}

// A store on nvidia-2x-h100 with the fake NVML answering from a script the test rewrites.
class UsageStore {
 public:
  explicit UsageStore(absl::Duration interval = absl::InfiniteDuration()) {
    script_ = dir_.path() + "/nvml.txt";
    Use("h100.txt");
    setenv("FAKE_NVML_CONFIG", script_.c_str(), 1);
    StoreOptions options = ProbeOf(HostDir("nvidia-2x-h100"));
    options.probe_command.push_back("--nvml_library=" DEVPLACE_FAKE_NVML);
    options.usage_command = options.probe_command;
    options.usage_command.push_back("--usage_only");
    options.usage_interval = interval;
    options.on_usage = [this](const ProbeOutcome& o) {
      absl::MutexLock lock(&mu_);
      outcomes_.push_back(o);
    };
    store_ = std::make_unique<InventoryStore>(options);
  }
  ~UsageStore() { unsetenv("FAKE_NVML_CONFIG"); }
  void Use(const std::string& fixture) {
    std::ifstream in(std::string(DEVPLACE_FIXTURES_DIR) + "/nvml/" + fixture);
    std::ofstream(script_) << in.rdbuf();
  }
  InventoryStore& store() { return *store_; }
  std::vector<ProbeOutcome> outcomes() {
    absl::MutexLock lock(&mu_);
    return outcomes_;
  }

 private:
  TempDir dir_;
  std::string script_;
  std::unique_ptr<InventoryStore> store_;
  absl::Mutex mu_;
  std::vector<ProbeOutcome> outcomes_;
};

const v1::Device& Gpu9a(const Snapshot& s) { return s->backends(1).devices(1); }

// NVML's health counters are read by full probes only: a usage refresh keeps the full probe's.
TEST(InventoryStoreTest, UsageRefreshKeepsTheFullProbesHealth) {
  UsageStore u;
  u.Use("h100-remap-pending.txt");
  absl::StatusOr<Snapshot> full = u.store().Refresh();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(Gpu9a(*full).health(), v1::HEALTH_FAULT) << Gpu9a(*full).health_reason();
  u.Use("h100.txt");
  absl::StatusOr<Snapshot> usage = u.store().RefreshUsage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(Gpu9a(*usage).health(), v1::HEALTH_FAULT);
  EXPECT_EQ(Gpu9a(*usage).health_counters_size(), Gpu9a(*full).health_counters_size());
  absl::StatusOr<Snapshot> next = u.store().Refresh();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Gpu9a(*next).health(), v1::HEALTH_OK);  // the next full probe reads the reset GPU
}

TEST(InventoryStoreTest, UsageRefreshPublishesNewProcessesAsARevisionAndFiguresWithoutOne) {
  UsageStore u;
  EXPECT_EQ(u.store().RefreshUsage().status().code(), absl::StatusCode::kFailedPrecondition);  // no snapshot yet
  Recorder recorder;
  u.store().Subscribe(recorder.callback());
  absl::StatusOr<Snapshot> first = u.store().Refresh();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->revision(), 1u);
  EXPECT_TRUE(Gpu9a(*first).usage().processes_known());
  EXPECT_EQ(Gpu9a(*first).usage().process_count(), 0u);
  EXPECT_TRUE((*first)->has_usage_read_at());

  // Processes appear: a new revision, delivered; the rest of the snapshot is the full probe's.
  u.Use("shared.txt");
  absl::StatusOr<Snapshot> busy = u.store().RefreshUsage();
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_EQ((*busy)->revision(), 2u);
  EXPECT_EQ(Gpu9a(*busy).usage().process_count(), 3u);
  EXPECT_TRUE((*busy)->backends(1).devices(0).usage().busy());
  EXPECT_EQ((*busy)->probe_reports_size(), (*first)->probe_reports_size());
  EXPECT_EQ((*busy)->probed_at().seconds(), (*first)->probed_at().seconds());
  ASSERT_EQ(recorder.seen().size(), 2u);
  EXPECT_EQ(recorder.seen()[1], *busy);
  ASSERT_EQ(u.outcomes().size(), 1u);
  EXPECT_TRUE(u.outcomes()[0].changed);
  EXPECT_GT(u.outcomes()[0].duration, absl::ZeroDuration());

  // The same processes again: fresh figures, the same revision, nobody notified.
  absl::StatusOr<Snapshot> again = u.store().RefreshUsage();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->revision(), 2u);
  EXPECT_NE(*again, *busy);
  EXPECT_EQ(recorder.seen().size(), 2u);
  // A full probe reading the same usage keeps the revision too.
  absl::StatusOr<Snapshot> full = u.store().Refresh();
  ASSERT_TRUE(full.ok());
  EXPECT_EQ((*full)->revision(), 2u);
}

TEST(InventoryStoreTest, UsageRefreshRunsOnItsOwnTimer) {
  UsageStore u(absl::Milliseconds(200));
  u.store().Start(absl::InfiniteDuration());  // one full probe, then usage refreshes only
  ASSERT_TRUE(Eventually([&] { return u.store().Current() != nullptr; }, absl::Seconds(20)));
  u.Use("shared.txt");
  EXPECT_TRUE(Eventually([&] { return Gpu9a(u.store().Current()).usage().process_count() == 3; }, absl::Seconds(20)));
  EXPECT_EQ(u.store().Current()->revision(), 2u);
  u.store().Stop();
  EXPECT_FALSE(u.outcomes().empty());
}

TEST(InventoryStoreTest, NothingBeforeTheFirstProbe) {
  InventoryStore store(ProbeOf(HostDir("cpu-only")));
  EXPECT_EQ(store.Current(), nullptr);
  EXPECT_EQ(store.LastOutcome().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.LastOutcome().finished_at, absl::InfinitePast());
  EXPECT_FALSE(store.LastError().has_value());
}

TEST(InventoryStoreTest, SameHostTwiceKeepsTheRevision) {
  InventoryStore store(ProbeOf(HostDir("nvidia-2x-h100")));
  Recorder recorder;
  store.Subscribe(recorder.callback());
  const absl::Time before = absl::Now();
  absl::StatusOr<Snapshot> first = store.Refresh();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->revision(), 1u);
  EXPECT_EQ(store.Current(), *first);
  const absl::Time probed_at = absl::FromUnixSeconds((*first)->probed_at().seconds()) +
                               absl::Nanoseconds((*first)->probed_at().nanos());
  EXPECT_GE(probed_at, before - absl::Seconds(1));
  EXPECT_LE(probed_at, absl::Now() + absl::Seconds(1));

  absl::StatusOr<Snapshot> second = store.Refresh();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->revision(), 1u);
  EXPECT_TRUE(SameContent(**first, **second));
  // Republished with a fresh timestamp, but subscribers hear only about the first revision.
  EXPECT_EQ(store.Current(), *second);
  EXPECT_GE((*second)->probed_at().seconds(), (*first)->probed_at().seconds());
  ASSERT_EQ(recorder.seen().size(), 1u);
  EXPECT_EQ(recorder.seen()[0], *first);

  const ProbeOutcome outcome = store.LastOutcome();
  EXPECT_TRUE(outcome.status.ok());
  EXPECT_EQ(outcome.revision, 1u);
  EXPECT_FALSE(outcome.changed);
  EXPECT_GT(outcome.duration, absl::ZeroDuration());
  EXPECT_GE(outcome.finished_at, before);
}

TEST(InventoryStoreTest, ChangedHostBumpsTheRevisionAndNotifiesOnce) {
  ScratchHost host("nvidia-2x-h100");
  InventoryStore store(ProbeOf(host.dir()));
  ASSERT_TRUE(store.Refresh().ok());
  const Snapshot first = store.Current();
  Recorder recorder;
  Snapshot at_subscription;
  store.Subscribe(recorder.callback(), &at_subscription);
  EXPECT_EQ(at_subscription, first);

  host.Remove("dev/nvidia1");
  absl::StatusOr<Snapshot> second = store.Refresh();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->revision(), 2u);
  EXPECT_TRUE(store.LastOutcome().changed);
  const v1::Backend* cuda = FindRow(**second, v1::ROW_CUDA_NVIDIA);
  ASSERT_NE(cuda, nullptr);
  ASSERT_EQ(cuda->devices_size(), 2);
  EXPECT_FALSE(cuda->devices(1).device_nodes_present());
  // The first snapshot is immutable and still says what it said.
  EXPECT_EQ(first->revision(), 1u);
  EXPECT_TRUE(FindRow(*first, v1::ROW_CUDA_NVIDIA)->devices(1).device_nodes_present());

  ASSERT_TRUE(store.Refresh().ok());  // unchanged again
  ASSERT_EQ(recorder.seen().size(), 1u);
  EXPECT_EQ(recorder.seen()[0], *second);
  EXPECT_EQ(store.Current()->revision(), 2u);
}

// A probe whose behaviour a file selects, so one store can see a good probe, then a bad one. The
// good one prints what the real probe wrote for `host_root` once, before the store runs (a cat, so
// that its time, whatever the machine's load, stays far inside the short deadline the hang cases
// need).
class SwitchableProbe {
 public:
  explicit SwitchableProbe(const std::string& host_root) {
    const CommandResult real = RunCommand(ShellQuote(ProbeBinary()) + " --host_root=" + ShellQuote(host_root));
    EXPECT_EQ(real.exit_code, 0) << real.err;
    const std::string recorded = dir_.Write("inventory.bin", real.out);
    mode_file_ = dir_.Write("mode", "ok");
    grandchild_pid_file_ = dir_.File("grandchild.pid");
    command_ = dir_.Script("probe.sh", absl::StrCat(  //
        "case \"$(cat ", ShellQuote(mode_file_), ")\" in\n",
        "  ok) exec cat ", ShellQuote(recorded), " ;;\n",
        "  hang) echo 'nvmlInit hangs' >&2; sleep 1000 ;;\n",
        "  crash) echo 'segfault in libnvidia-ml' >&2; kill -SEGV $$ ;;\n",
        "  exit3) echo 'cannot read /sys/bus/pci' >&2; exit 3 ;;\n",
        "  garbage) printf 'garbage\\n' ;;\n",
        "  empty) exit 0 ;;\n",
        "  grandchild) sleep 1000 & echo $! > ", ShellQuote(grandchild_pid_file_), "; exit 0 ;;\n",
        "esac"));
  }
  void Set(const std::string& mode) const { dir_.Write("mode", mode); }
  const std::vector<std::string>& command() const { return command_; }
  std::string grandchild_pid_file() const { return grandchild_pid_file_; }

 private:
  TempDir dir_;
  std::string mode_file_;
  std::string grandchild_pid_file_;
  std::vector<std::string> command_;
};

struct FailureCase {
  std::string mode;
  absl::StatusCode code;
  std::string message;
};

void PrintTo(const FailureCase& c, std::ostream* os) { *os << c.mode; }

class ProbeFailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(ProbeFailureTest, KeepsTheLastGoodSnapshot) {
  const FailureCase& c = GetParam();
  SwitchableProbe probe(HostDir("amd-2x-mi210"));
  StoreOptions options;
  options.probe_command = probe.command();
  // Long enough for the good probe's cat on a loaded machine, short for the hang cases.
  options.probe_timeout = absl::Seconds(3);
  InventoryStore store(options);
  Recorder recorder;
  store.Subscribe(recorder.callback());
  absl::StatusOr<Snapshot> good = store.Refresh();
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ((*good)->revision(), 1u);

  probe.Set(c.mode);
  const absl::Time start = absl::Now();
  absl::StatusOr<Snapshot> failed = store.Refresh();
  // Bounded by the deadline (the grandchild holding the pipe is not waited for past it); the
  // margin is for a loaded machine: this only tells a hang from a deadline.
  EXPECT_LT(absl::Now() - start, options.probe_timeout + absl::Seconds(30));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), c.code) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr(c.message));
  EXPECT_EQ(store.Current(), *good);
  EXPECT_EQ(store.Current()->revision(), 1u);
  const ProbeOutcome outcome = store.LastOutcome();
  EXPECT_EQ(outcome.status, failed.status());
  EXPECT_EQ(outcome.revision, 1u);
  EXPECT_FALSE(outcome.changed);
  ASSERT_TRUE(store.LastError().has_value());
  EXPECT_EQ(store.LastError()->status, failed.status());
  EXPECT_TRUE(NoChildren());
  if (c.mode == "grandchild") {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(probe.grandchild_pid_file())), &pid));
    EXPECT_TRUE(ProcessDead(pid, absl::Seconds(30)));
  }

  // Healthy again: same content, so the same revision, and the failure is still on record.
  probe.Set("ok");
  absl::StatusOr<Snapshot> again = store.Refresh();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->revision(), 1u);
  EXPECT_TRUE(store.LastOutcome().status.ok());
  EXPECT_EQ(store.LastError()->status, failed.status());
  EXPECT_EQ(recorder.seen().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ProbeFailureTest,
    ::testing::Values(FailureCase{"hang", absl::StatusCode::kDeadlineExceeded, "probe timed out after 3000 ms"},
                      FailureCase{"crash", absl::StatusCode::kInternal, "segfault in libnvidia-ml"},
                      FailureCase{"exit3", absl::StatusCode::kInternal, "exited with code 3"},
                      FailureCase{"garbage", absl::StatusCode::kInternal, "not a serialized devplace.v1.Inventory"},
                      FailureCase{"empty", absl::StatusCode::kInternal, "wrote nothing"},
                      FailureCase{"grandchild", absl::StatusCode::kDeadlineExceeded, "timed out"}),
    [](const ::testing::TestParamInfo<FailureCase>& info) { return info.param.mode; });

TEST(InventoryStoreTest, OutputWithoutTheCpuRowIsRejected) {
  TempDir dir;
  v1::Inventory stranger;
  stranger.mutable_host()->set_hostname("not-from-devplace-probe");
  const std::string file = dir.Write("stranger.bin", stranger.SerializeAsString());
  StoreOptions options;
  options.probe_command = {"/bin/cat", file};
  InventoryStore store(options);
  absl::StatusOr<Snapshot> result = store.Refresh();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("no cpu row"));
  EXPECT_EQ(store.Current(), nullptr);
}

// Runs `n` Refresh() calls on a store whose probe script first appends a line to <dir>/runs and
// then runs `rest`: one call first, the others once that probe has started (so they coalesce).
// Returns every call's result and leaves the run count in `*runs`.
std::vector<absl::StatusOr<Snapshot>> RefreshConcurrently(const std::string& rest, size_t n, int* runs) {
  TempDir dir;
  const std::string runs_file = dir.File("runs");
  StoreOptions options;
  options.probe_command = dir.Script("slow.sh", absl::StrCat("echo run >> ", ShellQuote(runs_file), "\n", rest));
  InventoryStore store(options);
  std::vector<absl::StatusOr<Snapshot>> results(n, absl::UnknownError("not run"));
  std::thread first([&] { results[0] = store.Refresh(); });
  EXPECT_TRUE(Eventually([&] { return !ReadFile(runs_file).empty(); }));
  std::vector<std::thread> others;
  for (size_t i = 1; i < n; ++i) others.emplace_back([&, i] { results[i] = store.Refresh(); });
  first.join();
  for (std::thread& t : others) t.join();
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(runs_file), '\n', absl::SkipEmpty());
  *runs = static_cast<int>(lines.size());
  return results;
}

TEST(InventoryStoreTest, ConcurrentRefreshesShareOneProbeRun) {
  int runs = 0;
  const std::vector<absl::StatusOr<Snapshot>> results = RefreshConcurrently(
      absl::StrCat("sleep 0.5\nexec ", ShellQuote(ProbeBinary()), " --host_root=", ShellQuote(HostDir("cpu-only"))), 8,
      &runs);
  EXPECT_EQ(runs, 1);
  for (const absl::StatusOr<Snapshot>& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, *results[0]);  // the very same snapshot
    EXPECT_EQ((*r)->revision(), 1u);
  }
}

TEST(InventoryStoreTest, ConcurrentRefreshesShareOneFailure) {
  int runs = 0;
  const std::vector<absl::StatusOr<Snapshot>> results =
      RefreshConcurrently("sleep 0.5\necho 'no luck' >&2\nexit 3", 4, &runs);
  EXPECT_EQ(runs, 1);
  for (const absl::StatusOr<Snapshot>& r : results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(r.status().message(), HasSubstr("no luck"));
  }
}

TEST(InventoryStoreTest, UnsubscribedCallbacksAreNotCalled) {
  ScratchHost host("nvidia-2x-h100");
  InventoryStore store(ProbeOf(host.dir()));
  Recorder kept, dropped;
  store.Subscribe(kept.callback());
  const InventoryStore::SubscriptionId id = store.Subscribe(dropped.callback());
  ASSERT_TRUE(store.Refresh().ok());
  store.Unsubscribe(id);
  store.Unsubscribe(id);      // unknown now: ignored
  store.Unsubscribe(987654);  // never known: ignored
  host.Remove("dev/nvidia0");
  ASSERT_TRUE(store.Refresh().ok());
  EXPECT_EQ(kept.seen().size(), 2u);
  EXPECT_EQ(dropped.seen().size(), 1u);
  EXPECT_EQ(kept.seen()[1]->revision(), 2u);
}

TEST(InventoryStoreTest, CallbackMayUnsubscribeButNotRefresh) {
  InventoryStore store(ProbeOf(HostDir("cpu-only")));
  absl::Status nested = absl::OkStatus();
  std::atomic<int> calls{0};
  InventoryStore::SubscriptionId id = 0;
  id = store.Subscribe([&](const Snapshot&) {
    ++calls;
    nested = store.Refresh().status();
    EXPECT_NE(store.Current(), nullptr);
    store.Unsubscribe(id);
  });
  ASSERT_TRUE(store.Refresh().ok());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(nested.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(InventoryStoreTest, AugmentHookMergesBeforePublishing) {
  StoreOptions options = ProbeOf(HostDir("cpu-only"));
  std::atomic<bool> fail{false};
  options.augment = [&](v1::Inventory& fresh) {
    if (fail) return absl::UnavailableError("torch probe not ready");
    fresh.mutable_torch()->set_probed(true);
    fresh.mutable_torch()->set_version("1.13.0");
    return absl::OkStatus();
  };
  InventoryStore store(options);
  absl::StatusOr<Snapshot> snapshot = store.Refresh();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE((*snapshot)->torch().probed());
  EXPECT_EQ((*snapshot)->torch().version(), "1.13.0");
  fail = true;
  EXPECT_EQ(store.Refresh().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Current(), *snapshot);
}

TEST(InventoryStoreTest, TimerRefreshesAndStopsPromptlyDuringItsWait) {
  InventoryStore store(ProbeOf(HostDir("cpu-only")));
  store.Start(absl::Hours(1));
  ASSERT_TRUE(Eventually([&] { return store.Current() != nullptr; }));
  const absl::Time start = absl::Now();
  store.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  store.Stop();  // idempotent
  EXPECT_EQ(store.Current()->revision(), 1u);
}

TEST(InventoryStoreTest, TimerKeepsRefreshing) {
  InventoryStore store(ProbeOf(HostDir("cpu-only")));
  store.Start(absl::Milliseconds(20));
  ASSERT_TRUE(Eventually([&] { return store.Current() != nullptr; }));
  const absl::Time first = store.LastOutcome().finished_at;
  ASSERT_TRUE(Eventually([&] { return store.LastOutcome().finished_at > first; }));
  store.Stop();
  EXPECT_EQ(store.Current()->revision(), 1u);
}

TEST(InventoryStoreTest, StopWhileAProbeHangsReturnsByItsDeadline) {
  TempDir dir;
  StoreOptions options;
  options.probe_command = dir.Script("hang.sh", "touch " + ShellQuote(dir.File("started")) + "\nsleep 1000");
  options.probe_timeout = absl::Milliseconds(300);
  InventoryStore store(options);
  store.Start(absl::Hours(1));
  ASSERT_TRUE(Eventually([&] { return access(dir.File("started").c_str(), F_OK) == 0; }));
  const absl::Time start = absl::Now();
  store.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(store.Current(), nullptr);
  EXPECT_EQ(store.LastOutcome().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(NoChildren());
}

TEST(InventoryStoreTest, DestructorStopsTheTimer) {
  auto store = std::make_unique<InventoryStore>(ProbeOf(HostDir("cpu-only")));
  store->Start(absl::Hours(1));
  ASSERT_TRUE(Eventually([&] { return store->Current() != nullptr; }));
  const absl::Time start = absl::Now();
  store.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace devplace::testing
