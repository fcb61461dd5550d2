// Operating devplaced on a real host: flag errors exit 2 with one line, squatted socket
// paths are refused by the daemon and the client (a real unprivileged user, `nobody`, plays the
// squatter through setpriv), RefreshInventory's access policy and rate limit over the real unix
// socket and TCP, a deleted socket re-created on SIGHUP, health per service, the CLI's warnings,
// JSON indentation and libtorch line.
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "devplace/client.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uid_t kNobody = 65534;

// Runs `command` as the unprivileged user nobody (no supplementary groups unless `groups`).
std::string AsNobody(const std::string& command, const std::string& groups = "") {
  return absl::StrCat("setpriv --reuid=", kNobody, " --regid=", kNobody,
                      groups.empty() ? " --clear-groups " : " --groups=" + groups + " ", command);
}

// A fresh directory directly under /tmp owned by `uid` with `mode`, removed at the end.
class OwnedDir {
 public:
  OwnedDir(uid_t uid, mode_t mode) {
    char tmpl[] = "/tmp/devplace-op-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) abort();
    path_ = tmpl;
    if (chown(path_.c_str(), uid, uid) != 0 || chmod(path_.c_str(), mode) != 0) abort();
  }
  ~OwnedDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool WaitForFile(const std::string& path, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (access(path.c_str(), F_OK) == 0) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// SIGTERMs a daemon started in the background and waits (up to 5 s) until it is gone.
void StopBackground(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 100 && kill(pid, 0) == 0; ++i) absl::SleepFor(absl::Milliseconds(50));
}

// SIGTERM, then the clean exit the daemon owes.
void ExpectCleanStop(DaemonProcess& d) {
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0);
}

grpc::Status Refresh(const std::string& target) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Inventory inv;
  return Stub(target)->RefreshInventory(&ctx, {}, &inv);
}

// ---- item 6: every flag error exits 2 with one line naming the flag --------------------------

