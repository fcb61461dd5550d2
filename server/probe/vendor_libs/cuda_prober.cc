#include "server/probe/vendor_libs/cuda_prober.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/probe/vendor_libs/cuda_api.h"
#include "server/probe/host/parsers.h"
#include "server/probe/host/prober_util.h"

namespace devplace::probe {
namespace {

// The child writes one line per fact to the pipe:
//   call <function>          about to call it (so a killed child's last call can be named)
//   gpu <bus id>\t<name>     the next ordinal
//   skip <why> / fail <why>  libcuda unusable (skipped / error)
//   problem <what>           a call that failed; the enumeration goes on
void WriteLine(int fd, const std::string& line) {
  const std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string Text(const char* buffer, size_t size) { return std::string(buffer, strnlen(buffer, size)); }

// Runs in the child: loads the library and enumerates. Never returns.
[[noreturn]] void ChildEnumerate(const std::string& library, int fd) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    const std::string why = error != nullptr ? error : "dlopen failed";
    const bool missing = absl::StrContains(why, "No such file or directory");
    WriteLine(fd, absl::StrCat(missing ? "skip " : "fail ", library, missing ? " not found (" : " cannot be loaded (",
                               why, ")"));
    _exit(0);
  }
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(handle, "cuInit"));
  auto count = reinterpret_cast<decltype(&cuDeviceGetCount)>(dlsym(handle, "cuDeviceGetCount"));
  auto get = reinterpret_cast<decltype(&cuDeviceGet)>(dlsym(handle, "cuDeviceGet"));
  auto bus = reinterpret_cast<decltype(&cuDeviceGetPCIBusId)>(dlsym(handle, "cuDeviceGetPCIBusId"));
  auto name = reinterpret_cast<decltype(&cuDeviceGetName)>(dlsym(handle, "cuDeviceGetName"));
  if (init == nullptr || count == nullptr || get == nullptr || bus == nullptr) {
    WriteLine(fd, absl::StrCat("fail ", library, " lacks cuInit, cuDeviceGetCount, cuDeviceGet or cuDeviceGetPCIBusId "
                               "(not a CUDA driver library)"));
    _exit(0);
  }
  WriteLine(fd, "call cuInit");
  const CUresult r = init(0);
  if (r != CUDA_SUCCESS) {
    // No device / no driver: nothing for CUDA to enumerate here; other codes are failures.
    const bool skip = r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_INSUFFICIENT_DRIVER || r == CUDA_ERROR_STUB_LIBRARY;
    WriteLine(fd, absl::StrCat(skip ? "skip " : "fail ", "cuInit: ", CudaResultName(r)));
    _exit(0);
  }
  int n = 0;
  WriteLine(fd, "call cuDeviceGetCount");
  if (const CUresult c = count(&n); c != CUDA_SUCCESS) {
    WriteLine(fd, absl::StrCat("fail cuDeviceGetCount: ", CudaResultName(c)));
    _exit(0);
  }
  for (int i = 0; i < n; ++i) {
    CUdevice device = 0;
    WriteLine(fd, absl::StrCat("call cuDeviceGet (ordinal ", i, ")"));
    if (const CUresult c = get(&device, i); c != CUDA_SUCCESS) {
      WriteLine(fd, absl::StrCat("problem ordinal ", i, ": cuDeviceGet: ", CudaResultName(c)));
      WriteLine(fd, "gpu -\t");  // keeps the ordinals of the later GPUs right
      continue;
    }
    char id[64] = {};
    WriteLine(fd, absl::StrCat("call cuDeviceGetPCIBusId (ordinal ", i, ")"));
    if (const CUresult c = bus(id, sizeof id, device); c != CUDA_SUCCESS) {
      WriteLine(fd, absl::StrCat("problem ordinal ", i, ": cuDeviceGetPCIBusId: ", CudaResultName(c)));
      id[0] = '\0';
    }
    char text[256] = {};
    if (name != nullptr) {
      WriteLine(fd, absl::StrCat("call cuDeviceGetName (ordinal ", i, ")"));
      if (name(text, sizeof text, device) != CUDA_SUCCESS) text[0] = '\0';
    }
    std::string label = Text(text, sizeof text);
    for (char& ch : label) {
      if (ch == '\n' || ch == '\t') ch = ' ';
    }
    const std::string bus_id = Text(id, sizeof id);
    WriteLine(fd, absl::StrCat("gpu ", bus_id.empty() ? "-" : bus_id, "\t", label));
  }
  _exit(0);
}

