// No pick is answered OK with a lease the real devplaced could not write to its lease file: in a
// socket directory every user may write (a sticky 1777 one) the file goes to a directory of the
// daemon's own, so another user's `leases.state` made first changes nothing; a directory another
// user made first in its place, a `leases.state` that is a directory and a full filesystem each
// make the pick FAILED_PRECONDITION with the file, the error and the fix, and nothing is leased;
// a kill -9 and a start then keep exactly the leases that were answered. Temporary files a killed
// daemon left are removed at start.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uid_t kOtherUser = 12345;  // another local user (the tests run as root)

std::string HostFlag() { return std::string("--host_root=") + DEVPLACE_FIXTURES_DIR + "/hosts/nvidia-2x-h100"; }

std::unique_ptr<DaemonProcess> Start(const std::string& dir, std::vector<std::string> flags = {},
                                     const std::vector<std::string>& prefix = {}) {
  flags.push_back(HostFlag());
  auto d = std::make_unique<DaemonProcess>(dir, flags, prefix);
  EXPECT_TRUE(d->WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d->Log();
  return d;
}

void Kill9(DaemonProcess& d) {
  d.Signal(SIGKILL);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 128 + SIGKILL);
}

// A pick of `count` GPUs for this process (over the unix socket) or for ten minutes (over TCP).
grpc::Status Pick(DaemonProcess& d, v1::LeaseHolder holder, int count = 1, v1::PickDevicesResponse* out = nullptr) {
  v1::PickDevicesRequest request;
  request.set_count(count);
  request.set_holder(holder);
  if (holder == v1::LEASE_HOLDER_TTL) request.set_ttl_ms(600'000);
  v1::PickDevicesResponse ignored;
  return Stub(holder == v1::LEASE_HOLDER_TTL ? d.tcp_target() : d.unix_target())
      ->PickDevices(Ctx(absl::Seconds(20)).get(), request, out != nullptr ? out : &ignored);
}

int LeasesHeld(DaemonProcess& d) {
  v1::Inventory inventory;
  const grpc::Status s = Stub(d.unix_target())->GetInventory(Ctx().get(), {}, &inventory);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return inventory.leases_size();
}

// The refusal of a pick whose lease could not be written: the file, the error, the fix.
void ExpectNotDurable(const grpc::Status& refused, const std::string& file, const std::string& error) {
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("devplaced cannot write its lease file " + file + " ("));
  EXPECT_THAT(refused.error_message(), HasSubstr(error));
  EXPECT_THAT(refused.error_message(), HasSubstr("nothing is leased. For the operator: "));
  EXPECT_THAT(refused.error_message(), HasSubstr("--lease_state_file=PATH"));
}

