// libdevplace: the job's Python packages, read from a named environment's metadata
// (ReadPythonEnvironment), from the directories of a sys.path (internal::ReadPythonPath), or from
// the sys.path an interpreter reports (AskPythonInterpreter), for
// ResolveDeviceRequest.job_environment. Never imports anything of the job's. The files are found
// as importlib.metadata finds them (its Lookup: an entry's distribution is its lower-cased name up
// to the last '.', then up to the first '-', PEP 503-normalised) and read under
// client/common/bounded_read.h's rule; the Python client's _python_environment.py reads the same
// way, and tests/client/reader_table.txt holds both to it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/common/bounded_read.h"
#include "client/readers.h"
#include "devplace/client.h"

extern char** environ;

namespace devplace {
namespace {

using reading::ReadBudget;

// The bounds of JobEnvironment (devplace.proto); the daemon refuses a request beyond them.
constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxVersionBytes = 128;
constexpr size_t kMaxSourceBytes = 512;
// Of a sys.path: the entries read.
constexpr size_t kMaxPathEntries = 256;
// Of an interpreter's answer: the stdout kept (the rest is drained and dropped), a line, the
// stderr tail kept for an error message, and how long its pipes may stay open after it exited (a
// child it left behind holding them).
constexpr size_t kMaxAnswerBytes = reading::kMiB;
constexpr size_t kMaxAnswerLine = 8 * reading::kKiB;
constexpr size_t kMaxStderrBytes = 64 * reading::kKiB;
constexpr absl::Duration kLingerGrace = absl::Milliseconds(200);

std::string Normalize(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (out.empty() || out.back() != '-') out.push_back('-');
    } else {
      out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

bool Wanted(const std::string& normalized) {
  const std::vector<std::string>& names = JobPythonPackages();
  return std::find(names.begin(), names.end(), normalized) != names.end();
}

// The distribution a *.dist-info / *.egg-info entry holds, as importlib.metadata's Lookup names it
// ("Torch_NPU-2.1.0.post8.dist-info" -> "torch-npu"); "" for any other entry.
std::string EntryDistribution(absl::string_view name) {
  std::string low = absl::AsciiStrToLower(name);
  if (!absl::EndsWith(low, ".dist-info") && !absl::EndsWith(low, ".egg-info")) return "";
  low = low.substr(0, low.rfind('.'));
  return Normalize(low.substr(0, low.find('-')));
}

bool WantedEntry(absl::string_view name) {
  const std::string dist = EntryDistribution(name);
  return !dist.empty() && Wanted(dist);
}

bool AnyInfoEntry(absl::string_view name) { return !EntryDistribution(name).empty(); }

// Whether `version` is written as the daemon reads a Transformers or Accelerate release
// (server/placement/versions.cc, ParseLibraryVersion): X.Y or X.Y.Z of decimal numbers up to 9999,
// then nothing, "+<local>", or [.-]dev|rc|a|b|post<digits> (optionally "+<local>"). Whether the
// release is one devplace supports is the daemon's call.
bool ReleaseForm(absl::string_view version) {
  size_t end = 0;
  while (end < version.size() && (absl::ascii_isdigit(static_cast<unsigned char>(version[end])) ||
                                  (version[end] == '.' && end + 1 < version.size() &&
                                   absl::ascii_isdigit(static_cast<unsigned char>(version[end + 1]))))) {
    ++end;
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(version.substr(0, end), '.');
  if (end == 0 || parts.size() < 2 || parts.size() > 3) return false;
  for (absl::string_view p : parts) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v > 9999) return false;
  }
  absl::string_view s = version.substr(end);
  if (s.empty()) return true;
  if (s[0] == '+') return s.size() > 1;
  if (s[0] == '.' || s[0] == '-') s.remove_prefix(1);
  for (absl::string_view tag : {"dev", "rc", "a", "b", "post"}) {
    if (!absl::ConsumePrefix(&s, tag)) continue;
    s = s.substr(0, s.find('+'));
    return std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
  }
  return false;
}

// A header name as the email parser takes one (printable ASCII but ':').
bool HeaderName(absl::string_view key) {
  return std::all_of(key.begin(), key.end(), [](char c) { return c >= '!' && c <= '~' && c != ':'; });
}

class Reader {
 public:
  Reader(v1::JobEnvironment* out, const internal::ReadLimits& limits)
      : out_(*out), limits_(limits), set_(limits.time, limits.total_bytes, out->mutable_problems()) {}

  bool stopped() const { return set_.stopped(); }

  void Problem(const std::string& what) { set_.Problem(what); }