// Parses the child's lines into `out`; returns the last "call" named.
std::string ParseChild(const std::string& text, CudaEnumeration& out) {
  std::string last_call;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    const absl::string_view verb = line.substr(0, space);
    const absl::string_view rest = space == absl::string_view::npos ? "" : line.substr(space + 1);
    if (verb == "call") {
      last_call = std::string(rest);
    } else if (verb == "skip" || verb == "fail") {
      out.skipped = verb == "skip";
      out.unusable = std::string(rest);
    } else if (verb == "problem") {
      out.problems.emplace_back(rest);
    } else if (verb == "gpu") {
      const std::vector<absl::string_view> parts = absl::StrSplit(rest, absl::MaxSplits('\t', 1));
      CudaEnumeration::Gpu& gpu = out.gpus.emplace_back();
      if (parts.size() > 1) gpu.name = std::string(parts[1]);
      if (parts[0] == "-") continue;
      absl::StatusOr<std::string> bus_id = NormalizePciBusId(parts[0]);
      if (bus_id.ok()) {
        gpu.bus_id = *bus_id;
      } else {
        out.problems.push_back(absl::StrCat("ordinal ", out.gpus.size() - 1, ": unreadable bus id \"", parts[0], "\""));
      }
    }
  }
  return last_call;
}

std::string OrderLabel(const std::string& order) {
  return order.empty() ? "CUDA_DEVICE_ORDER unset" : absl::StrCat("CUDA_DEVICE_ORDER=", order);
}

// "0=0000:02:00.0, 1=0000:01:00.0".
std::string OrderText(const CudaEnumeration& e) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < e.gpus.size(); ++i) parts.push_back(absl::StrCat(i, "=", e.gpus[i].bus_id.empty() ? "?" : e.gpus[i].bus_id));
  return parts.empty() ? "no devices" : absl::StrJoin(parts, ", ");
}

}  // namespace

