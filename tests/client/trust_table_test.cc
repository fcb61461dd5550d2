// libdevplace's trust rules (CheckUnixSocket, CheckLocalListener) against the table the Python
// client is tested with too (tests/client/trust_table.txt): each row builds the real thing (a
// socket in a directory of the given owner and mode; a listener bound by this process or by
// nobody through Debian's setpriv) and compares the status code and the exact message.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "devplace/client.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"

namespace devplace {
namespace {

using testing::RunCommand;
using testing::TempDir;

constexpr uid_t kOther = 65534;  // nobody

struct Row {
  int line = 0;
  std::string check;
  std::map<std::string, std::string> setup;  // the bare first word is under "thing"
  std::string code;
  std::string message;
};

std::vector<Row> ReadTable() {
  std::ifstream in(DEVPLACE_TRUST_TABLE);
  std::vector<Row> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(line, absl::MaxSplits('|', 3));
    for (std::string& col : cols) col = std::string(absl::StripAsciiWhitespace(col));
    if (cols.size() < 3) continue;
    Row row;
    row.line = n;
    row.check = cols[0];
    for (absl::string_view word : absl::StrSplit(cols[1], ' ', absl::SkipEmpty())) {
      const std::pair<std::string, std::string> kv = absl::StrSplit(word, absl::MaxSplits('=', 1));
      if (kv.second.empty() && word.find('=') == absl::string_view::npos) {
        row.setup["thing"] = kv.first;
      } else {
        row.setup[kv.first] = kv.second;
      }
    }
    row.code = cols[2];
    row.message = cols.size() > 3 ? cols[3] : "";
    rows.push_back(row);
  }
  return rows;
}

uid_t Uid(const std::string& who) { return who == "other" ? kOther : geteuid(); }

std::string CodeName(const absl::Status& s) {
  return s.ok() ? "OK" : absl::StatusCodeToString(s.code());
}

// A listener on `address`:0 as `owner`, through the same helper as the Python test: a Debian
// python3 that binds, prints its port and sleeps; killed on destruction.
class Listener {
 public:
  Listener(const TempDir& dir, const std::string& address, const std::string& owner) {
    const std::string port_file = dir.File("port");
    const std::string as = owner == "other" ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
    const testing::CommandResult r = RunCommand(absl::StrCat(
        as, "/usr/bin/python3 ", testing::ShellQuote(DEVPLACE_LISTENER_SCRIPT), " ", address, " > ", port_file, " 2>&1 & echo $!"));
    absl::SimpleAtoi(absl::StripAsciiWhitespace(r.out), &pid_);
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(port_file)), &port_);
    }
  }
  ~Listener() {
    if (pid_ > 0) kill(pid_, SIGKILL);
  }
  int port() const { return port_; }

 private:
  int pid_ = 0;
  int port_ = 0;
};

// A port nothing listens on (bound, then closed).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

void BindUnixSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << path;
  close(fd);  // the socket file stays
}

TEST(TrustTable, BothChecksAnswerEveryRow) {
  const std::vector<Row> rows = ReadTable();
  ASSERT_GE(rows.size(), 15u);
  int run = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE(absl::StrCat("trust_table.txt:", row.line));
    const bool needs_root = (row.setup.count("owner") && row.setup.at("owner") == "other") ||
                            (row.setup.count("dir_owner") && row.setup.at("dir_owner") == "other");
    if (needs_root && geteuid() != 0) continue;
    TempDir tmp;
    absl::Status got;
    std::map<std::string, std::string> subst = {{"{me}", absl::StrCat(geteuid())}, {"{other}", absl::StrCat(kOther)}};
    if (row.check == "unix") {
      const std::string dir = tmp.File("sockets");
      const std::string path = dir + "/devplace.sock";
      ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
      const std::string& thing = row.setup.at("thing");
      if (thing == "socket") BindUnixSocket(path);
      if (thing == "file") tmp.Write("sockets/devplace.sock", "");
      if (thing != "missing") {
        ASSERT_EQ(lchown(path.c_str(), Uid(row.setup.at("owner")), -1), 0);
      }
      ASSERT_EQ(chown(dir.c_str(), Uid(row.setup.at("dir_owner")), -1), 0);
      ASSERT_EQ(chmod(dir.c_str(), std::stoi(row.setup.at("dir_mode"), nullptr, 8)), 0);
      got = CheckUnixSocket(path);
      subst["{path}"] = path;
      subst["{dir}"] = dir;
    } else {
      ASSERT_EQ(row.check, "tcp");
      const std::string& listen = row.setup.at("listen");
      std::unique_ptr<Listener> listener;
      int port = 0;
      if (listen == "none") {
        port = FreePort();
      } else {
        listener = std::make_unique<Listener>(tmp, listen, row.setup.at("owner"));
        port = listener->port();
        ASSERT_GT(port, 0) << testing::ReadFile(tmp.File("port"));
      }
      const std::string& target = row.setup.at("target");
      const std::string address = absl::StrContains(target, ':') ? absl::StrCat("[", target, "]:", port)
                                                                  : absl::StrCat(target, ":", port);
      got = CheckLocalListener(address);
      subst["{address}"] = address;
    }
    EXPECT_EQ(CodeName(got), row.code) << got;
    EXPECT_EQ(std::string(got.message()), absl::StrReplaceAll(row.message, subst));
    ++run;
  }
  std::printf("%d of %zu rows run (rows with \"other\" need root)\n", run, rows.size());
}

TEST(TrustTable, OnlyNumericLoopbackAddressesAreChecked) {
  for (const std::string address : {"10.0.0.1:7465", "localhost:7465", "127.0.0.1", "127.0.0.1:0", "[::2]:7465"}) {
    const absl::Status s = CheckLocalListener(address);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << address << ": " << s;
    EXPECT_EQ(std::string(s.message()),
              absl::StrCat("address '", address, "': want a loopback host:port, e.g. 127.0.0.1:7465 or [::1]:7465"));
  }
}

}  // namespace
}  // namespace devplace