  // The wanted distributions' entries of the site directory `site`.
  void Site(const std::string& site) {
    bool more = false;
    absl::StatusOr<std::vector<std::string>> names =
        reading::ListNames(site, limits_.directory_entries, set_.budget(), WantedEntry, &more);
    const std::string shown = reading::EscapeBytes(site);
    if (!names.ok()) {
      if (!absl::IsNotFound(names.status())) set_.Failed(shown, names.status());
      return;
    }
    if (more) {
      Problem(absl::StrCat(shown, ": more than ", limits_.directory_entries, " metadata entries of ",
                           "the distributions devplace reads; only the first ", limits_.directory_entries, " by name read"));
    }
    for (const std::string& name : *names) {
      if (stopped()) return;
      Entry(absl::StrCat(site, "/", name));
    }
  }

 private:
  // One *.dist-info / *.egg-info entry: a directory holding METADATA (or PKG-INFO), or an egg-info
  // file that is itself the metadata (importlib.metadata reads the same).
  void Entry(const std::string& entry) {
    const std::string shown = reading::EscapeBytes(entry);
    const reading::PathStat st = reading::StatPath(entry);
    if (st.error != 0) return Problem(absl::StrCat(shown, ": ", reading::CannotRead(st.error)));
    if (!st.directory()) return Metadata(entry);
    for (const char* file : {"METADATA", "PKG-INFO"}) {
      const std::string path = absl::StrCat(entry, "/", file);
      if (reading::StatPath(path).error == ENOENT) continue;
      return Metadata(path);
    }
    Problem(absl::StrCat(shown, ": holds no METADATA or PKG-INFO; not read"));
  }

  // Name and Version of a core-metadata file: RFC 822 headers up to the first blank line or the
  // first line that is not a header, the first of each name (case-insensitive) winning.
  void Metadata(const std::string& path) {
    const std::string shown = reading::EscapeBytes(path);
    std::optional<std::string> name, version;
    absl::StatusOr<reading::LinesEnd> end =
        reading::ReadLines(path, limits_.file_bytes, set_.budget(), [&](absl::string_view line) {
          const absl::string_view l = absl::StripTrailingAsciiWhitespace(line);
          if (l.empty()) return false;                        // the end of the headers
          if (l[0] == ' ' || l[0] == '\t') return true;       // a folded line of the header before
          const size_t colon = l.find(':');
          if (colon == absl::string_view::npos || !HeaderName(l.substr(0, colon))) return false;  // the body
          const std::string key = absl::AsciiStrToLower(l.substr(0, colon));
          const std::string value(absl::StripAsciiWhitespace(l.substr(colon + 1)));
          if (key == "name" && !name) name = value;
          if (key == "version" && !version) version = value;
          return !(name && version);
        });
    if (!end.ok()) return set_.Failed(shown, end.status());
    if (!name || name->empty()) {
      return Problem(absl::StrCat(shown, ": no Name header", *end == reading::LinesEnd::kLimit
                                                                  ? absl::StrCat(" in its first ", reading::SizeText(limits_.file_bytes))
                                                                  : std::string(),
                                  "; not read"));
    }
    const std::string key = Normalize(*name);
    if (!Wanted(key) || !seen_.insert(key).second) return;  // another distribution, or one already found first
    if (name->size() > kMaxNameBytes) {
      return Problem(absl::StrCat(shown, ": a Name over ", kMaxNameBytes, " bytes; not sent"));
    }
    std::string v = version.value_or("");
    if (!version) {
      Problem(absl::StrCat(shown, ": no Version header",
                           *end == reading::LinesEnd::kLimit
                               ? absl::StrCat(" in its first ", reading::SizeText(limits_.file_bytes))
                               : std::string(),
                           "; ", key, " sent without a version"));
    }
    std::string why;
    if (!version) {
      // said above
    } else if (!reading::IsUtf8(v)) {
      why = "is not UTF-8 text";
    } else if (v.size() > kMaxVersionBytes) {
      why = absl::StrCat("is over ", kMaxVersionBytes, " bytes");
    } else if ((key == "transformers" || key == "accelerate") && !ReleaseForm(v)) {
      why = absl::StrCat("'", v, "' is not a release devplace reads (X.Y or X.Y.Z, optionally with a suffix such as "
                         ".dev0, rc1 or +local)");
    }
    if (!why.empty()) {
      Problem(absl::StrCat(shown, ": its Version ", why, "; ", key, " sent without a version"));
      v.clear();
    }
    v1::PythonPackage* p = out_.add_packages();
    p->set_name(*name);
    p->set_version(v);
  }

