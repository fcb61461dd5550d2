#include "server/probe/vendor_libs/vendor_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"

namespace devplace::probe {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the wire form: length-prefixed strings and varints (protobuf's coded streams) ----

class Writer {
 public:
  void Number(uint64_t value) {
    google::protobuf::io::StringOutputStream stream(&out_);
    google::protobuf::io::CodedOutputStream(&stream).WriteVarint64(value);
  }
  void String(const std::string& value) {
    Number(value.size());
    out_ += value;
  }
  void Message(const google::protobuf::MessageLite& message) {
    std::string bytes;
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
    coded.Trim();
    String(bytes);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes)
      : in_(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size())) {}
  bool Number(uint64_t& value) { return in_.ReadVarint64(&value); }
  bool String(std::string& value) {
    uint64_t size = 0;
    return Number(size) && size < (1u << 30) && in_.ReadString(&value, static_cast<int>(size));
  }
  bool Message(google::protobuf::MessageLite& message) {
    std::string bytes;
    return String(bytes) && message.ParseFromString(bytes);
  }
  bool AtEnd() { return in_.ExpectAtEnd(); }

 private:
  google::protobuf::io::CodedInputStream in_;
};

// ---- applying changes field by field ----

// The serialized form of `message` holding only `field` (deterministic, so equal contents
// compare equal).
std::string FieldBytes(const google::protobuf::Message& message, const google::protobuf::FieldDescriptor* field) {
  std::unique_ptr<google::protobuf::Message> only(message.New());
  const google::protobuf::Reflection* reflection = only->GetReflection();
  if (field->is_repeated() ? message.GetReflection()->FieldSize(message, field) > 0
                           : message.GetReflection()->HasField(message, field)) {
    only->CopyFrom(message);
    const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
    for (int i = 0; i < descriptor->field_count(); ++i) {
      if (descriptor->field(i) != field) reflection->ClearField(only.get(), descriptor->field(i));
    }
  }
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  only->SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

// Sets in `target` every field whose value in `after` differs from `before` (a proto3 scalar
// reset to its default counts as a change too).
void ApplyChangedFields(const google::protobuf::Message& before, const google::protobuf::Message& after,
                        google::protobuf::Message& target) {
  const google::protobuf::Descriptor* descriptor = after.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const std::string changed = FieldBytes(after, field);
    if (changed == FieldBytes(before, field)) continue;
    target.GetReflection()->ClearField(&target, field);
    std::unique_ptr<google::protobuf::Message> only(after.New());
    only->ParseFromString(changed);
    target.MergeFrom(*only);
  }
}

template <typename Map>
void ApplyChangedEntries(const Map& before, const Map& after, Map& target) {
  for (const auto& [key, value] : after) {
    const auto was = before.find(key);
    if (was == before.end() || !(was->second == value)) target[key] = value;
  }
}

// ---- the child ----

// What a child writes back: the outcome, then the facts it ended with.
std::string EncodeResult(const absl::StatusOr<ProbeOutcome>& outcome, const HostFacts& facts) {
  Writer w;
  w.Number(!outcome.ok() ? 2 : outcome->skipped ? 1 : 0);
  w.String(outcome.ok() ? outcome->message : std::string(outcome.status().message()));
  w.String(EncodeFacts(facts));
  return w.Take();
}

absl::StatusOr<std::pair<absl::StatusOr<ProbeOutcome>, HostFacts>> DecodeResult(const std::string& bytes) {
  Reader r(bytes);
  uint64_t kind = 0;
  std::string message, facts_bytes;
  if (!r.Number(kind) || kind > 2 || !r.String(message) || !r.String(facts_bytes) || !r.AtEnd()) {
    return absl::DataLossError("its result does not parse");
  }
  absl::StatusOr<HostFacts> facts = DecodeFacts(facts_bytes);
  if (!facts.ok()) return facts.status();
  absl::StatusOr<ProbeOutcome> outcome = kind == 0   ? absl::StatusOr<ProbeOutcome>(Found(message))
                                         : kind == 1 ? absl::StatusOr<ProbeOutcome>(Skipped(message))
                                                     : absl::StatusOr<ProbeOutcome>(absl::InternalError(message));
  return std::make_pair(std::move(outcome), *std::move(facts));
}

bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The child's whole life: never returns.
[[noreturn]] void RunChild(const VendorProber& prober, HostFacts& facts, VendorCall& call, int out_fd,
                           pid_t parent) {
  // Die with devplace-probe (devplaced kills it at its own --probe_timeout), and never write to
  // its stdout, which carries the inventory.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  absl::StatusOr<ProbeOutcome> outcome = absl::InternalError("the prober returned no result");
  try {
    const HostFacts copy = facts;
    const VendorMerge merge = prober.read(copy, call);
    if (merge) outcome = merge(facts);
  } catch (const std::exception& e) {
    outcome = absl::InternalError(absl::StrCat("the prober threw: ", e.what()));
  } catch (...) {
    outcome = absl::InternalError("the prober threw");
  }
  _exit(WriteAll(out_fd, EncodeResult(outcome, facts)) ? 0 : 4);
}

// "SIGSEGV (Segmentation fault)".
std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  const char* description = sigdescr_np(signal);
  return absl::StrCat(abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", signal),
                      description != nullptr ? absl::StrCat(" (", description, ")") : "");
}