std::string CudaResultName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
      {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED"},
      {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY"},
      {CUDA_ERROR_INSUFFICIENT_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER"},
      {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
      {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
      {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
  };
  for (const auto& [value, name] : kNames) {
    if (value == code) return absl::StrCat(name, " (", code, ")");
  }
  return absl::StrCat("CUDA error ", code);
}

CudaEnumeration EnumerateCudaInChild(const std::string& library, const std::string& order,
                                     std::chrono::steady_clock::time_point deadline, VendorCall& call) {
  CudaEnumeration out;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    out.unusable = absl::StrCat("pipe: ", std::strerror(errno));
    return out;
  }
  call.Enter(order.empty() ? "fork (CUDA_DEVICE_ORDER unset)" : "fork (CUDA_DEVICE_ORDER=PCI_BUS_ID)");
  const pid_t pid = fork();
  if (pid < 0) {
    out.unusable = absl::StrCat("fork: ", std::strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return out;
  }
  if (pid == 0) {
    // The child: one thread, its own environment. stdout may be the inventory pipe: keep the
    // library away from it.
    close(fds[0]);
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    if (order.empty()) {
      unsetenv("CUDA_DEVICE_ORDER");
    } else {
      setenv("CUDA_DEVICE_ORDER", order.c_str(), 1);
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    ChildEnumerate(library, fds[1]);
  }
  close(fds[1]);
  call.Enter(order.empty() ? "libcuda child (CUDA_DEVICE_ORDER unset)" : "libcuda child (CUDA_DEVICE_ORDER=PCI_BUS_ID)");
  std::string text;
  bool killed = false;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      killed = true;
      break;
    }
    pollfd p = {fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child exited (or closed the pipe)
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (1 << 20)) {  // a runaway library: enough
      killed = true;
      break;
    }
  }
  close(fds[0]);
  if (killed) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string last_call = ParseChild(text, out);
  if (killed) {
    out.problems.push_back(absl::StrCat(OrderLabel(order), ": child killed at the prober's deadline in ",
                                        last_call.empty() ? "dlopen" : last_call));
  } else if (WIFSIGNALED(status)) {
    out.problems.push_back(absl::StrCat(OrderLabel(order), ": child died of signal ", WTERMSIG(status), " in ",
                                        last_call.empty() ? "dlopen" : last_call));
  }
  return out;
}

CudaSnapshot ReadCuda(const std::string& library, std::chrono::steady_clock::time_point deadline, VendorCall& call) {
  CudaSnapshot out;
  out.fastest_first = EnumerateCudaInChild(library, "", deadline, call);
  if (out.fastest_first.unusable) return out;
  if (std::chrono::steady_clock::now() >= deadline) {  // the first child used the time up
    out.pci_bus_id.problems.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID: not enumerated, no time left before the deadline");
    return out;
  }
  out.pci_bus_id = EnumerateCudaInChild(library, "PCI_BUS_ID", deadline, call);
  return out;
}

absl::StatusOr<ProbeOutcome> MergeCuda(const CudaSnapshot& snapshot, HostFacts& facts) {
  if (snapshot.fastest_first.unusable) {
    if (snapshot.fastest_first.skipped) return Skipped(*snapshot.fastest_first.unusable);
    return absl::InternalError(*snapshot.fastest_first.unusable);
  }
  Problems problems;
  for (const std::string& p : snapshot.fastest_first.problems) problems.Add(p);
  for (const std::string& p : snapshot.pci_bus_id.problems) problems.Add(p);
  if (snapshot.pci_bus_id.unusable) problems.Add(absl::StrCat("CUDA_DEVICE_ORDER=PCI_BUS_ID: ", *snapshot.pci_bus_id.unusable));
  std::vector<std::string> notes;
  std::set<std::string> enumerated;
  auto record = [&](const CudaEnumeration& e, bool pci) {
    for (size_t i = 0; i < e.gpus.size(); ++i) {
      const std::string& bus_id = e.gpus[i].bus_id;
      if (bus_id.empty()) continue;
      PciFunction* fn = facts.Find(bus_id);
      if (fn == nullptr || fn->row != v1::ROW_CUDA_NVIDIA) {
        if (!pci) notes.push_back(absl::StrCat("libcuda ordinal ", i, " (", bus_id, ") is not an NVIDIA GPU of the PCI scan"));
        continue;
      }
      enumerated.insert(bus_id);
      if (pci) {
        fn->device.set_runtime_ordinal_pci(static_cast<int32_t>(i));
      } else {
        fn->device.set_runtime_ordinal(static_cast<int32_t>(i));
      }
    }
  };
  record(snapshot.fastest_first, false);
  record(snapshot.pci_bus_id, true);
  std::vector<std::string> missing;
  for (PciFunction* fn : facts.OfRow(v1::ROW_CUDA_NVIDIA)) {
    if (enumerated.count(fn->device.pci_bus_id()) == 0) missing.push_back(fn->device.pci_bus_id());
  }
  if (!missing.empty()) {
    notes.push_back(absl::StrCat("not enumerated by CUDA: ", absl::StrJoin(missing, ", "),
                                 " (MIG on another GPU, no access, or not usable)"));
  }
  std::string message = absl::StrCat(snapshot.fastest_first.gpus.size(), " CUDA devices; FASTEST_FIRST (default): ",
                                     OrderText(snapshot.fastest_first), "; PCI_BUS_ID: ", OrderText(snapshot.pci_bus_id));
  bool same = snapshot.fastest_first.gpus.size() == snapshot.pci_bus_id.gpus.size();
  for (size_t i = 0; same && i < snapshot.fastest_first.gpus.size(); ++i) {
    same = snapshot.fastest_first.gpus[i].bus_id == snapshot.pci_bus_id.gpus[i].bus_id;
  }
  absl::StrAppend(&message, same ? "; the orders agree" : "; the orders differ: cuda:N depends on CUDA_DEVICE_ORDER");
  if (!notes.empty()) absl::StrAppend(&message, "; ", absl::StrJoin(notes, "; "));
  return problems.Finish(std::move(message));
}

VendorProber CudaProber(std::string library, std::chrono::milliseconds timeout) {
  return {"cuda", [library = std::move(library), timeout](const HostFacts& facts, VendorCall& call) -> VendorMerge {
            const bool nvidia = std::any_of(facts.pci.begin(), facts.pci.end(), [](const auto& entry) {
              return entry.second.row == v1::ROW_CUDA_NVIDIA;
            });
            if (!nvidia) {
              return [](HostFacts&) -> absl::StatusOr<ProbeOutcome> { return Skipped("no NVIDIA GPU on the PCI bus"); };
            }
            // Leave the prober time to kill, reap and report a hung child before its own deadline.
            const auto margin = std::min<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(500));
            const auto deadline = std::chrono::steady_clock::now() + (timeout - margin);
            auto snapshot = std::make_shared<const CudaSnapshot>(ReadCuda(library, deadline, call));
            return [snapshot](HostFacts& merged) { return MergeCuda(*snapshot, merged); };
          }};
}

VendorProber prober_factory::cuda(std::string library, const ProbeOptions& options) { return CudaProber(std::move(library), options.vendor_timeout); }

}  // namespace devplace::probe