  v1::JobEnvironment& out_;
  const internal::ReadLimits& limits_;
  reading::ReadSet set_;
  std::set<std::string> seen_;
};

// The same directory met twice (a lib64 link to lib, a base prefix that is the venv's own).
class Directories {
 public:
  // Whether `path` is a directory not added before; adds it.
  bool Add(const std::string& path) {
    const reading::PathStat st = reading::StatPath(path);
    return st.directory() && seen_.insert({st.dev, st.ino}).second;
  }

 private:
  std::set<std::pair<dev_t, ino_t>> seen_;
};

// A number of 1 to 9 decimal digits.
bool SmallNumber(absl::string_view text, int* out) {
  return !text.empty() && text.size() <= 9 &&
         std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) &&
         absl::SimpleAtoi(text, out);
}

// "3.11" of "3.11.2" (pyvenv.cfg's version / version_info); "" when it is not one.
std::string PythonMinor(absl::string_view version) {
  const std::vector<absl::string_view> parts = absl::StrSplit(version, '.');
  int major = 0, minor = 0;
  if (parts.size() < 2 || !SmallNumber(parts[0], &major) || !SmallNumber(parts[1], &minor) || major != 3) return "";
  return absl::StrCat(major, ".", minor);
}

// The site directories Python adds for prefix `prefix` (CPython's site.getsitepackages, with
// Debian's dist-packages): for a known `minor`, lib/python3.X/site-packages, lib64/...,
// local/lib/python3.X/dist-packages, lib/python3/dist-packages, lib/python3.X/dist-packages; for an
// unknown one, every lib/python3.*/site-packages, then lib/python3/dist-packages.
void PrefixSites(const std::string& prefix, const std::string& minor, ReadBudget& budget, Directories& seen,
                 std::vector<std::string>* sites) {
  std::vector<std::string> candidates;
  if (!minor.empty()) {
    const std::string x = absl::StrCat("python", minor);
    candidates = {absl::StrCat(prefix, "/lib/", x, "/site-packages"), absl::StrCat(prefix, "/lib64/", x, "/site-packages"),
                  absl::StrCat(prefix, "/local/lib/", x, "/dist-packages"), absl::StrCat(prefix, "/lib/python3/dist-packages"),
                  absl::StrCat(prefix, "/lib/", x, "/dist-packages")};
  } else {
    bool more = false;
    absl::StatusOr<std::vector<std::string>> libs = reading::ListNames(
        absl::StrCat(prefix, "/lib"), 64, budget, [](absl::string_view n) { return absl::StartsWith(n, "python3."); },
        &more);
    for (const std::string& lib : libs.value_or(std::vector<std::string>())) {
      candidates.push_back(absl::StrCat(prefix, "/lib/", lib, "/site-packages"));
    }
    candidates.push_back(absl::StrCat(prefix, "/lib/python3/dist-packages"));
  }
  for (std::string& c : candidates) {
    if (seen.Add(c)) sites->push_back(std::move(c));
  }
}

// The environment's Python minor version from a conda prefix's conda-meta/python-3.X.Y-*.json.
std::string CondaMinor(const std::string& prefix, ReadBudget& budget) {
  bool more = false;
  absl::StatusOr<std::vector<std::string>> names = reading::ListNames(
      absl::StrCat(prefix, "/conda-meta"), 1, budget,
      [](absl::string_view n) { return absl::StartsWith(n, "python-3.") && absl::EndsWith(n, ".json"); }, &more);
  if (!names.ok() || names->empty()) return "";
  const absl::string_view version = absl::string_view((*names)[0]).substr(strlen("python-"));
  return PythonMinor(version.substr(0, version.find('-')));
}

// The base prefix of a venv whose pyvenv.cfg says `home` (the base interpreter's directory), as
// CPython's getpath finds it: the nearest of home and its parents holding lib/python3.X/os.py;
// without one, the directory above home.
std::string BasePrefix(const std::string& home, const std::string& minor) {
  std::string dir = home;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  for (std::string d = dir;;) {
    if (!minor.empty() && reading::StatPath(absl::StrCat(d, "/lib/python", minor, "/os.py")).regular()) return d;
    const size_t slash = d.rfind('/');
    if (slash == std::string::npos || d == "/") break;
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
  const size_t slash = dir.rfind('/');
  return slash == 0 ? "/" : dir.substr(0, slash);
}

// "package metadata under A, B": the source of an environment read from its directories.
std::string SourceOf(const std::vector<std::string>& sites) {
  std::vector<std::string> shown;
  for (const std::string& s : sites) shown.push_back(reading::EscapeBytes(s));
  return absl::StrCat("package metadata under ", absl::StrJoin(shown, ", "));
}

}  // namespace

const std::vector<std::string>& JobPythonPackages() {
  static const std::vector<std::string>* const kPackages = new std::vector<std::string>{
      "torch",       "torch-npu",          "torch-mlu",         "torch-musa",   "torch-sdaa",
      "intel-extension-for-pytorch",       "habana-torch-plugin",
      "torch-xla",   "torch-neuronx",      "torch-tpu",         "transformers", "accelerate",
  };
  return *kPackages;
}

namespace internal {

ReadLimits PythonLimits() { return {absl::Seconds(5), 64 * reading::kKiB, 16 * reading::kMiB, 1024}; }

v1::JobEnvironment ReadPythonPath(const std::vector<std::string>& path, const std::string& source,
                                  const ReadLimits& limits) {
  v1::JobEnvironment env;
  env.set_source(reading::CutUtf8(reading::EscapeBytes(source), kMaxSourceBytes));
  Reader reader(&env, limits);
  Directories seen;
  size_t read = 0;
  for (const std::string& entry : path) {
    if (reader.stopped()) break;
    const std::string dir = entry.empty() ? "." : entry;  // "": the current directory, as for import
    if (!seen.Add(dir)) continue;                          // not a directory (a zip file), or read already
    if (read++ == kMaxPathEntries) {
      reader.Problem(absl::StrCat("more than ", kMaxPathEntries, " path directories; ", reading::EscapeBytes(dir),
                                  " and the rest not read"));
      break;
    }
    reader.Site(dir);
  }
  return env;
}

absl::StatusOr<v1::JobEnvironment> ReadPythonEnvironment(const std::string& given, const ReadLimits& limits) {
  std::string dir = given;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string shown = reading::EscapeBytes(dir);
  if (!reading::StatPath(dir).directory()) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": not a directory; want a venv or conda prefix (holding "
                                                   "lib/python3.X/site-packages) or a site-packages directory"));
  }
  ReadBudget budget(limits.time, limits.total_bytes);
  std::vector<std::string> problems;
  std::vector<std::string> sites;
  Directories seen;
  bool more = false;
  const absl::StatusOr<std::vector<std::string>> info = reading::ListNames(dir, 1, budget, AnyInfoEntry, &more);
  if (info.ok() && !info->empty()) {
    seen.Add(dir);
    sites.push_back(dir);  // a site-packages directory itself
  } else {
    // A venv (pyvenv.cfg, as site.py reads it: key = value lines, the last of each key winning), a
    // conda prefix (conda-meta/python-*.json names its Python), or any other prefix.
    const std::string cfg = absl::StrCat(dir, "/pyvenv.cfg");
    std::string home, minor, system;
    if (reading::StatPath(cfg).error != ENOENT) {
      absl::StatusOr<reading::LinesEnd> read =
          reading::ReadLines(cfg, limits.file_bytes, budget, [&](absl::string_view line) {
            const size_t eq = line.find('=');
            if (eq == absl::string_view::npos) return true;
            const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
            const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
            if (key == "include-system-site-packages") system = absl::AsciiStrToLower(value);
            if (key == "home") home = value;
            if (key == "version" || key == "version_info") minor = PythonMinor(value);
            return true;
          });
      if (!read.ok()) problems.push_back(absl::StrCat(reading::EscapeBytes(cfg), ": ", read.status().message()));
    }
    if (minor.empty()) minor = CondaMinor(dir, budget);
    PrefixSites(dir, minor, budget, seen, &sites);
    if (system == "true") {
      if (home.empty() || home[0] != '/') {
        problems.push_back(absl::StrCat(reading::EscapeBytes(cfg), ": include-system-site-packages = true but home '",
                                        reading::EscapeBytes(home),
                                        "' is not an absolute path; the base environment's packages not read"));
      } else {
        PrefixSites(BasePrefix(home, minor), minor, budget, seen, &sites);
      }
    }
  }
  if (sites.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        shown, ": neither a site-packages directory (no *.dist-info or *.egg-info in it) nor a venv or conda prefix "
               "(no lib/python3.X/site-packages or lib/python3/dist-packages under it)"));
  }
  v1::JobEnvironment env = ReadPythonPath(sites, SourceOf(sites), limits);
  reading::ReadSet after(absl::ZeroDuration(), 0, env.mutable_problems());  // the list's bounds
  for (const std::string& p : problems) after.Problem(p);
  return env;
}

}  // namespace internal

