// libdevplace's readers of the job's files with their bounds as parameters, for tests that
// exercise a bound without building a fixture that large (internal: never installed). The public
// functions in devplace/client.h call these with the defaults below.
#ifndef DEVPLACE_CLIENT_READERS_H_
#define DEVPLACE_CLIENT_READERS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::internal {

// The bounds of one reader's call (its read set): the Python client's _read.py has the same
// defaults.
struct ReadLimits {
  absl::Duration time;       // the whole call
  uint64_t file_bytes;       // one file (a metadata file; a METADATA's header block)
  uint64_t total_bytes;      // every file of the call together
  size_t directory_entries;  // the entries of one directory that are looked at (the first by name)
};
// DRA Device Metadata: 5 s, 1 MiB a file, 16 MiB in all, 1024 entries a directory.
ReadLimits DraLimits();
// Python package metadata: 5 s, 64 KiB of a METADATA's headers, 16 MiB in all, 1024 matching
// entries a directory (only *.dist-info / *.egg-info entries of the wanted distributions count).
ReadLimits PythonLimits();

absl::StatusOr<v1::DeviceAllocation> ReadDeviceAllocation(const std::string& dir, const ReadLimits& limits);
absl::StatusOr<v1::JobEnvironment> ReadPythonEnvironment(const std::string& dir, const ReadLimits& limits);
// The packages on the path entries `path` (a sys.path: directories; others skipped), with `source`
// as JobEnvironment.source (cut to its bound).
v1::JobEnvironment ReadPythonPath(const std::vector<std::string>& path, const std::string& source,
                                  const ReadLimits& limits);

}  // namespace devplace::internal

#endif  // DEVPLACE_CLIENT_READERS_H_
