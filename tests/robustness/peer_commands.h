// Running tests/robustness/peer.py as real unprivileged users (setpriv, so needs root) and reading
// its one-line JSON reports; shared by the connection and /metrics robustness tests.
#ifndef DEVPLACE_TESTS_ROBUSTNESS_PEER_COMMANDS_H_
#define DEVPLACE_TESTS_ROBUSTNESS_PEER_COMMANDS_H_

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/common/command.h"

namespace devplace::testing {

#define SKIP_UNLESS_ROOT()                                                          \
  if (geteuid() != 0) GTEST_SKIP() << "setpriv (a real unprivileged peer) needs root"

inline constexpr uid_t kFlooder = 65534;  // nobody
inline constexpr uid_t kOtherUser = 4242;

// `peer.py ARGS` as the unprivileged user `uid` (its own group, no supplementary groups).
inline std::string AsUser(uid_t uid, const std::string& args) {
  return absl::StrCat("setpriv --reuid=", uid, " --regid=", uid, " --clear-groups /usr/bin/python3 ",
                      ShellQuote(DEVPLACE_PEER_SCRIPT), " ", args);
}

// The number after `needle` in `text` up to a ',', '}' or ' ' (-1 when absent).
inline double NumberAfter(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  double value = -1;
  if (at == std::string::npos) return value;
  const std::string rest = text.substr(at + needle.size());
  (void)absl::SimpleAtod(rest.substr(0, rest.find_first_of(",} ")), &value);
  return value;
}
// The number `key` of peer.py's one-line JSON report.
inline double Field(const std::string& report, const std::string& key) {
  return NumberAfter(report, absl::StrCat("\"", key, "\": "));
}

// Runs every command at once and returns their stdout, in order.
inline std::vector<std::string> RunTogether(const std::vector<std::string>& commands) {
  std::vector<std::string> out(commands.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < commands.size(); ++i) {
    threads.emplace_back([&, i] {
      const CommandResult r = RunCommand(commands[i]);
      out[i] = r.out;
      if (r.exit_code != 0) out[i] += absl::StrCat(" exit ", r.exit_code, " stderr: ", r.err);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// RunTogether(commands) while `probe` (root's own calls) runs every 200 ms on a thread of its own;
// `ok` and `failed` count its rounds.
inline std::vector<std::string> RunTogetherWhileProbing(const std::vector<std::string>& commands,
                                                        const std::function<bool()>& probe, int* ok, int* failed) {
  std::atomic<bool> done{false};
  std::thread prober([&] {
    while (!done.load()) {
      ++*(probe() ? ok : failed);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::vector<std::string> out = RunTogether(commands);
  done = true;
  prober.join();
  return out;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_ROBUSTNESS_PEER_COMMANDS_H_
