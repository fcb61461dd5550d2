// /metrics while local users hold connections open without finishing a request: idle ones (connect
// only) and slow ones (a request header dribbled a byte at a time). Scrapes must still be answered
// at once (they once waited ~29 s behind one idle connection, past Prometheus' 10 s scrape
// timeout), and the held connections are closed after the request timeout (5 s).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

std::string Host(const std::string& name) { return std::string(DEVPLACE_FIXTURES_DIR) + "/hosts/" + name; }

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

// Reads until the peer closes or `timeout` passes; true when it closed.
bool ReadUntilClosed(int fd, absl::Duration timeout, std::string* out) {
  const absl::Time deadline = absl::Now() + timeout;
  char buf[8192];
  for (;;) {
    const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) return false;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;  // closed (or reset)
    if (out != nullptr) out->append(buf, static_cast<size_t>(n));
  }
}

// One scrape on a connection of its own; the whole answer, or "" when it took longer than `timeout`.
std::string Scrape(int port, absl::Duration timeout) {
  const int fd = Connect(port);
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string answer;
  const bool closed = ReadUntilClosed(fd, timeout, &answer);
  close(fd);
  return closed ? answer : "";
}

TEST(MetricsConnections, ScrapesAreServedWhileIdleAndSlowConnectionsAreHeld) {
  TempDir dir;
  DaemonProcess d(dir.path(), {"--host_root=" + Host("cpu-only"), "--metrics_listen=127.0.0.1:0"});
  ASSERT_TRUE(d.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.Log();
  std::smatch m;
  const std::string log = d.Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("event=metrics_listening url=http://127\\.0\\.0\\.1:([0-9]+)/")));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(m[1].str(), &port));

  // Four idle connections and two that dribble a request header, a byte every 200 ms.
  const absl::Time held_at = absl::Now();
  std::vector<int> idle, slow;
  for (int i = 0; i < 4; ++i) idle.push_back(Connect(port));
  for (int i = 0; i < 2; ++i) slow.push_back(Connect(port));
  std::atomic<bool> stop{false};
  struct Joiner {  // on every way out of the test, failed assertions included
    std::atomic<bool>& stop;
    std::thread thread;
    ~Joiner() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } dribbler{stop, std::thread([&] {
    const std::string header = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(200, 'x');
    for (size_t i = 0; i < header.size() && !stop.load(); ++i) {
      for (int fd : slow) (void)!send(fd, &header[i], 1, MSG_NOSIGNAL);
      absl::SleepFor(absl::Milliseconds(200));
    }
  })};
  absl::SleepFor(absl::Milliseconds(300));  // every held connection has a worker by now

  // Scrapes in a row, each answered within 2 s (Prometheus' default timeout is 10 s).
  absl::Duration slowest;
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    const std::string answer = Scrape(port, absl::Seconds(2));
    slowest = std::max(slowest, absl::Now() - start);
    ASSERT_THAT(answer, HasSubstr("HTTP/1.1 200 OK")) << "scrape " << i << " not answered within 2 s";
    EXPECT_THAT(answer, HasSubstr("devplace_"));
  }
  std::cout << "slowest of 5 scrapes with 6 connections held: " << slowest << "\n";

  // The held connections are closed once the request timeout (5 s) has passed, not after 30 s.
  for (int fd : idle) {
    EXPECT_TRUE(ReadUntilClosed(fd, held_at + absl::Seconds(9) - absl::Now(), nullptr)) << "an idle connection";
  }
  for (int fd : slow) {
    EXPECT_TRUE(ReadUntilClosed(fd, held_at + absl::Seconds(9) - absl::Now(), nullptr)) << "a slow connection";
  }
  std::cout << "held connections closed after " << absl::Now() - held_at << "\n";
  for (int fd : idle) close(fd);
  for (int fd : slow) close(fd);
}

}  // namespace
}  // namespace devplace::testing