uint32_t MillisecondsSince(Clock::time_point start) {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
}

struct Child {
  const VendorProber* prober = nullptr;
  VendorCall* call = nullptr;  // in the shared mapping
  pid_t pid = -1;
  int fd = -1;  // read end of the result pipe; -1 once at end of file
  std::string data;
  bool reaped = false;
  int wait_status = 0;
  std::string start_error;  // set when it could not be started
  Clock::time_point start;
  uint32_t duration_ms = 0;  // from start to reaped
};

// Reaps `child` if it has exited; true when it is reaped.
bool TryReap(Child& child) {
  if (child.reaped) return true;
  int status = 0;
  pid_t got;
  do {
    got = waitpid(child.pid, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == child.pid || (got < 0 && errno == ECHILD)) {
    child.reaped = true;
    child.duration_ms = MillisecondsSince(child.start);
    child.wait_status = got == child.pid ? status : 0;
  }
  return child.reaped;
}

// Shared anonymous memory holding one VendorCall per prober, so the parent can name the call a
// killed or crashed child was in.
class SharedCalls {
 public:
  explicit SharedCalls(size_t n) : size_(std::max<size_t>(1, n) * sizeof(VendorCall)) {
    void* memory = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      memory_ = nullptr;
      return;
    }
    memory_ = memory;
    for (size_t i = 0; i < n; ++i) new (static_cast<VendorCall*>(memory_) + i) VendorCall();
    n_ = n;
  }
  ~SharedCalls() {
    if (memory_ == nullptr) return;
    for (size_t i = 0; i < n_; ++i) (static_cast<VendorCall*>(memory_) + i)->~VendorCall();
    munmap(memory_, size_);
  }
  SharedCalls(const SharedCalls&) = delete;
  SharedCalls& operator=(const SharedCalls&) = delete;
  VendorCall* at(size_t i) { return memory_ == nullptr ? nullptr : static_cast<VendorCall*>(memory_) + i; }

 private:
  size_t size_;
  void* memory_ = nullptr;
  size_t n_ = 0;
};

void AppendReport(ProbeRun& run, const std::string& name, v1::ProbeStatus status, uint32_t duration_ms,
                  std::string message) {
  v1::ProbeReport& report = run.reports.emplace_back();
  report.set_name(name);
  report.set_status(status);
  report.set_duration_ms(duration_ms);
  report.set_message(std::move(message));
}

// Forks one child per prober, each running it (RunChild) on a copy of `facts` with its own result
// pipe and its VendorCall in `calls`; a child that could not be started has its start_error.
std::vector<Child> StartChildren(const std::vector<VendorProber>& probers, SharedCalls& calls, HostFacts& facts,
                                 Clock::time_point start) {
  std::vector<Child> children(probers.size());
  const pid_t self = getpid();
  std::fflush(nullptr);  // nothing buffered is written twice
  for (size_t i = 0; i < probers.size(); ++i) {
    Child& child = children[i];
    child.prober = &probers[i];
    child.call = calls.at(i);
    child.start = start;
    if (child.call == nullptr) {
      child.start_error = absl::StrCat("cannot map shared memory: ", strerror(errno));
      continue;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      child.start_error = absl::StrCat("cannot create a pipe: ", strerror(errno));
      continue;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      child.start_error = absl::StrCat("cannot fork: ", strerror(errno));
      close(fds[0]);
      close(fds[1]);
      continue;
    }
    if (pid == 0) {
      close(fds[0]);
      for (size_t j = 0; j < i; ++j) {
        if (children[j].fd >= 0) close(children[j].fd);
      }
      RunChild(probers[i], facts, *child.call, fds[1], self);
    }
    close(fds[1]);
    child.pid = pid;
    child.fd = fds[0];
  }
  return children;
}

