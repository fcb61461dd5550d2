// What the drivers read of the daemon process they run: its /proc/<pid>/status fields (VmRSS,
// VmHWM, in kB) and its CPU time.
#ifndef DEVPLACE_BENCH_PROC_STATUS_H_
#define DEVPLACE_BENCH_PROC_STATUS_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace devplace {

// The number of a "<field>: N kB" line of /proc/<pid>/status; -1 when there is none.
inline int64_t StatusKb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// utime + stime of `pid` (fields 14 and 15 of /proc/<pid>/stat), in seconds.
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), {});
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoll(f);
    if (i == 15) stime = std::stoll(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace devplace

#endif  // DEVPLACE_BENCH_PROC_STATUS_H_
