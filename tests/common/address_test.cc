// server/common/address.h: the one parser of devplaced's --listen, the CLI's --address and
// fleet --targets, and the loopback test. One table of every form, for both uses.
#include "server/common/address.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace devplace {
namespace {

struct Row {
  const char* text;
  bool listen;  // accepted by AddressUse::kListen
  bool dial;    // accepted by AddressUse::kDial
  const char* host_or_path;  // what either use parses it into, when accepted
  int port;
};

constexpr Row kRows[] = {
    {"unix:/run/devplace/devplace.sock", true, true, "/run/devplace/devplace.sock", 0},
    {"unix:///run/devplace/devplace.sock", false, true, "/run/devplace/devplace.sock", 0},  // gRPC's URI form
    {"unix://run/devplace.sock", false, false, nullptr, 0},
    {"unix:relative.sock", false, false, nullptr, 0},
    {"unix:/", false, false, nullptr, 0},
    {"unix:", false, false, nullptr, 0},
    {"127.0.0.1:7465", true, true, "127.0.0.1", 7465},
    {"localhost:0", true, false, "localhost", 0},  // port 0: pick one when listening, never dialled
    {"node-1.example_lab:65535", true, true, "node-1.example_lab", 65535},
    {"[::1]:7465", true, true, "::1", 7465},
    {"[::]:7466", true, true, "::", 7466},
    {"[fe80::1%eth0]:7465", true, true, "fe80::1%eth0", 7465},
    {"[::ffff:127.0.0.1]:1", true, true, "::ffff:127.0.0.1", 1},
    {"127.0.0.1:65536", false, false, nullptr, 0},
    {"127.0.0.1:-1", false, false, nullptr, 0},
    {"127.0.0.1:+1", false, false, nullptr, 0},
    {"127.0.0.1:", false, false, nullptr, 0},
    {":7465", false, false, nullptr, 0},
    {"7465", false, false, nullptr, 0},
    {"", false, false, nullptr, 0},
    {"::1:7465", false, false, nullptr, 0},  // an unbracketed IPv6 address is ambiguous with its port
    {"[::1:7465", false, false, nullptr, 0},
    {"[]:7465", false, false, nullptr, 0},
    {"[::g]:7465", false, false, nullptr, 0},
    {"tcp://127.0.0.1:7465", false, false, nullptr, 0},  // no schemes
    {"dns:///node1:7465", false, false, nullptr, 0},
    {"ipv4:127.0.0.1:7465", false, false, nullptr, 0},
    {"node 1:7465", false, false, nullptr, 0},
    {"tls:127.0.0.1:7466", false, false, nullptr, 0},  // tls: is devplaced's prefix, stripped before parsing
};

TEST(Address, EveryFormForListenAndDial) {
  for (const Row& row : kRows) {
    for (const AddressUse use : {AddressUse::kListen, AddressUse::kDial}) {
      const bool want = use == AddressUse::kListen ? row.listen : row.dial;
      const std::optional<Address> got = ParseAddress(row.text, use);
      SCOPED_TRACE(std::string(row.text) + (use == AddressUse::kListen ? " (listen)" : " (dial)"));
      ASSERT_EQ(got.has_value(), want);
      if (!want) continue;
      if (got->is_unix) {
        EXPECT_EQ(got->path, row.host_or_path);
      } else {
        EXPECT_EQ(got->host, row.host_or_path);
        EXPECT_EQ(got->port, row.port);
        EXPECT_EQ(got->ipv6, row.text[0] == '[');
      }
    }
  }
}

TEST(Address, LoopbackHostsStayOnThisMachine) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.5", "node1", "::ffff:10.0.0.1", "128.0.0.1",
                           "localhost.example", ""}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace devplace