TEST(OperatorExitCodes, EveryFlagErrorExitsTwoWithOneLine) {
  TempDir dir;
  const std::string flagfile = dir.Write("bad.flags", "# comment\n--refresh_interval=60s\n--no_such_flag=1\n");
  const std::string daemon = ShellQuote(DEVPLACE_DAEMON_BINARY);
  const std::string cli = ShellQuote(DEVPLACE_CLI_BINARY);
  const std::string missing_dir = dir.File("nonexistent");
  // A FIFO as flag file is refused without being opened (opening it would wait for a writer).
  const std::string fifo = dir.File("fifo.flags");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string command;
    std::string words;  // in the one stderr line
  };
  const std::vector<Case> cases = {
      {daemon + " --bogus", "unknown flag --bogus (see --help)"},  // one hint, not two
      {daemon + " -x", "unknown flag -x (see --help)"},            // as typed, not --x
      {daemon + " --version=true", "flag --version takes no value (--version=true)"},
      {daemon + " --version=false", "flag --version takes no value (--version=false)"},
      {daemon + " --refresh_interval=30", "write 30s"},
      {daemon + " --refresh_interval 30", "write 30s"},
      {daemon + " --probe_timeout=abc", "--probe_timeout=abc: a duration needs a unit"},
      {daemon + " --flagfile=" + dir.File("missing.flags"), "--flagfile="},
      {daemon + " --flagfile=" + flagfile, "unknown flag --no_such_flag in a --flagfile"},
      {daemon + " --flagfile=" + fifo, "--flagfile=" + fifo + ": cannot read it (not read: " + fifo + " is a FIFO"},
      {daemon + " --listen=tcp://0.0.0.0:7465", "no scheme"},
      {daemon + " --listen=unix:relative.sock", "unix:/absolute/path.sock"},
      {daemon + " --listen=unix://" + dir.File("x.sock"), "unix:/absolute/path.sock"},
      {daemon + " --max_receive_bytes=lots",
       "--max_receive_bytes=lots: want a whole number (--max_receive_bytes: Largest request message accepted, in "
       "bytes (4096..67108864)"},
      {daemon + " --refresh_min_interval=-1s", "--refresh_min_interval"},
      {cli + " --bogus inventory", "unknown flag --bogus"},
      {cli + " inventory --timeout=5", "write 5s"},
      {cli + " pick --count=abc", "--count=abc: want a whole number (--count: How many devices to pick (1 to 64))"},
      // Every numeric flag of the CLI: the type wanted and the flag's help with its range.
      {cli + " resolve --workload=training --local_rank=abc",
       "--local_rank=abc: want a whole number (--local_rank: The process's local rank (>= 0)"},
      {cli + " resolve --workload=training --local_rank=99999999999",
       "--local_rank=99999999999: want a whole number (--local_rank: The process's local rank (>= 0)"},
      {cli + " resolve --workload=training --world_size=abc",
       "--world_size=abc: want a whole number (--world_size: Processes in the job (>= 1))"},
      {cli + " resolve --workload=training --model_size_bytes=-1",
       "--model_size_bytes=-1: want a whole number, 0 or more (--model_size_bytes: "},
      {cli + " watch --known_revision=abc", "--known_revision=abc: want a whole number, 0 or more (--known_revision: "},
      {cli + " fleet --concurrency=99999999999", "--concurrency=99999999999: want a whole number (--concurrency: "},
      {cli + " pick --count=99999999999", "--count=99999999999: want a whole number (--count: How many devices"},
      {cli + " probe --probe_timeout=abc", "--probe_timeout=abc: a duration needs a unit"},
      {cli + " pick --ttl=60", "--ttl=60: a duration needs a unit: write 60s"},
      {cli + " pick --wait=abc", "--wait=abc: a duration needs a unit"},
      // --timeout: 0 (none) or a positive duration up to a day; -1s would wait without end.
      {cli + " inventory --timeout=-1s", "--timeout=-1s: want 0 (no deadline) or a positive duration up to 24h"},
      {cli + " inventory --timeout=1h99999999h", "--timeout=1h99999999h: want 0 (no deadline) or a positive duration"},
      {cli + " --timeout=inf health", "--timeout=inf: want 0 (no deadline)"},
      {cli + " run --shared=maybe -- true", "--shared=maybe: want true or false (--shared: Also pick devices"},
      {cli + " resolve --inventory=x", "--workload is required"},
      {cli + " nosuchcommand", "unknown command"},
      {cli + " --address=tcp://127.0.0.1:7465 health", "--address=tcp://127.0.0.1:7465: want host:port"},
      {cli + " --address=unix:relative.sock inventory", "unix:/absolute/path"},
      {cli + " --address=127.0.0.1 health", "--address=127.0.0.1: want host:port"},
      {cli + " fleet --targets=unix:relative.sock", "unix:/absolute/path"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.command);
    const CommandResult r = RunCommand(c.command);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.words));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // --timeout at its bounds is no flag error (the call then fails: no daemon there).
  for (const char* timeout : {"0", "1ms", "24h"}) {
    SCOPED_TRACE(timeout);
    const CommandResult r = RunCommand(absl::StrCat(cli, " --address=", ShellQuote("unix:" + dir.File("none.sock")),
                                                    " --timeout=", timeout, " health"));
    EXPECT_NE(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr(absl::StrCat("--timeout=", timeout, ":"))));
  }
  // A socket directory that does not exist is refused, not created.
  const CommandResult r = RunCommand(daemon + " --torch_probe_command=none --listen=unix:" + missing_dir + "/x.sock");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  EXPECT_FALSE(std::filesystem::exists(missing_dir));
  // --help does not show where it was built.
  const CommandResult help = RunCommand(daemon + " --help");
  EXPECT_THAT(help.out + help.err, HasSubstr("Flags from devplaced.cc"));
  EXPECT_THAT(help.out + help.err, Not(HasSubstr("server/devplaced.cc")));
  // Asking for help is no error: exit 0, the text on stdout, for each of absl's help flags.
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.err, "");
  EXPECT_THAT(help.out, ::testing::StartsWith("devplaced: the devplace daemon."));
  EXPECT_THAT(help.out, HasSubstr("\n    --listen (Comma-separated listen addresses"));
  EXPECT_THAT(help.out, Not(HasSubstr("--flagfile (")));  // absl's flags only in --helpfull
  for (const char* flags : {"-h", "--helpshort", "--bogus --help", "--help --listen=nonsense"}) {
    SCOPED_TRACE(flags);
    const CommandResult same = RunCommand(absl::StrCat(daemon, " ", flags));
    EXPECT_EQ(same.exit_code, 0) << same.err;
    EXPECT_EQ(same.out, help.out);
  }
  const CommandResult full = RunCommand(daemon + " --helpfull");
  EXPECT_EQ(full.exit_code, 0);
  EXPECT_THAT(full.out, HasSubstr("--listen ("));
  EXPECT_THAT(full.out, HasSubstr("--flagfile ("));
  const CommandResult match = RunCommand(daemon + " --help=tls_client");
  EXPECT_EQ(match.exit_code, 0);
  EXPECT_THAT(match.out, HasSubstr("--tls_client_ca ("));
  EXPECT_THAT(match.out, Not(HasSubstr("--refresh_interval (")));
  const CommandResult none = RunCommand(daemon + " --help=no_flag_has_this");
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_THAT(none.out, HasSubstr("No flags matched."));
  const CommandResult version = RunCommand(daemon + " --version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, ::testing::StartsWith("devplaced "));
}

