// Loopback TCP ports for tests: a socket bound to a free port (to hold it busy, or to learn a port
// that was free a moment ago).
#ifndef DEVPLACE_TESTS_COMMON_PORTS_H_
#define DEVPLACE_TESTS_COMMON_PORTS_H_

namespace devplace::testing {

// A TCP socket bound to a free 127.0.0.1 port (its number in `*port`), not listening; aborts on
// failure.
int BoundLoopbackSocket(int* port);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_PORTS_H_
