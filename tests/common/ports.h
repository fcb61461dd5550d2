// Loopback TCP ports for tests: a socket bound to a free port (to hold it busy, or to learn a port
// that was free a moment ago); the host's own non-loopback address.
#ifndef DEVPLACE_TESTS_COMMON_PORTS_H_
#define DEVPLACE_TESTS_COMMON_PORTS_H_

#include <string>

namespace devplace::testing {

// A TCP socket bound to a free 127.0.0.1 port (its number in `*port`), not listening; aborts on
// failure.
int BoundLoopbackSocket(int* port);

// The first IPv4 address of one of this host's network interfaces outside 127.0.0.0/8 (the node's
// own address, as a local client may connect from and to it), or "" when it has none.
std::string NodeAddress();

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_PORTS_H_