// ---- item 2: squatted sockets ------------------------------------------------------------------

// devplaced's flag names take - or _ alike, as the CLI's do, on the command line and in a flag
// file, and a misspelt one names the flag it is near (the CLI's rule, server/common/flag_errors.h).
TEST(OperatorFlags, DaemonFlagsTakeDashesOrUnderscoresAndAMisspeltOneNamesTheNearest) {
  TempDir dir;
  const std::string daemon = ShellQuote(DEVPLACE_DAEMON_BINARY);
  const std::string dashed_file = dir.Write("dashed.flags", "--lease-state-file=relative.state\n");
  struct Case {
    std::string flags;
    std::string line;  // stderr, exactly
  };
  const std::string relative =
      "--lease_state_file=relative.state: needs an absolute file name in an existing directory (e.g. "
      "/var/lib/devplace/leases.state), or none";
  const std::vector<Case> cases = {
      // The value reached the flag, whichever spelling: ValidateConfig names it with underscores.
      {"--lease-state-file=relative.state", "devplaced: " + relative + " (see --help)\n"},
      {"--lease_state_file=relative.state", "devplaced: " + relative + " (see --help)\n"},
      {"--lease-state-file relative.state", "devplaced: " + relative + " (see --help)\n"},
      {"--flagfile=" + ShellQuote(dashed_file), "devplaced: " + relative + " (see --help)\n"},
      {"--max-leased-devices-per-user=2000",
       "devplaced: --max_leased_devices_per_user must be within 0 (no cap)..1024 (see --help)\n"},
      {"--lease_stat_file=x", "devplaced: unknown flag --lease_stat_file; did you mean --lease_state_file? (see --help)\n"},
      {"--lease-stat-file=x", "devplaced: unknown flag --lease-stat-file; did you mean --lease_state_file? (see --help)\n"},
      {"--nosuchthing=1", "devplaced: unknown flag --nosuchthing (see --help)\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const CommandResult r = RunCommand(absl::StrCat(daemon, " --torch_probe_command=none ", c.flags));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, c.line);
  }
  // A daemon started with dashed names runs as with underscores: the pick's lease is written to the
  // file --lease-state-file named, on the host --host-root named.
  const std::string state = dir.File("dashed leases.state");
  DaemonProcess d(dir.path(), {"--host-root=" + FixtureHost("nvidia-2x-h100"), "--lease-state-file=" + state,
                               "--refresh-interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(30))) << d.Log();
  const CommandResult pick = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=",
                                                     ShellQuote(d.unix_target()), " pick --no_environment --ttl=60s"));
  EXPECT_EQ(pick.exit_code, 0) << pick.err;
  EXPECT_THAT(pick.out, HasSubstr("export CUDA_VISIBLE_DEVICES='GPU-"));
  EXPECT_TRUE(std::filesystem::exists(state)) << d.Log();
  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(10)), 0) << d.Log();
}