absl::StatusOr<v1::JobEnvironment> ReadPythonEnvironment(const std::string& dir) {
  return internal::ReadPythonEnvironment(dir, internal::PythonLimits());
}

namespace {

// A child's two output pipes, drained together under one deadline.
struct Drained {
  std::string out;
  std::string err;  // its last kMaxStderrBytes
  bool exited = false;
  int status = 0;
  bool timed_out = false;
};

void Append(std::string& to, absl::string_view data, size_t cap, bool keep_tail) {
  if (!keep_tail) {
    if (to.size() < cap) to.append(data.data(), std::min(data.size(), cap - to.size()));
    return;
  }
  to.append(data.data(), data.size());
  if (to.size() > cap) to.erase(0, to.size() - cap);
}

// Reads both pipes until both close and `pid` has exited, the deadline passes, or `pid` has exited
// and kLingerGrace passed with a pipe still open (a child it left holds it). Then kills the
// process group `pid` leads (the leader is only reaped after that, so its id cannot be reused by
// then) and reaps the leader.
Drained Drain(pid_t pid, int out_fd, int err_fd, absl::Duration timeout) {
  Drained d;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time linger_until = absl::InfiniteFuture();
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  char buffer[16384];
  while (fds[0].fd >= 0 || fds[1].fd >= 0 || !d.exited) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      d.timed_out = !d.exited;
      break;
    }
    if (now >= linger_until) break;
    if (!d.exited) {
      siginfo_t info = {};
      if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
        d.exited = true;
        linger_until = now + kLingerGrace;
        continue;
      }
    }
    const absl::Duration wait = std::min({deadline - now, linger_until - now, absl::Milliseconds(20)});
    const int ready = poll(fds, 2, static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait))));
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        Append(i == 0 ? d.out : d.err, absl::string_view(buffer, static_cast<size_t>(n)),
               i == 0 ? kMaxAnswerBytes : kMaxStderrBytes, i == 1);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (const pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  kill(-pid, SIGKILL);  // the group: the interpreter if it still runs, and whatever it left behind
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  d.status = status;
  return d;
}

}  // namespace