// Reads the children's results until every child has exited or the deadline passed.
void CollectResults(std::vector<Child>& children, Clock::time_point deadline) {
  for (;;) {
    std::vector<pollfd> polls;
    std::vector<Child*> polled;
    bool waiting_for_exit = false;
    for (Child& child : children) {
      if (child.pid < 0 || child.reaped) continue;
      if (child.fd >= 0) {
        polls.push_back({child.fd, POLLIN, 0});
        polled.push_back(&child);
      } else if (!TryReap(child)) {
        waiting_for_exit = true;
      }
    }
    if (polls.empty() && !waiting_for_exit) break;
    const auto now = Clock::now();
    if (now >= deadline) break;
    int wait_ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count());
    if (waiting_for_exit) wait_ms = std::min(wait_ms, 2);
    const int ready = poll(polls.data(), polls.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (size_t k = 0; ready > 0 && k < polls.size(); ++k) {
      if (polls[k].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = read(polls[k].fd, buffer, sizeof(buffer));
      if (n > 0) {
        polled[k]->data.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(polled[k]->fd);
        polled[k]->fd = -1;
      }
    }
  }
}

// Appends `child`'s report to `run` and, when it ended with a result that parses, merges what its
// prober changed (against `before`) into run.facts. A child still running is killed first.
void ReportChild(Child& child, const HostFacts& before, std::chrono::milliseconds timeout, Clock::time_point start,
                 ProbeRun& run) {
  const std::string& name = child.prober->name;
  if (!child.start_error.empty()) {
    AppendReport(run, name, v1::PROBE_STATUS_ERROR, MillisecondsSince(start),
                 absl::StrCat("could not run in its own process: ", child.start_error));
    return;
  }
  if (!child.reaped && child.fd < 0) TryReap(child);
  if (!child.reaped) {
    // Still running at the deadline: kill it. A child stuck in the kernel (a driver call) dies
    // when it leaves; if it has not by a short while, it is left to init to reap.
    kill(child.pid, SIGKILL);
    if (child.fd >= 0) close(child.fd);
    for (int tries = 0; tries < 50 && !TryReap(child); ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    AppendReport(run, name, v1::PROBE_STATUS_TIMED_OUT, MillisecondsSince(start),
                 absl::StrCat("gave up after ", timeout.count(), " ms (--probe_timeout): ", child.call->Describe(),
                              " did not return; nothing of ", name, " merged"));
    return;
  }
  const int status = child.wait_status;
  if (WIFSIGNALED(status)) {
    AppendReport(run, name, v1::PROBE_STATUS_CRASHED, child.duration_ms,
                 absl::StrCat("its process was killed by ", SignalName(WTERMSIG(status)), " in ",
                              child.call->Describe(), "; nothing of ", name, " merged"));
    return;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    AppendReport(run, name, v1::PROBE_STATUS_ERROR, child.duration_ms,
                 absl::StrCat("its process exited with status ", code, " in ", child.call->Describe(),
                              " without a result; nothing of ", name, " merged"));
    return;
  }
  auto result = DecodeResult(child.data);
  if (!result.ok()) {
    AppendReport(run, name, v1::PROBE_STATUS_ERROR, child.duration_ms,
                 absl::StrCat("its process wrote a result that does not parse (", result.status().message(),
                              "); nothing of ", name, " merged"));
    return;
  }
  auto& [outcome, facts] = *result;
  ApplyVendorChanges(before, facts, run.facts);
  if (outcome.ok()) {
    AppendReport(run, name, outcome->skipped ? v1::PROBE_STATUS_SKIPPED : v1::PROBE_STATUS_OK, child.duration_ms,
                 outcome->message);
  } else {
    AppendReport(run, name, v1::PROBE_STATUS_ERROR, child.duration_ms, std::string(outcome.status().message()));
  }
}

}  // namespace

std::string EncodeFacts(const HostFacts& facts) {
  Writer w;
  w.Number(facts.pci.size());
  for (const auto& [bus_id, function] : facts.pci) {
    w.String(bus_id);
    w.Number(static_cast<uint64_t>(function.row));
    w.String(function.sysfs_path);
    w.Number(function.vendor_id);
    w.Number(function.device_id);
    w.Number(function.subsystem_device);
    w.Message(function.device);
    w.Number(function.missing_nodes.size());
    for (const std::string& node : function.missing_nodes) w.String(node);
    w.String(function.inaccessible_reason);
  }
  w.Number(facts.driver_versions.size());
  for (const auto& [row, version] : facts.driver_versions) {
    w.Number(static_cast<uint64_t>(row));
    w.String(version);
  }
  w.Number(facts.backend_attributes.size());
  for (const auto& [row, attributes] : facts.backend_attributes) {
    w.Number(static_cast<uint64_t>(row));
    w.Number(attributes.size());
    for (const auto& [key, value] : attributes) {
      w.String(key);
      w.String(value);
    }
  }
  w.Message(facts.host);
  return w.Take();
}

absl::StatusOr<HostFacts> DecodeFacts(const std::string& bytes) {
  const absl::Status bad = absl::DataLossError("its facts do not parse");
  Reader r(bytes);
  HostFacts facts;
  uint64_t count = 0, number = 0;
  if (!r.Number(count)) return bad;
  for (uint64_t i = 0; i < count; ++i) {
    std::string bus_id;
    PciFunction function;
    uint64_t row = 0, vendor = 0, device = 0, subsystem = 0, nodes = 0;
    if (!r.String(bus_id) || !r.Number(row) || !r.String(function.sysfs_path) || !r.Number(vendor) ||
        !r.Number(device) || !r.Number(subsystem) || !r.Message(function.device) || !r.Number(nodes)) {
      return bad;
    }
    function.row = static_cast<v1::Row>(row);
    function.vendor_id = static_cast<uint16_t>(vendor);
    function.device_id = static_cast<uint16_t>(device);
    function.subsystem_device = static_cast<uint16_t>(subsystem);
    for (uint64_t n = 0; n < nodes; ++n) {
      if (!r.String(function.missing_nodes.emplace_back())) return bad;
    }
    if (!r.String(function.inaccessible_reason)) return bad;
    facts.pci[bus_id] = std::move(function);
  }
  if (!r.Number(count)) return bad;
  for (uint64_t i = 0; i < count; ++i) {
    std::string version;
    if (!r.Number(number) || !r.String(version)) return bad;
    facts.driver_versions[static_cast<v1::Row>(number)] = std::move(version);
  }
  if (!r.Number(count)) return bad;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t entries = 0;
    if (!r.Number(number) || !r.Number(entries)) return bad;
    auto& attributes = facts.backend_attributes[static_cast<v1::Row>(number)];
    for (uint64_t n = 0; n < entries; ++n) {
      std::string key, value;
      if (!r.String(key) || !r.String(value)) return bad;
      attributes[key] = std::move(value);
    }
  }
  if (!r.Message(facts.host) || !r.AtEnd()) return bad;
  return facts;
}

