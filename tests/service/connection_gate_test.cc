// ConnectionGate over real socket descriptors (socketpair): the per-peer and total caps, the
// reserve, closed connections noticed by a sweep, and a descriptor number reused by a new one; the
// unowned peer, the rate of new connections, Release(), PeerOf() and a descriptor limit lowered
// while the gate runs.
#include "server/service/connection_gate.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace devplace::service {
namespace {

// One end of a fresh connected socket pair (the other end is kept open in `peers`).
int NewConnection(std::vector<int>& peers) {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  peers.push_back(fds[1]);
  return fds[0];
}

class ConnectionGateTest : public ::testing::Test {
 protected:
  ~ConnectionGateTest() override {
    for (int fd : open_) close(fd);
  }
  int Open() {
    const int fd = NewConnection(open_);
    open_.push_back(fd);
    return fd;
  }
  void Close(int fd) {
    close(fd);
    open_.erase(std::remove(open_.begin(), open_.end(), fd), open_.end());
  }
  std::vector<int> open_;
};

TEST_F(ConnectionGateTest, PerPeerAndTotalCapsThenTheReserve) {
  ConnectionGate gate({/*max_total=*/5, /*max_per_peer=*/3, /*reserve=*/2});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kPeerFull);
  EXPECT_EQ(gate.Admit(Open(), "ip:10.0.0.7", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "ip:10.0.0.8", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "ip:10.0.0.9", false), Admission::kTotalFull);  // 5 open
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kAdmitted);          // the reserve
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kTotalFull);  // reserve used up
  const ConnectionGate::Stats s = gate.stats();
  EXPECT_EQ(s.open, 7);
  EXPECT_EQ(s.admitted, 7u);
  EXPECT_EQ(s.refused_peer, 1u);
  EXPECT_EQ(s.refused_total, 2u);
}

TEST_F(ConnectionGateTest, AClosedConnectionFreesItsSlotAtTheNextSweep) {
  ConnectionGate gate({/*max_total=*/10, /*max_per_peer=*/2, /*reserve=*/0});
  const int a = Open();
  ASSERT_EQ(gate.Admit(a, "uid:1000", false), Admission::kAdmitted);
  ASSERT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  Close(a);
  EXPECT_EQ(gate.Sweep(), 1);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kPeerFull);
}

TEST_F(ConnectionGateTest, ARefusalSweepsFirstSoAJustClosedSlotIsReused) {
  ConnectionGate gate({/*max_total=*/10, /*max_per_peer=*/1, /*reserve=*/0});
  const int a = Open();
  ASSERT_EQ(gate.Admit(a, "uid:1000", false), Admission::kAdmitted);
  Close(a);
  // No Sweep() call, and a's number now names another socket (b, never admitted): the refusal
  // path re-counts, sees a different inode behind that number, and frees the slot.
  std::vector<int> keep;
  const int b = NewConnection(keep);
  const int c = NewConnection(keep);
  EXPECT_EQ(gate.Admit(c, "uid:1000", false), Admission::kAdmitted);
  for (int fd : keep) close(fd);
  close(b);
  close(c);
}

TEST_F(ConnectionGateTest, ADescriptorNumberAcceptedAgainReplacesTheOldEntry) {
  ConnectionGate gate({/*max_total=*/10, /*max_per_peer=*/1, /*reserve=*/0});
  const int a = Open();
  ASSERT_EQ(gate.Admit(a, "uid:1000", false), Admission::kAdmitted);
  Close(a);
  const int again = Open();  // the lowest free number: a's
  ASSERT_EQ(again, a);
  EXPECT_EQ(gate.Admit(again, "uid:2000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.stats().open, 1);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);  // 1000's slot is free
}

TEST_F(ConnectionGateTest, UnownedConnectionsAreOnePeerWithTheirOwnCapNeverTheReserve) {
  ConnectionLimits limits{/*max_total=*/4, /*max_per_peer=*/3, /*reserve=*/2};
  limits.max_unowned = 2;
  ConnectionGate gate(limits);
  const Peer unowned{kUnownedPeer, PeerKind::kUnowned, ""};
  EXPECT_EQ(gate.Admit(Open(), unowned), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), unowned), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), unowned), Admission::kUnownedFull);
  // Unowned connections are nobody's: every user still has its whole cap, within the total.
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.Admit(Open(), "uid:2000", false), Admission::kTotalFull);  // 4 open: they count in the total
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kAdmitted);       // root: the reserve
  const ConnectionGate::Stats s = gate.stats();
  EXPECT_EQ(s.refused_unowned, 1u);
  EXPECT_EQ(s.refused_total, 1u);
  EXPECT_EQ(s.refused_peer, 0u);
  EXPECT_EQ(s.open, 5);
}

