// reader_dump: libdevplace's readers of the job's files, one call, its result printed as lines of
// tests/client/reader_table.txt (source, device or package lines, problem lines; or error), for
// reader_table_test.cc, which runs it once per case to bound its time and memory. Usage:
//   reader_dump [--time_ms=N] [--total=N] dra DIR | env DIR | path ENTRY...
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/readers.h"
#include "devplace/client.h"

namespace {

void Print(const std::string& line) { std::printf("%s\n", line.c_str()); }

int Error(const absl::Status& s) {
  Print(absl::StrCat("error ", absl::StatusCodeToString(s.code()), " ", s.message()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int64_t time_ms = -1, total = -1;
  while (!args.empty() && absl::StartsWith(args[0], "--")) {
    const std::string a = args[0];
    args.erase(args.begin());
    if (absl::StartsWith(a, "--time_ms=")) absl::SimpleAtoi(a.substr(10), &time_ms);
    if (absl::StartsWith(a, "--total=")) absl::SimpleAtoi(a.substr(8), &total);
  }
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: reader_dump [--time_ms=N] [--total=N] dra DIR | env DIR | path ENTRY...\n");
    return 2;
  }
  const std::string reader = args[0];
  devplace::internal::ReadLimits limits =
      reader == "dra" ? devplace::internal::DraLimits() : devplace::internal::PythonLimits();
  if (time_ms >= 0) limits.time = absl::Milliseconds(time_ms);
  if (total >= 0) limits.total_bytes = static_cast<uint64_t>(total);
  if (reader == "dra") {
    absl::StatusOr<devplace::v1::DeviceAllocation> a = devplace::internal::ReadDeviceAllocation(args[1], limits);
    if (!a.ok()) return Error(a.status());
    Print(absl::StrCat("source ", a->source()));
    for (const devplace::v1::AllocatedDevice& d : a->devices()) {
      std::map<std::string, std::string> attributes(d.attributes().begin(), d.attributes().end());
      std::vector<std::string> kv;
      for (const auto& [k, v] : attributes) kv.push_back(absl::StrCat(k, "=", v));
      Print(absl::StrCat("device ", d.claim(), " | ", d.from_template() ? "template" : "claim", " | ", d.request(), " | ",
                         d.driver(), " | ", d.pool(), " | ", d.name(), " | ", absl::StrJoin(kv, "; ")));
    }
    for (const std::string& p : a->problems()) Print(absl::StrCat("problem ", p));
    return 0;
  }
  absl::StatusOr<devplace::v1::JobEnvironment> env;
  if (reader == "env") {
    env = devplace::internal::ReadPythonEnvironment(args[1], limits);
  } else if (reader == "path") {
    const std::vector<std::string> path(args.begin() + 1, args.end());
    env = devplace::internal::ReadPythonPath(path, absl::StrCat("importlib.metadata of ", absl::StrJoin(path, ":")),
                                             limits);
  } else {
    std::fprintf(stderr, "reader_dump: unknown reader %s\n", reader.c_str());
    return 2;
  }
  if (!env.ok()) return Error(env.status());
  Print(absl::StrCat("source ", env->source()));
  for (const devplace::v1::PythonPackage& p : env->packages()) Print(absl::StrCat("package ", p.name(), " | ", p.version()));
  for (const std::string& p : env->problems()) Print(absl::StrCat("problem ", p));
  return 0;
}
