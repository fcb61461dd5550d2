// What the tests of the real daemon share (tests/integration, tests/robustness, tests/service): the
// CLI run as a process, a stub and call deadlines for the daemon's gRPC API, a health check over a
// connection of its own, and the inventory from the CLI's JSON. Beside DaemonProcess
// (daemon_process.h), which runs the daemon; the fixture host trees (FixtureHost) and environment
// variables for the daemons a test starts (ScopedEnv) are tests/common's; lookups in an inventory
// (FindReport, FindRow, FindDevice) are tests/probe/test_util.h's, which the library
// devplace_daemon_test_util (tests/integration/CMakeLists.txt) compiles in too.
#ifndef DEVPLACE_TESTS_INTEGRATION_DAEMON_TEST_UTIL_H_
#define DEVPLACE_TESTS_INTEGRATION_DAEMON_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/common/command.h"

namespace devplace::testing {

// Runs `devplace <args>` (the build's CLI) in a shell, after `prefix` (e.g. "env -u DEVPLACE_ADDRESS
// timeout 30") when one is given: its stdout, stderr and exit status. `args` is shell text: the
// caller quotes what needs it (ShellQuote).
CommandResult RunCli(const std::string& args, const std::string& prefix = "");

// A DevicePlacement stub on `target` (`unix:/path` or `host:port`, e.g. DaemonProcess::unix_target())
// over an insecure channel of its own; the channel connects on the first call.
std::unique_ptr<v1::DevicePlacement::Stub> Stub(const std::string& target);

// A ClientContext whose call fails with DEADLINE_EXCEEDED once `timeout` from now has passed (one per
// call: gRPC does not reuse a context).
std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout = absl::Seconds(10));

// Whether one grpc.health.v1 Check of the whole server ("") on `target`, over a new connection of
// its own (a local subchannel pool, so no other channel's connection is reused), answers OK within
// `timeout`: a daemon that accepts and serves new connections.
bool HealthServes(const std::string& target, absl::Duration timeout);

// The inventory in `json` (`devplace inventory --json`, `devplace probe --json`); a JSON the
// inventory cannot be parsed from fails the running test (EXPECT, quoting its first 500 characters)
// and gives what was parsed.
v1::Inventory ParseInventoryJson(const std::string& json);

// The last 3000 characters of `log` (all of a shorter one), for a failure message.
std::string Tail(const std::string& log);

// The first line of a --probe_command script that counts, slows or breaks the daemon's full probes:
// the other runs of the same command, which start on their own schedule (the usage refresh's
// `--usage_only` every --usage_interval, the XID watcher's `--watch_xid` after start-up), exec
// `probe` (the real devplace-probe) at once, so "the second run" is the second full probe.
std::string OtherRunsExec(const std::string& probe);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_INTEGRATION_DAEMON_TEST_UTIL_H_
