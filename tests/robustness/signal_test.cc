// Signals against a daemon with a TLS listener (whose certificate watcher is a thread of its own):
// SIGHUP, SIGTERM and SIGINT must be blocked in every thread so that only the daemon's signal loop
// takes them. A thread that leaves them unblocked is where the kernel may deliver a SIGHUP, and
// its default action kills the daemon without a log line (and systemd counts death by SIGHUP as a
// clean exit, so Restart=on-failure does not restart it).
#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_pki.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

struct ThreadMask {
  std::string name;
  uint64_t blocked = 0;  // SigBlk: bit N-1 is signal N
  // In rt_sigtimedwait (/proc/.../syscall), which unblocks the signals it waits for while it waits
  // and takes them itself: the daemon's signal loop.
  bool in_sigtimedwait = false;
};

// Every thread of `pid` with its blocked-signal mask, from /proc/<pid>/task/*/status.
std::vector<ThreadMask> ThreadMasks(pid_t pid) {
  std::vector<ThreadMask> out;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    ThreadMask t;
    for (absl::string_view line : absl::StrSplit(ReadFile(task.path().string() + "/status"), '\n')) {
      if (absl::ConsumePrefix(&line, "Name:\t")) t.name = std::string(line);
      if (absl::ConsumePrefix(&line, "SigBlk:\t")) {
        EXPECT_TRUE(absl::SimpleHexAtoi(line, &t.blocked)) << line;
      }
    }
    t.in_sigtimedwait = absl::StartsWith(ReadFile(task.path().string() + "/syscall"),
                                         absl::StrCat(SYS_rt_sigtimedwait, " "));
    out.push_back(t);
  }
  return out;
}

bool Resolves(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::DevicePlacement::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ResolveDeviceRequest request;
  request.set_workload(v1::WORKLOAD_INFERENCE);
  v1::ResolveDeviceResponse response;
  const grpc::Status s = stub->ResolveDevice(&ctx, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return s.ok() && response.device() == "cpu";
}

TEST(Signals, EveryThreadOfATlsDaemonBlocksThemAndASighupStormLeavesItServing) {
  TempDir dir;
  const CertFiles ca = MakeCa(dir.path(), "ca");
  const CertFiles server = MakeLeaf(dir.path(), ca, "server", "IP:127.0.0.1", /*client=*/false);
  const CertFiles client = MakeLeaf(dir.path(), ca, "client", "", /*client=*/true);
  DaemonProcess d(dir.path(), {"--listen=unix:" + dir.File("d.sock") + ",127.0.0.1:0,tls:127.0.0.1:0",
                               "--host_root=" + FixtureHost("cpu-only"), "--tls_cert=" + server.cert,
                               "--tls_key=" + server.key, "--tls_client_ca=" + ca.cert});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  const std::string log = d.Log();
  const std::string needle = "event=listening address=tls:127.0.0.1:";
  ASSERT_NE(log.find(needle), std::string::npos) << log;
  const size_t at = log.find(needle) + needle.size();
  const std::string tls_target = "127.0.0.1:" + log.substr(at, log.find_first_not_of("0123456789", at) - at);

  const uint64_t wanted = (1ull << (SIGHUP - 1)) | (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
  // A thread's mask and its system call are two reads: the signal thread, whose mask is empty
  // inside rt_sigtimedwait, can leave the call between them (it wakes every slice), more so on a
  // loaded machine. So sample until one sample is consistent (a thread that really takes the
  // signals outside sigtimedwait never gives one; the last sample is then judged below).
  std::vector<ThreadMask> threads;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(30); absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(10))) {
    threads = ThreadMasks(d.pid());
    if (std::all_of(threads.begin(), threads.end(), [&](const ThreadMask& t) {
          return t.in_sigtimedwait || (t.blocked & wanted) == wanted;
        })) {
      break;
    }
  }
  EXPECT_GT(threads.size(), 2u) << "the TLS daemon runs gRPC's and the certificate watcher's threads";
  int waiting = 0;
  for (const ThreadMask& t : threads) {
    if (t.in_sigtimedwait && (t.blocked & wanted) == 0) {
      ++waiting;
      continue;
    }
    EXPECT_EQ(t.blocked & wanted, wanted) << "thread '" << t.name << "' can receive SIGHUP/SIGINT/SIGTERM (SigBlk "
                                          << std::hex << t.blocked << ")";
  }
  EXPECT_LE(waiting, 1) << "one thread takes the signals";

  // The storm: every SIGHUP re-reads the TLS files and re-probes; pending ones coalesce.
  constexpr int kSighups = 3000;
  for (int i = 0; i < kSighups; ++i) d.Signal(SIGHUP);
  ASSERT_EQ(d.WaitExit(absl::Seconds(1)), -1) << "devplaced died during the SIGHUP storm; log tail:\n"
                                              << d.Log().substr(d.Log().size() > 2000 ? d.Log().size() - 2000 : 0);
  EXPECT_NE(d.Log().find("event=tls_reload result=ok"), std::string::npos);

  // Still serving on both kinds of listener, with the (reloaded) certificates.
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = ReadFile(ca.cert);
  tls.pem_cert_chain = ReadFile(client.cert);
  tls.pem_private_key = ReadFile(client.key);
  EXPECT_TRUE(Resolves(grpc::CreateChannel(tls_target, grpc::SslCredentials(tls))));
  EXPECT_TRUE(Resolves(grpc::CreateChannel(d.unix_target(), grpc::InsecureChannelCredentials())));

  d.Signal(SIGTERM);
  EXPECT_EQ(d.WaitExit(absl::Seconds(20)), 0) << d.Log().substr(d.Log().size() > 2000 ? d.Log().size() - 2000 : 0);
}

}  // namespace
}  // namespace devplace::testing