void MakeOthersDirectory(const std::string& path, mode_t mode) {
  ASSERT_EQ(mkdir(path.c_str(), mode), 0) << path;
  ASSERT_EQ(chown(path.c_str(), kOtherUser, kOtherUser), 0) << path;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

// The attack: the socket in a root-owned 1777 directory (the socket's rule allows it), another
// user first makes a directory named leases.state there. The daemon keeps its lease file in a
// directory of its own instead, so the lease is written and a restart keeps it.
TEST(LeaseDurability, InASocketDirectoryOthersMayWriteTheLeasesGoToADirectoryOfTheDaemonsOwn) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  MakeOthersDirectory(dir.File("leases.state"), 0755);
  const std::string own = dir.File("devplaced-leases"), file = own + "/leases.state";
  auto daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state_directory dir=" + own + " created=true"));
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state file=" + file + " found=false kept=0"));
  struct stat st {};
  ASSERT_EQ(lstat(own.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  // Both GPUs for this process: written before the answer.
  ASSERT_TRUE(Pick(*daemon, v1::LEASE_HOLDER_PROCESS, 2).ok());
  ASSERT_EQ(lstat(file.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  Kill9(*daemon);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state file=" + file + " found=true kept=1 dropped=0"));
  const grpc::Status next = Pick(*daemon, v1::LEASE_HOLDER_TTL);
  EXPECT_EQ(next.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << "the next pick got a held GPU";
  EXPECT_THAT(next.error_message(), HasSubstr("0 free for this job now"));
  Kill9(*daemon);
}

// Another user made the daemon's own directory first: the daemon starts and serves the inventory,
// writes nothing there, and refuses every pick, saying why; the CLI's eval fails with that message.
TEST(LeaseDurability, ALeaseDirectoryAnotherUserMadeFirstRefusesEveryPick) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  const std::string own = dir.File("devplaced-leases"), file = own + "/leases.state";
  MakeOthersDirectory(own, 0777);
  auto daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state_ignored file=" + file));
  ExpectNotDurable(Pick(*daemon, v1::LEASE_HOLDER_TTL), file,
                   "directory " + own + " is owned by uid 12345, not by root or uid 0");
  EXPECT_EQ(LeasesHeld(*daemon), 0);
  EXPECT_TRUE(fs::is_empty(own)) << "devplaced wrote into another user's directory";
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state_write_failed file=" + file));

  const CommandResult r = RunCommand(absl::StrCat(
      "CUDA_VISIBLE_DEVICES=0,1 bash -c 'if eval \"$(\"$0\" --address \"$1\" pick --no_environment)\"; then "
      "echo ran; fi; "
      "echo \"mask=[$CUDA_VISIBLE_DEVICES]\"' ",
      ShellQuote(DEVPLACE_CLI_BINARY), " ", ShellQuote(daemon->unix_target())));
  EXPECT_EQ(r.out, "mask=[]\n") << r.err;
  EXPECT_THAT(r.err, HasSubstr("devplace: pick: FAILED_PRECONDITION: devplaced cannot write its lease file " + file));
  Kill9(*daemon);
}

// leases.state replaced by a directory while the daemon runs (a write even root cannot make): the
// pick is refused and leases nothing; once the name is free again picks are written as before, and
// a restart keeps exactly the leases that were answered.
TEST(LeaseDurability, APickWhoseLeaseCannotBeWrittenIsRefusedAndNothingIsLeased) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  auto daemon = Start(dir.path());
  v1::PickDevicesResponse first;
  ASSERT_TRUE(Pick(*daemon, v1::LEASE_HOLDER_TTL, 1, &first).ok());
  ASSERT_TRUE(fs::remove(file));
  dir.Write("leases.state/in-the-way", "x");
  ExpectNotDurable(Pick(*daemon, v1::LEASE_HOLDER_PROCESS), file, "Is a directory");
  EXPECT_EQ(LeasesHeld(*daemon), 1);

  fs::remove_all(file);
  v1::PickDevicesResponse second;
  ASSERT_TRUE(Pick(*daemon, v1::LEASE_HOLDER_PROCESS, 1, &second).ok());  // the GPU the refused pick did not get
  EXPECT_NE(second.lease().devices(0).pci_bus_id(), first.lease().devices(0).pci_bus_id());
  Kill9(*daemon);
  daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("found=true kept=2 dropped=0"));
  Kill9(*daemon);
}

// A full filesystem: the lease file on a 64 KiB tmpfs mounted in the daemon's own mount namespace,
// filled through /proc/<pid>/root. The pick is refused with ENOSPC; with room again it is leased.
TEST(LeaseDurability, OnAFullFilesystemThePickIsRefused) {
  TempDir dir;
  const std::string state = dir.File("state"), file = state + "/leases.state";
  ASSERT_EQ(mkdir(state.c_str(), 0700), 0);
  const std::string mount = "mount -t tmpfs -o size=64k,mode=0700 tmpfs \"$0\"";
  if (RunCommand(absl::StrCat("unshare --mount --propagation private -- /bin/sh -c ", ShellQuote(mount), " ",
                              ShellQuote(state), " 2>&1"))
          .exit_code != 0) {
    GTEST_SKIP() << "needs a mount namespace and a tmpfs mount (root with CAP_SYS_ADMIN)";
  }
  auto daemon = Start(dir.path(), {"--lease_state_file=" + file},
                      {"/usr/bin/unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                       mount + " && exec \"$@\"", state});
  const std::string filler = absl::StrCat("/proc/", daemon->pid(), "/root", state, "/filler");
  {
    std::ofstream fill(filler, std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && fill.write(block.data(), block.size()) && fill.flush(); ++i) {
    }
  }
  ExpectNotDurable(Pick(*daemon, v1::LEASE_HOLDER_TTL), file, "No space left on device");
  EXPECT_EQ(LeasesHeld(*daemon), 0);
  ASSERT_TRUE(fs::remove(filler));
  ASSERT_TRUE(Pick(*daemon, v1::LEASE_HOLDER_TTL).ok());
  EXPECT_EQ(LeasesHeld(*daemon), 1);
  Kill9(*daemon);
}

// Temporary files of writes a killed daemon left (".leases.state.tmp-<pid>") are removed at start;
// nothing else in the directory is.
TEST(LeaseDurability, TemporaryFilesAKilledDaemonLeftAreRemovedAtStart) {
  TempDir dir;
  for (const char* name : {".leases.state.tmp-4242", ".leases.state.tmp-77", ".leases.state.tmp-x", ".other.tmp-1"}) {
    dir.Write(name, "partial");
  }
  ASSERT_EQ(mkdir(dir.File(".leases.state.tmp-55").c_str(), 0700), 0);  // not a regular file: kept
  auto daemon = Start(dir.path());
  EXPECT_THAT(daemon->Log(), HasSubstr("event=lease_state_temporary_removed file=" + dir.File("leases.state") +
                                       " name=.leases.state.tmp-4242"));
  EXPECT_THAT(daemon->Log(), HasSubstr("name=.leases.state.tmp-77 "));
  EXPECT_FALSE(fs::exists(dir.File(".leases.state.tmp-4242")));
  EXPECT_FALSE(fs::exists(dir.File(".leases.state.tmp-77")));
  EXPECT_TRUE(fs::exists(dir.File(".leases.state.tmp-x")));
  EXPECT_TRUE(fs::exists(dir.File(".other.tmp-1")));
  EXPECT_TRUE(fs::is_directory(dir.File(".leases.state.tmp-55")));
  Kill9(*daemon);
}

}  // namespace
}  // namespace devplace::testing
