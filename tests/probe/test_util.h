// Helpers for the probe tests: fixture paths, probing a fixture host, finding rows and devices,
// and scratch copies of fixture trees that a test may modify.
#ifndef DEVPLACE_TESTS_PROBE_TEST_UTIL_H_
#define DEVPLACE_TESTS_PROBE_TEST_UTIL_H_

#include <string>

#include "devplace/v1/devplace.pb.h"
#include "tests/common/no_vendor_libraries.h"  // NoVendorLibraryFlags
#include "tests/common/temp_dir.h"

namespace devplace::testing {

// tests/fixtures/hosts/<name>.
std::string HostDir(const std::string& name);

// The inventory of a host tree, with probed_at and durations cleared (deterministic).
v1::Inventory ProbeTree(const std::string& dir);
// ProbeTree(HostDir(name)).
v1::Inventory ProbeHost(const std::string& name);

// The row's backend, or null.
const v1::Backend* FindRow(const v1::Inventory& inventory, v1::Row row);
// The device with this bus id in any backend, or null.
const v1::Device* FindDevice(const v1::Inventory& inventory, const std::string& bus_id);
// The report of the named prober, or null.
const v1::ProbeReport* FindReport(const v1::Inventory& inventory, const std::string& name);

// Whether DEVPLACE_UPDATE_GOLDENS=1 asks the golden tests to rewrite their files.
bool UpdateGoldens();

// Compares `inventory` as JSON (devplace::ToJson, plus a newline) with the file `golden`, a
// failure naming `what` when they differ; with UpdateGoldens(), writes the file (creating its
// directory) and skips the test instead.
void ExpectMatchesGolden(const v1::Inventory& inventory, const std::string& golden, const std::string& what);

// A fresh copy of a fixture host (symlinks copied as links) under a new temporary directory;
// removed when the object goes out of scope.
class ScratchHost {
 public:
  explicit ScratchHost(const std::string& fixture);
  ScratchHost(const ScratchHost&) = delete;
  ScratchHost& operator=(const ScratchHost&) = delete;

  const std::string& dir() const { return dir_; }
  // <dir>/<rel>.
  std::string Path(const std::string& rel) const { return dir_ + "/" + rel; }
  // Writes `content` to <dir>/<rel> (creating parent directories).
  void Write(const std::string& rel, const std::string& content) const;
  // Removes <dir>/<rel> (a file, link or tree).
  void Remove(const std::string& rel) const;

 private:
  TempDir base_;
  std::string dir_;
};

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PROBE_TEST_UTIL_H_
