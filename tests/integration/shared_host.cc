#include "tests/integration/shared_host.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A copy of the nvidia-2x-h100 fixture with `n` H100s at 0000:20:00.0, 0000:21:00.0, ... (minors
// 0..n-1, /dev/nvidia<i>), as scripts/bench makes its hosts.
void MakeHost(const std::string& dest, int n) {
  const std::string fixture = std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/nvidia-2x-h100";
  fs::copy(fixture, dest, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const std::string pci_template = fixture + "/sys/bus/pci/devices/0000:9a:00.0";
  const std::string info_template = ReadFile(fixture + "/proc/driver/nvidia/gpus/0000:9a:00.0/information");
  for (const char* old : {"0000:18:00.0", "0000:9a:00.0"}) {
    fs::remove_all(dest + "/sys/bus/pci/devices/" + old);
    fs::remove_all(dest + "/proc/driver/nvidia/gpus/" + old);
  }
  for (const char* node : {"nvidia0", "nvidia1"}) fs::remove(dest + "/dev/" + node);
  for (int i = 0; i < n; ++i) {
    fs::copy(pci_template, dest + "/sys/bus/pci/devices/" + Bus(i),
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    std::string info = std::regex_replace(info_template, std::regex("GPU UUID:.*"), "GPU UUID: \t " + Uuid(i));
    info = std::regex_replace(info, std::regex("Bus Location:.*"), "Bus Location: \t " + Bus(i));
    info = std::regex_replace(info, std::regex("Device Minor:.*"), absl::StrCat("Device Minor: \t ", i));
    WriteFile(dest + "/proc/driver/nvidia/gpus/" + Bus(i) + "/information", info);
    WriteFile(dest + "/dev/nvidia" + std::to_string(i), "");
  }
}

// The fake NVML script of that host.
std::string NvmlScript(int n, const std::map<int, GpuUse>& use) {
  std::string s = "driver_version 550.54.15\ncuda_driver_version 12040\n";
  for (int i = 0; i < n; ++i) {
    const GpuUse u = use.count(i) ? use.at(i) : GpuUse();
    absl::StrAppend(&s, absl::StrFormat("device %d bus_id 00000000:%02X:00.0\n", i, 0x20 + i));
    absl::StrAppend(&s, "device ", i, " name NVIDIA H100 80GB HBM3\n", "device ", i, " uuid ", Uuid(i), "\n");
    absl::StrAppend(&s, "device ", i, " memory ", kTotal, " ", kTotal - u.used, " ", u.used, "\n");
    absl::StrAppend(&s, "device ", i, " compute_mode ", u.compute_mode, "\n");
    for (const auto& [pid, bytes] : u.processes) absl::StrAppend(&s, "device ", i, " process ", pid, " ", bytes, " compute\n");
  }
  return s;
}

}  // namespace

std::string Bus(int i) { return absl::StrFormat("0000:%02x:00.0", 0x20 + i); }
std::string Uuid(int i) { return absl::StrFormat("GPU-%08x-0000-4000-8000-%012x", i, i); }

SharedHost::SharedHost(int n, const std::map<int, GpuUse>& use, std::vector<std::string> flags) {
  MakeHost(dir_.path() + "/host", n);
  WriteFile(dir_.path() + "/nvml.txt", NvmlScript(n, use));
  flags.push_back("--host_root=" + dir_.path() + "/host");
  flags.push_back("--nvml_library=" DEVPLACE_FAKE_NVML);
  flags.push_back("--cuda_library=");
  flags_ = std::move(flags);
  Start();
}

void SharedHost::Start() {
  setenv("FAKE_NVML_CONFIG", (dir_.path() + "/nvml.txt").c_str(), 1);
  daemon_ = std::make_unique<DaemonProcess>(dir_.path(), flags_);
  unsetenv("FAKE_NVML_CONFIG");
  EXPECT_TRUE(daemon_->WaitForLog("event=inventory revision=1", absl::Seconds(30))) << daemon_->Log();
}

void SharedHost::Restart(const std::function<void()>& while_down) {
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->WaitExit(absl::Seconds(30)), 0) << daemon_->Log();
  previous_log_ = daemon_->Log();
  daemon_.reset();
  if (while_down) while_down();
  Start();
}

SharedHost::~SharedHost() {
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->WaitExit(absl::Seconds(10)), 0) << daemon_->Log();
}

std::string SharedHost::Cli() const {
  return absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", ShellQuote(daemon_->unix_target()));
}

std::string SharedHost::ShellEnv() const {
  const std::string bin = dir_.path() + "/bin";
  std::error_code ec;
  fs::create_directories(bin, ec);
  fs::create_symlink(DEVPLACE_CLI_BINARY, bin + "/devplace", ec);
  return absl::StrCat("export PATH=", ShellQuote(bin), ":\"$PATH\" DEVPLACE_ADDRESS=",
                      ShellQuote(daemon_->unix_target()), "\n");
}

v1::Inventory SharedHost::Inventory() {
  auto stub = Stub(daemon_->unix_target());
  grpc::ClientContext ctx;
  v1::Inventory inv;
  EXPECT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  return inv;
}

int SharedHost::LeasesLeft(absl::Duration within) {
  const absl::Time give_up = absl::Now() + within;
  int left = Inventory().leases_size();
  while (left > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
    left = Inventory().leases_size();
  }
  return left;
}

CommandResult SharedHost::Script(const std::string& script) const {
  return Bash(absl::StrCat("cd ", ShellQuote(dir_.path()), "\n", ShellEnv(), script));
}

std::string SharedHost::AsNobody() const {
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (getuid() != 0 || chmod(dir_.path().c_str(), 0755) != 0 ||
      RunCommand(as_nobody + "test -x " + ShellQuote(DEVPLACE_CLI_BINARY)).exit_code != 0) {
    return "";
  }
  return as_nobody;
}

bool AwaitPicksWaiting(DaemonProcess& d, int n) {
  const std::string want = absl::StrCat("\ndevplace_picks_waiting ", n, "\n");
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60); absl::Now() < give_up;) {
    const CommandResult scrape = RunCommand(absl::StrCat("curl -sS --max-time 10 http://", d.metrics_address(), "/metrics"));
    if (scrape.out.find(want) != std::string::npos) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

CommandResult Bash(const std::string& script) {
  return RunCommand(absl::StrCat("bash -euo pipefail -c '", std::regex_replace(script, std::regex("'"), "'\\''"),
                                 "' 2>&1"));
}

}  // namespace devplace::testing
