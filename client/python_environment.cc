// libdevplace: the job's Python packages, read from a named environment's metadata
// (ReadPythonEnvironment) or asked of its interpreter (AskPythonInterpreter), for
// ResolveDeviceRequest.job_environment. Never imports anything of the job's.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "devplace/client.h"

extern char** environ;

namespace devplace {
namespace {

namespace fs = std::filesystem;

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

// Name and Version of a core-metadata file (RFC 822 headers up to the first blank line).
bool ReadMetadata(const fs::path& file, std::string* name, std::string* version) {
  std::ifstream in(file);
  std::string line;
  while (in && std::getline(in, line)) {
    absl::string_view l = absl::StripTrailingAsciiWhitespace(line);
    if (l.empty()) break;
    if (absl::ConsumePrefix(&l, "Name:")) *name = std::string(absl::StripAsciiWhitespace(l));
    if (absl::ConsumePrefix(&l, "Version:")) *version = std::string(absl::StripAsciiWhitespace(l));
  }
  return !name->empty();
}

bool HasMetadataEntries(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (absl::EndsWith(n, ".dist-info") || absl::EndsWith(n, ".egg-info")) return true;
  }
  return false;
}

std::vector<fs::path> Sorted(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
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

absl::StatusOr<v1::JobEnvironment> ReadPythonEnvironment(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory; want a venv or conda prefix (holding "
                                                   "lib/python3.X/site-packages) or a site-packages directory"));
  }
  std::vector<fs::path> sites;
  if (HasMetadataEntries(dir)) {
    sites.push_back(dir);
  } else {
    for (const fs::path& lib : Sorted(fs::path(dir) / "lib")) {
      if (absl::StartsWith(lib.filename().string(), "python3.") && fs::is_directory(lib / "site-packages", ec)) {
        sites.push_back(lib / "site-packages");
      }
    }
    if (fs::is_directory(fs::path(dir) / "lib/python3/dist-packages", ec)) sites.push_back(fs::path(dir) / "lib/python3/dist-packages");
  }
  if (sites.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": neither a site-packages directory (no *.dist-info or *.egg-info in it) nor a venv or conda prefix "
             "(no lib/python3.X/site-packages or lib/python3/dist-packages under it)"));
  }
  v1::JobEnvironment env;
  std::string where;
  std::set<std::string> seen;
  for (const fs::path& site : sites) {
    absl::StrAppend(&where, where.empty() ? "" : ", ", site.string());
    for (const fs::path& entry : Sorted(site)) {
      const std::string n = entry.filename().string();
      fs::path metadata;
      if (absl::EndsWith(n, ".dist-info")) metadata = entry / "METADATA";
      else if (absl::EndsWith(n, ".egg-info")) metadata = entry / "PKG-INFO";  // a directory, as importlib.metadata reads it
      else continue;
      std::string name, version;
      if (!ReadMetadata(metadata, &name, &version)) continue;
      const std::string key = Normalize(name);
      if (!Wanted(key) || !seen.insert(key).second) continue;
      v1::PythonPackage* p = env.add_packages();
      p->set_name(name);
      p->set_version(version);
    }
  }
  env.set_source(absl::StrCat("package metadata under ", where));
  return env;
}

absl::StatusOr<v1::JobEnvironment> AskPythonInterpreter(const std::string& python) {
  // The same reading as the Python client's devplace.job_environment(), printed as name<TAB>version.
  static constexpr char kScript[] =
      "import re, sys\n"
      "from importlib import metadata\n"
      "wanted, seen = set(sys.argv[1:]), set()\n"
      "for d in metadata.distributions():\n"
      "    n = d.metadata['Name'] or ''\n"
      "    k = re.sub(r'[-_.]+', '-', n).lower()\n"
      "    if k in wanted and k not in seen:\n"
      "        seen.add(k)\n"
      "        print(n + '\\t' + (d.version or ''))\n";
  std::vector<std::string> args = {python, "-I", "-c", kScript};
  for (const std::string& name : JobPythonPackages()) args.push_back(name);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  pid_t pid;
  const int rc = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);) {
      if (n > 0 && s.size() < (1 << 20)) s.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return s;
  };
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::InvalidArgumentError(absl::StrCat(python, ": cannot run it (", std::strerror(rc),
                                                   "); want the path of the job's Python interpreter"));
  }
  const std::string stdout_text = drain(out[0]);  // small output: stderr fits its pipe meanwhile
  const std::string stderr_text = drain(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::vector<absl::string_view> lines = absl::StrSplit(stderr_text, '\n', absl::SkipWhitespace());
    return absl::InvalidArgumentError(absl::StrCat(python, " -I failed to list its packages (",
                                                   lines.empty() ? "no message" : lines.back(),
                                                   "); want a Python >= 3.8 interpreter"));
  }
  v1::JobEnvironment env;
  env.set_source(absl::StrCat("importlib.metadata of ", python));
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nv = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    v1::PythonPackage* p = env.add_packages();
    p->set_name(nv.first);
    p->set_version(nv.second);
  }
  return env;
}

}  // namespace devplace
