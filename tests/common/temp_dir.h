// A fresh temporary directory for a test, with small helpers to put files and shell scripts in it,
// and ReadFile() to read a whole file back.
#ifndef DEVPLACE_TESTS_COMMON_TEMP_DIR_H_
#define DEVPLACE_TESTS_COMMON_TEMP_DIR_H_

#include <string>
#include <vector>

namespace devplace::testing {

// A fresh directory /tmp/devplace-test-XXXXXX (under /tmp rather than $TMPDIR, so that unix socket
// paths in it stay well below the 108-byte limit), removed with everything in it when the object
// goes away. Aborts the test binary when it cannot be created.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // <path>/<name>; creates nothing.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to <path>/<name> (replacing it, creating parent directories); returns the
  // file's path.
  std::string Write(const std::string& name, const std::string& content) const;
  // Creates <path>/<name> as an empty file (and its parent directories); a trailing '/' makes a
  // directory instead.
  void Touch(const std::string& name) const;
  // Writes a /bin/sh script: `#!/bin/sh`, `set -u`, then `body`; and returns the command that runs
  // it: {"/bin/sh", <path>/<name>} (no exec of a just-written file, so no ETXTBSY). The file is
  // executable too, so Script(...).back() serves where one program path is wanted.
  std::vector<std::string> Script(const std::string& name, const std::string& body) const;

 private:
  std::string path_;
};

// The whole content of a file, byte for byte ("" when it is missing or unreadable).
std::string ReadFile(const std::string& path);

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_COMMON_TEMP_DIR_H_