TEST_F(ConnectionGateTest, APeerOpensAtMostItsRateOfNewConnectionsInBurstsOfASecondsWorthOrItsCap) {
  // Opens `n` connections of `peer`, each closed at once (a connect-and-close flood); how many were
  // admitted before the first refusal, and that refusal.
  const auto churn = [this](ConnectionGate& gate, const std::string& peer, int n, Admission* refusal) {
    for (int i = 0; i < n; ++i) {
      const int fd = Open();
      *refusal = gate.Admit(fd, peer, false);
      if (*refusal != Admission::kAdmitted) return i;
      gate.Release(fd);
      Close(fd);
    }
    return n;
  };
  ConnectionLimits limits{/*max_total=*/100, /*max_per_peer=*/3, /*reserve=*/4};
  limits.rate_per_peer = 4;  // one token every 250 ms; a second's worth (4) is more than the cap (3)
  ConnectionGate gate(limits);
  Admission refusal = Admission::kAdmitted;
  EXPECT_EQ(churn(gate, "uid:1000", 10, &refusal), 4);
  EXPECT_EQ(refusal, Admission::kRateLimited);
  EXPECT_EQ(gate.Admit(Open(), "uid:2000", false), Admission::kAdmitted);  // another peer's own bucket
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kAdmitted);      // reserved: never limited
  EXPECT_EQ(gate.Admit(Open(), "uid:0", true), Admission::kAdmitted);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);  // one token back
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kRateLimited);
  EXPECT_EQ(gate.stats().refused_rate, 2u);
  // A slow rate: the burst is the cap.
  limits.rate_per_peer = 1;
  ConnectionGate slow(limits);
  EXPECT_EQ(churn(slow, "uid:1000", 10, &refusal), 3);
  EXPECT_EQ(refusal, Admission::kRateLimited);
  // A peer at its cap is refused by the cap, whatever its rate.
  ConnectionGate capped(limits);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(capped.Admit(Open(), "uid:3000", false), Admission::kAdmitted);
  EXPECT_EQ(capped.Admit(Open(), "uid:3000", false), Admission::kPeerFull);
}

TEST_F(ConnectionGateTest, ReleaseFreesTheSlotAtOnceAndPeerOfNamesTheAdmittedPeer) {
  ConnectionGate gate({/*max_total=*/10, /*max_per_peer=*/1, /*reserve=*/0});
  const int a = Open();
  ASSERT_EQ(gate.Admit(a, Peer{"uid:1000", PeerKind::kOrdinary, "ipv4:127.0.0.1:40000"}), Admission::kAdmitted);
  EXPECT_EQ(gate.PeerOf("ipv4:127.0.0.1:40000"), "uid:1000");
  EXPECT_EQ(gate.PeerOf("ipv4:127.0.0.1:40001"), std::nullopt);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kPeerFull);
  gate.Release(a, /*timed_out=*/true);  // still open: only Release() frees it
  EXPECT_EQ(gate.PeerOf("ipv4:127.0.0.1:40000"), std::nullopt);
  EXPECT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  EXPECT_EQ(gate.stats().timed_out, 1u);
}

// The total cap follows the soft RLIMIT_NOFILE at every admission (root's prlimit after start).
TEST_F(ConnectionGateTest, TheTotalCapFollowsTheDescriptorLimitWhenItIsLoweredAndRaised) {
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  ASSERT_NE(original.rlim_cur, RLIM_INFINITY);
  ConnectionLimits limits{/*max_total=*/50, /*max_per_peer=*/50, /*reserve=*/1};
  // Room for 3 connections under the current limit.
  limits.descriptor_headroom = static_cast<int>(original.rlim_cur) - limits.reserve - 3;
  ConnectionGate gate(limits);
  EXPECT_EQ(gate.EffectiveMaxTotal(), 3);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gate.Admit(Open(), "uid:1000", false), Admission::kAdmitted);
  rlimit lowered = original;
  lowered.rlim_cur -= 1;  // room for 2: full
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const Admission while_lowered = gate.Admit(Open(), "uid:2000", false);
  const int cap_while_lowered = gate.stats().max_total;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  EXPECT_EQ(while_lowered, Admission::kTotalFull);
  EXPECT_EQ(cap_while_lowered, 2);
  EXPECT_EQ(gate.Admit(Open(), "uid:2000", false), Admission::kAdmitted);  // raised again: 3
  EXPECT_EQ(gate.stats().max_total, 3);
}

}  // namespace
}  // namespace devplace::service