void ApplyVendorChanges(const HostFacts& before, const HostFacts& after, HostFacts& target) {
  for (const auto& [bus_id, function] : after.pci) {
    const auto was = before.pci.find(bus_id);
    if (was == before.pci.end()) {
      target.pci[bus_id] = function;
      continue;
    }
    const PciFunction& old = was->second;
    PciFunction& into = target.pci[bus_id];
    if (function.row != old.row) into.row = function.row;
    if (function.sysfs_path != old.sysfs_path) into.sysfs_path = function.sysfs_path;
    if (function.vendor_id != old.vendor_id) into.vendor_id = function.vendor_id;
    if (function.device_id != old.device_id) into.device_id = function.device_id;
    if (function.subsystem_device != old.subsystem_device) into.subsystem_device = function.subsystem_device;
    ApplyChangedFields(old.device, function.device, into.device);
    if (function.missing_nodes != old.missing_nodes) into.missing_nodes = function.missing_nodes;
    if (function.inaccessible_reason != old.inaccessible_reason) {
      into.inaccessible_reason = function.inaccessible_reason;
    }
  }
  ApplyChangedEntries(before.driver_versions, after.driver_versions, target.driver_versions);
  for (const auto& [row, attributes] : after.backend_attributes) {
    const auto was = before.backend_attributes.find(row);
    ApplyChangedEntries(was == before.backend_attributes.end() ? std::map<std::string, std::string>() : was->second,
                        attributes, target.backend_attributes[row]);
  }
  ApplyChangedFields(before.host, after.host, target.host);
}

void RunVendorProbersIsolated(const std::vector<VendorProber>& probers, std::chrono::milliseconds timeout,
                              ProbeRun& run, Clock::time_point ends_by) {
  if (probers.empty()) return;
  const HostFacts before = run.facts;
  SharedCalls calls(probers.size());
  const Clock::time_point start = Clock::now();
  std::vector<Child> children = StartChildren(probers, calls, run.facts, start);
  CollectResults(children, std::min(start + timeout, ends_by));
  for (Child& child : children) ReportChild(child, before, timeout, start, run);
}

}  // namespace devplace::probe
