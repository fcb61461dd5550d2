// libdevplace's readers of the job's files (ReadDeviceAllocation, ReadPythonEnvironment, the
// sys.path reader behind --python) against the table the Python client is held to as well
// (tests/client/reader_table.txt): every case's tree is built once by the ctest fixture
// client.reader_cases (tests/client/reader_fixtures.py), each case runs in its own reader_dump
// process, and its lines must be the table's, within a time and memory bound per case (a FIFO, a
// 1 GiB file, deep nesting or 100,000 entries cost what a small file does).
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace {

constexpr double kMaxSeconds = 10;
constexpr long kMaxRssKib = 128 * 1024;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::string line(l);  // trailing spaces dropped, as in the table
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out.push_back(std::move(line));
  }
  return out;
}

struct DumpRun {
  std::string out;
  int status = 0;
  double seconds = 0;
  long max_rss_kib = 0;
};

// reader_dump with `args`, in `cwd`: its stdout, exit status, wall time and peak RSS.
DumpRun Dump(const std::string& dump, const std::vector<std::string>& args, const std::string& cwd) {
  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> argv = {const_cast<char*>(dump.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(dump.c_str(), argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  DumpRun run;
  char buffer[65536];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) run.out.append(buffer, static_cast<size_t>(n));
  close(pipe_fds[0]);
  struct rusage usage = {};
  wait4(pid, &run.status, 0, &usage);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.max_rss_kib = usage.ru_maxrss;
  return run;
}

TEST(ReaderTable, LibdevplaceReadsEveryCaseAsTheTableSays) {
  const char* dir = std::getenv("DEVPLACE_READER_CASES");
  const char* dump = std::getenv("DEVPLACE_READER_DUMP");
  ASSERT_NE(dir, nullptr) << "run through ctest (fixture client.reader_cases builds the trees)";
  ASSERT_NE(dump, nullptr);
  const std::vector<std::string> cases = Lines(Slurp(absl::StrCat(dir, "/cases")));
  ASSERT_GT(cases.size(), 50u);
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    const std::string tree = absl::StrCat(dir, "/", name);
    const std::vector<std::string> args = absl::StrSplit(Slurp(tree + ".args"), '\0');
    const DumpRun run = Dump(dump, args, tree);
    ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.out;
    std::vector<std::string> want = Lines(Slurp(tree + ".expected"));
    std::vector<std::string> got = Lines(run.out);
    // The source line counts only where the case states it (exactly, or as its length in bytes).
    std::vector<std::string> kept;
    for (auto it = want.begin(); it != want.end();) {
      if (absl::StartsWith(*it, "source-bytes ")) {
        for (const std::string& g : got) {
          if (absl::StartsWith(g, "source ")) {
            EXPECT_EQ(absl::StrCat(g.size() - 7), it->substr(13));
          }
        }
        it = want.erase(it);
      } else {
        ++it;
      }
    }
    const bool source_stated = std::any_of(want.begin(), want.end(), [](const std::string& w) {
      return absl::StartsWith(w, "source ");
    });
    for (const std::string& g : got) {
      if (source_stated || !absl::StartsWith(g, "source ")) kept.push_back(g);
    }
    EXPECT_EQ(absl::StrJoin(kept, "\n"), absl::StrJoin(want, "\n"));
    EXPECT_LT(run.seconds, kMaxSeconds);
    EXPECT_LT(run.max_rss_kib, kMaxRssKib);
    std::printf("%-40s %7.3f s %7ld KiB\n", name.c_str(), run.seconds, run.max_rss_kib);
  }
}

}  // namespace