TEST(OperatorSockets, DaemonRefusesADirectoryOwnedByAnotherUserOrWritableByOthers) {
  OwnedDir squatted(kNobody, 0755);
  CommandResult r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_DAEMON_BINARY), " --torch_probe_command=none --host_root=",
                                            ShellQuote(FixtureHost("cpu-only")), " --listen=unix:", squatted.path(), "/devplace.sock"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("owned by uid 65534"));
  OwnedDir open(0, 0777);
  r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_DAEMON_BINARY), " --torch_probe_command=none --host_root=",
                              ShellQuote(FixtureHost("cpu-only")),
                              " --listen=unix:", open.path(), "/devplace.sock"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("writable by group or others"));
  EXPECT_FALSE(std::filesystem::exists(open.path() + "/devplace.sock"));
}

TEST(OperatorSockets, ClientRefusesADaemonStartedByAnotherUser) {
  // nobody starts a real devplaced in a directory of its own, squatting a devplace-style path.
  OwnedDir squatted(kNobody, 0755);
  const std::string sock = squatted.path() + "/devplace.sock";
  const CommandResult started = RunCommand(AsNobody(absl::StrCat(
      ShellQuote(DEVPLACE_DAEMON_BINARY), " --torch_probe_command=none --host_root=", ShellQuote(FixtureHost("nvidia-2x-h100")),
      " --socket_mode=0666 --listen=unix:", sock, " >", squatted.path(), "/log 2>&1 & echo $!")));
  const pid_t squatter = std::atoi(started.out.c_str());
  ASSERT_GT(squatter, 0) << started.err;
  ASSERT_TRUE(WaitForFile(sock, absl::Seconds(20))) << ReadFile(squatted.path() + "/log");
  struct stat st;
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);

  // root's CLI, pointed at it explicitly or through DEVPLACE_ADDRESS, refuses and says why.
  CommandResult r = RunCommand(absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=unix:", sock, " inventory"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION: refusing unix:" + sock));
  EXPECT_THAT(r.err, HasSubstr("owned by uid 65534"));
  EXPECT_EQ(r.out, "");
  r = RunCommand(absl::StrCat("DEVPLACE_ADDRESS=unix:", sock, " ", ShellQuote(DEVPLACE_CLI_BINARY),
                              " resolve --workload=training --no_environment"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("from DEVPLACE_ADDRESS"));
  EXPECT_EQ(r.out, "");

  // DefaultTarget passes the squatted socket over (as $XDG_RUNTIME_DIR/devplace.sock) and says why.
  const char* old_xdg = getenv("XDG_RUNTIME_DIR");
  const std::string saved_xdg = old_xdg != nullptr ? old_xdg : "";
  const char* old_address = getenv("DEVPLACE_ADDRESS");
  const std::string saved_address = old_address != nullptr ? old_address : "";
  setenv("XDG_RUNTIME_DIR", squatted.path().c_str(), 1);
  unsetenv("DEVPLACE_ADDRESS");
  std::vector<std::string> notes;
  const std::string target = DefaultTarget(&notes);
  if (old_xdg != nullptr) setenv("XDG_RUNTIME_DIR", saved_xdg.c_str(), 1); else unsetenv("XDG_RUNTIME_DIR");
  if (old_address != nullptr) setenv("DEVPLACE_ADDRESS", saved_address.c_str(), 1);
  EXPECT_NE(target, "unix:" + sock);
  EXPECT_THAT(absl::StrJoin(notes, "\n"), HasSubstr("unix:" + sock + " (socket " + sock + " is owned by uid 65534"));
  // An unreachable daemon's UNAVAILABLE names DEVPLACE_ADDRESS and what was passed over.
  ConnectOptions options;
  options.address = "unix:" + squatted.path() + "/absent.sock";
  options.timeout = absl::Seconds(2);
  absl::StatusOr<Client> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Status unreachable = client->Inventory().status();
  EXPECT_EQ(unreachable.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(unreachable.message()), HasSubstr("DEVPLACE_ADDRESS"));
  EXPECT_THAT(std::string(unreachable.message()), HasSubstr(options.address));

  StopBackground(squatter);
}

