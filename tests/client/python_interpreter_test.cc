// AskPythonInterpreter (`devplace resolve --python=PATH`) against fake interpreters: one that never
// answers, one that writes forever, one that floods stderr before answering, one that leaves a
// child holding its stdout, one that prints 2,000 lines of its own. The call ends within its
// deadline, kills the interpreter's process group, drains both pipes together, and keeps only the
// sys.path lines it asked for.
#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "devplace/client.h"
#include "gtest/gtest.h"
#include "tests/common/temp_dir.h"

namespace devplace {
namespace {

using testing::ReadFile;
using testing::TempDir;

class FakeInterpreter : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("site/torch-2.5.1+cu124.dist-info/METADATA", "Name: torch\nVersion: 2.5.1+cu124\n");
    path_line_ = absl::StrCat("devplace-path ", absl::BytesToHexString(dir_.File("site")));
  }

  // A /bin/sh script standing in for python (its arguments ignored).
  std::string Interpreter(const std::string& body) { return dir_.Script("python", body).back(); }

  // Whether the process whose pid the script wrote to `file` is gone (killed with its group).
  bool Gone(const std::string& file) {
    int pid = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(dir_.File(file))), &pid) || pid <= 0) return false;
    for (int i = 0; i < 100; ++i) {
      // Gone, or a zombie its new parent has not reaped yet (killed all the same).
      const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
      const size_t paren = stat.rfind(')');
      if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  TempDir dir_;
  std::string path_line_;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST_F(FakeInterpreter, ASilentOneIsKilledAtTheDeadline) {
  const std::string python = Interpreter(absl::StrCat("echo $$ > ", dir_.File("pid"), "\nexec sleep 100"));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python, absl::Seconds(1));
  EXPECT_LT(Seconds(start), 5);
  ASSERT_EQ(env.status().code(), absl::StatusCode::kDeadlineExceeded) << env.status();
  EXPECT_EQ(env.status().message(), absl::StrCat(python, " -I did not report its sys.path within 1 s; it and its "
                                                 "process group were killed"));
  EXPECT_TRUE(Gone("pid"));
}

TEST_F(FakeInterpreter, OneWritingForeverIsKilledAtTheDeadline) {
  const std::string python =
      Interpreter(absl::StrCat("echo $$ > ", dir_.File("pid"), "\nwhile :; do echo '", path_line_, "'; done"));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python, absl::Seconds(1));
  EXPECT_LT(Seconds(start), 5);
  EXPECT_EQ(env.status().code(), absl::StatusCode::kDeadlineExceeded) << env.status();
  EXPECT_TRUE(Gone("pid"));
}

TEST_F(FakeInterpreter, AStderrFloodIsDrainedWhileItAnswers) {
  // 300 KB on stderr before a word on stdout: read one pipe to its end first and both block.
  const std::string python = Interpreter(absl::StrCat(
      "i=0; while [ $i -lt 3000 ]; do echo 'a warning line of about one hundred bytes, again and again and again "
      "and again....' >&2; i=$((i+1)); done\necho '",
      path_line_, "'"));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python, absl::Seconds(20));
  EXPECT_LT(Seconds(start), 15);
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_EQ(env->packages_size(), 1);
  EXPECT_EQ(env->packages(0).name(), "torch");
  EXPECT_EQ(env->packages(0).version(), "2.5.1+cu124");
  EXPECT_EQ(env->source(), absl::StrCat("importlib.metadata of ", python));
}

TEST_F(FakeInterpreter, AChildLeftHoldingItsOutputDoesNotHoldTheAnswer) {
  const std::string python = Interpreter(absl::StrCat("echo '", path_line_, "'\nsleep 100 &\necho $! > ",
                                                      dir_.File("pid"), "\nexit 0"));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python, absl::Seconds(30));
  EXPECT_LT(Seconds(start), 5);  // 200 ms after the interpreter exits, not the 100 s of its child
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_EQ(env->packages_size(), 1);
  EXPECT_TRUE(Gone("pid"));
}

TEST_F(FakeInterpreter, OnlyItsSysPathLinesCount) {
  // 2,000 lines of packages, as an older devplace asked for, then its path twice and a line that is
  // not hex: the packages are read from the path, once.
  const std::string python = Interpreter(absl::StrCat(
      "i=0; while [ $i -lt 2000 ]; do printf 'package%d\\t1.0\\n' $i; i=$((i+1)); done\necho '", path_line_,
      "'\necho '", path_line_, "'\necho 'devplace-path zz'"));
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python, absl::Seconds(20));
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_EQ(env->packages_size(), 1);
  EXPECT_EQ(env->packages(0).name(), "torch");
  EXPECT_EQ(env->problems_size(), 0);
}

TEST_F(FakeInterpreter, AFailureQuotesItsLastStderrLine) {
  const std::string python = Interpreter("echo 'first' >&2\necho 'SyntaxError: bad' >&2\nexit 1");
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter(python);
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(env.status().message(), absl::StrCat(python, " -I failed to list its packages (SyntaxError: bad); want a "
                                                 "Python >= 3.8 interpreter"));
}

TEST(RealInterpreter, DebiansPythonReportsItsPath) {
  absl::StatusOr<v1::JobEnvironment> env = AskPythonInterpreter("/usr/bin/python3");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source(), "importlib.metadata of /usr/bin/python3");
  EXPECT_EQ(env->problems_size(), 0);
}

}  // namespace
}  // namespace devplace
