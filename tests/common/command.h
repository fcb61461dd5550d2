// Running a shell command from a test and capturing what it did: its exit status, stdout and
// stderr (separately).
#ifndef DEVPLACE_TESTS_COMMON_COMMAND_H_
#define DEVPLACE_TESTS_COMMON_COMMAND_H_

#include <string>

namespace devplace::testing {

struct CommandResult {
  // The exit status; 128 + the signal's number when a signal ended it; -1 when it could not be
  // started or waited for.
  int exit_code = -1;
  std::string out;  // everything it wrote to stdout
  std::string err;  // everything it wrote to stderr
};

// Runs `/bin/sh -c <shell_command>` with stdin from /dev/null and waits for it, collecting stdout
// and stderr until both are closed (a redirection inside `shell_command`, such as `2>&1` or
// `>file`, applies as usual). The command's words are shell words: quote what needs quoting.
CommandResult RunCommand(const std::string& shell_command);

// `word` as one shell word for RunCommand: in single quotes, each ' written '\''. Every path that
// goes into a shell command is quoted so: the checkout, and so the binaries and fixtures, may live
// at a path with a space (or any other character the shell reads).
std::string ShellQuote(const std::string& word);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_COMMAND_H_
