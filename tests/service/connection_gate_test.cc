// ConnectionGate over real socket descriptors (socketpair): the per-peer and total caps, the
// reserve, closed connections noticed by a sweep, and a descriptor number reused by a new one.
#include "server/service/connection_gate.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

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

}  // namespace
}  // namespace devplace::service