TEST(OperatorSockets, NonRootDaemonCreatesOnlyItsOwnRuntimeDirectory) {
  const std::string runtime = absl::StrCat("/tmp/devplace-", kNobody);
  if (std::filesystem::exists(runtime)) GTEST_SKIP() << runtime << " exists already on this machine";
  const CommandResult started = RunCommand(AsNobody(absl::StrCat(
      "env -u XDG_RUNTIME_DIR ", ShellQuote(DEVPLACE_DAEMON_BINARY), " --torch_probe_command=none --host_root=",
      ShellQuote(FixtureHost("cpu-only")), " --listen=unix:", runtime, "/devplace.sock >/dev/null 2>&1 & echo $!")));
  const pid_t pid = std::atoi(started.out.c_str());
  ASSERT_GT(pid, 0);
  const bool created = WaitForFile(runtime + "/devplace.sock", absl::Seconds(20));
  struct stat st {};
  stat(runtime.c_str(), &st);
  StopBackground(pid);
  std::filesystem::remove_all(runtime);
  ASSERT_TRUE(created);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// ---- item 3: RefreshInventory access and rate ---------------------------------------------------

TEST(OperatorRefresh, OnlyRootOrTheSocketGroupOverTheUnixSocketAndRateLimited) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);  // nobody may reach the socket
  const struct group* users = getgrnam("users");
  ASSERT_NE(users, nullptr);
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--refresh_interval=0s", "--socket_mode=0666",
                               "--socket_group=users", "--refresh_min_interval=1h"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));

  // Plaintext TCP: refused, saying who may.
  grpc::Status tcp = Refresh(d.tcp_target());
  EXPECT_EQ(tcp.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(tcp.error_message(), HasSubstr("allowed only to root"));
  EXPECT_THAT(tcp.error_message(), HasSubstr("members of group users"));
  EXPECT_THAT(tcp.error_message(), HasSubstr("plaintext TCP"));

  // nobody over the socket, not in the group: refused; reading is still fine.
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target());
  CommandResult r = RunCommand(AsNobody(cli + " refresh"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(r.err, HasSubstr("this caller is uid 65534"));
  r = RunCommand(AsNobody(cli + " inventory --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // nobody with the socket group as a supplementary group (SO_PEERGROUPS): allowed.
  r = RunCommand(AsNobody(cli + " refresh --json", std::to_string(users->gr_gid)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"revision\": \"1\""));

  // The next caller-started probe within --refresh_min_interval: RESOURCE_EXHAUSTED with the wait.
  grpc::Status limited = Refresh(d.unix_target());
  EXPECT_EQ(limited.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(limited.error_message(), HasSubstr("retry in"));
  ExpectCleanStop(d);
}

// ---- a deleted socket comes back on SIGHUP; a live one is not taken -------------

TEST(OperatorSockets, DeletedSocketIsRecreatedOnSighupButAnotherDaemonsIsLeftAlone) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  ASSERT_EQ(unlink(d.socket_path().c_str()), 0);
  d.Signal(SIGHUP);
  ASSERT_TRUE(d.WaitForLog("event=socket_recreated", absl::Seconds(10))) << d.Log();
  struct stat st;
  ASSERT_EQ(stat(d.socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Inventory inv;
  EXPECT_TRUE(Stub(d.unix_target())->GetInventory(&ctx, {}, &inv).ok());

  // Deleted again, and a second daemon takes the free path: the first leaves it to it.
  ASSERT_EQ(unlink(d.socket_path().c_str()), 0);
  TempDir dir2;
  const CommandResult second = RunCommand(absl::StrCat(
      ShellQuote(DEVPLACE_DAEMON_BINARY), " --torch_probe_command=none --host_root=", ShellQuote(FixtureHost("cpu-only")),
      " --lease_state_file=none --listen=unix:",  // the first one's lease file is its own (locked)
      d.socket_path(), " >", dir2.File("log"), " 2>&1 & echo $!"));
  const pid_t other = std::atoi(second.out.c_str());
  ASSERT_GT(other, 0);
  ASSERT_TRUE(WaitForFile(d.socket_path(), absl::Seconds(20)));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(stat(d.socket_path().c_str(), &st), 0);
  const ino_t taken = st.st_ino;
  d.Signal(SIGHUP);
  EXPECT_TRUE(d.WaitForLog("event=socket_lost", absl::Seconds(10))) << d.Log();
  ASSERT_EQ(stat(d.socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, taken);
  StopBackground(other);
  ExpectCleanStop(d);
}

// ---- item 10: health per service ------------------------------------------------------------------

TEST(OperatorHealth, ThePlacementServiceHasItsOwnHealthStatus) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + FixtureHost("cpu-only"), "--refresh_interval=0s"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(d.tcp_target(), grpc::InsecureChannelCredentials()));
  for (const std::string& name : {std::string(""), std::string("devplace.v1.DevicePlacement")}) {
    SCOPED_TRACE(name);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s;
    for (int i = 0; i < 100; ++i) {  // SERVING is set right after the first inventory is logged
      grpc::ClientContext ctx;
      grpc::health::v1::HealthCheckRequest req;
      req.set_service(name);
      s = health->Check(&ctx, req, &resp);
      if (s.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  ExpectCleanStop(d);
}

// ---- items 8, 9, 12: the CLI's warnings, JSON and libtorch line ---------------------------------

TEST(OperatorCli, WarningsGoToStderrJsonIsTwoSpacesAndTheTorchLineSaysWhoseViewItIs) {
  TempDir dir;
  std::vector<std::string> flags = {"--host_root=" + FixtureHost("nvidia-2x-h100"), "--refresh_interval=0s"};
#ifdef DEVPLACE_TORCH_PROBE_BINARY
  flags.push_back("--torch_probe_command=" DEVPLACE_TORCH_PROBE_BINARY);
  // Loading libtorch takes about 1 s on an idle machine and passed the 10 s default on a loaded one.
  flags.push_back("--probe_timeout=120s");
#endif
  DaemonProcess d(dir.path(), flags);
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20)));
  const std::string cli = absl::StrCat(ShellQuote(DEVPLACE_CLI_BINARY), " --address=", d.unix_target(), " ");
  // A job that sees none of the GPUs: cpu on stdout, the reason on stderr.
  CommandResult r = RunCommand(cli + "resolve --workload=inference --device_map=auto --no_environment "
                                     "--job_device_nodes=none");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cpu\n");
  EXPECT_THAT(r.err, HasSubstr("devplace: warning: "));
  r = RunCommand(cli + "resolve --workload=inference --device_map=auto --no_environment --job_device_nodes=none "
                       "--quiet");
  EXPECT_EQ(r.out, "cpu\n");
  EXPECT_EQ(r.err, "");
  // --strict's error stands on its own.
  r = RunCommand(cli + "resolve --workload=inference --device_map=auto --no_environment "
                       "--env=CUDA_VISIBLE_DEVICES=7 --strict");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("CUDA_VISIBLE_DEVICES"));
  EXPECT_THAT(r.err, Not(HasSubstr("see the warning above")));
  // Two-space JSON for every command.
  for (const char* command : {"inventory --json", "backends --json", "health --json"}) {
    SCOPED_TRACE(command);
    r = RunCommand(cli + command);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::vector<std::string> lines = absl::StrSplit(r.out, '\n');
    ASSERT_GT(lines.size(), 2u);
    EXPECT_EQ(lines[1].find_first_not_of(' '), 2u) << lines[1];
  }
#ifdef DEVPLACE_TORCH_PROBE_BINARY
  ASSERT_TRUE(d.WaitForLog("event=torch_probe result=ok", absl::Seconds(120))) << d.Log();
  // The view reaches the inventory with the probe run that follows the torch probe: wait for it
  // ("not probed yet" until then).
  for (const absl::Time give_up = absl::Now() + absl::Seconds(120); absl::Now() < give_up;) {
    r = RunCommand(cli + "inventory");
    if (r.out.find("libtorch") != std::string::npos && r.out.find("not probed yet") == std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(r.out, HasSubstr("daemon's own libtorch"));
  EXPECT_THAT(r.out, HasSubstr("no backend for cuda/nvidia present here: the jobs' PyTorch was not probed"));
#endif
  ExpectCleanStop(d);
}

}  // namespace
}  // namespace devplace::testing
