// Helpers for the NVML tests: probing a fixture host with the fake NVML (tests/fakes) answering
// from a script in tests/fixtures/nvml.
#ifndef DEVPLACE_TESTS_PROBE_NVML_TEST_UTIL_H_
#define DEVPLACE_TESTS_PROBE_NVML_TEST_UTIL_H_

#include <chrono>
#include <string>

#include "devplace/v1/devplace.pb.h"

namespace devplace::testing {

// tests/fixtures/nvml/<name>.txt; `name` itself when it is an absolute path (a script a test wrote).
std::string NvmlScript(const std::string& name);

// The inventory of the host tree `dir` with the NVML prober loading `library` (default: the
// fake) under `timeout`, the fake answering from NvmlScript(script) (FAKE_NVML_CONFIG is set in
// this process's environment); probed_at and durations cleared, as ProbeTree does.
v1::Inventory ProbeTreeWithNvml(const std::string& dir, const std::string& script,
                                const std::string& library = DEVPLACE_FAKE_NVML,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5));
// ProbeTreeWithNvml(HostDir(host), script).
v1::Inventory ProbeHostWithNvml(const std::string& host, const std::string& script);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PROBE_NVML_TEST_UTIL_H_