absl::StatusOr<v1::JobEnvironment> AskPythonInterpreter(const std::string& python, absl::Duration timeout) {
  // Only its sys.path, each entry as the hex of its bytes (any path survives): the packages are then
  // read here, from those directories, exactly as ReadPythonEnvironment reads a site directory.
  static constexpr char kScript[] =
      "import os, sys\n"
      "sys.stdout.write(''.join('devplace-path ' + os.fsencode(p).hex() + '\\n' for p in sys.path))\n";
  std::vector<std::string> args = {python, "-I", "-c", kScript};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int error = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(error)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own process group, ended as a whole
  pid_t pid;
  const int rc = posix_spawn(&pid, python.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::InvalidArgumentError(absl::StrCat(python, ": cannot run it (", std::strerror(rc),
                                                   "); want the path of the job's Python interpreter"));
  }
  const Drained d = Drain(pid, out[0], err[0], timeout);
  if (d.timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(python, " -I did not report its sys.path within ",
                                                    reading::DurationText(timeout),
                                                    "; it and its process group were killed"));
  }
  if (!WIFEXITED(d.status) || WEXITSTATUS(d.status) != 0) {
    std::vector<absl::string_view> lines = absl::StrSplit(d.err, '\n', absl::SkipWhitespace());
    return absl::InvalidArgumentError(absl::StrCat(
        python, " -I failed to list its packages (",
        lines.empty() ? "no message" : reading::CutUtf8(reading::EscapeBytes(lines.back()), 512),
        "); want a Python >= 3.8 interpreter"));
  }
  // Complete lines only (a last one cut at kMaxAnswerBytes is dropped); lines of anything else the
  // interpreter printed (a sitecustomize, say) are not ours.
  std::vector<std::string> path;
  absl::string_view text = d.out;
  if (d.out.size() >= kMaxAnswerBytes) text = text.substr(0, text.rfind('\n') + 1);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::string bytes;
    if (line.size() > kMaxAnswerLine || !absl::ConsumePrefix(&line, "devplace-path ") || line.size() % 2 != 0 ||
        !std::all_of(line.begin(), line.end(), [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); })) {
      continue;
    }
    path.push_back(absl::HexStringToBytes(line));
  }
  return internal::ReadPythonPath(path, absl::StrCat("importlib.metadata of ", python), internal::PythonLimits());
}

}  // namespace devplace
