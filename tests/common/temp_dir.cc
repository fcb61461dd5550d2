#include "tests/common/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace devplace::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  char pattern[] = "/tmp/devplace-test-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    perror("devplace tests: mkdtemp /tmp/devplace-test-XXXXXX");
    abort();
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string path = File(name);
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

void TempDir::Touch(const std::string& name) const {
  const fs::path path = File(name);
  if (!name.empty() && name.back() == '/') {
    fs::create_directories(path);
    return;
  }
  fs::create_directories(path.parent_path());
  std::ofstream(path.string(), std::ios::binary | std::ios::trunc).flush();
}

std::vector<std::string> TempDir::Script(const std::string& name, const std::string& body) const {
  const std::string path = Write(name, "#!/bin/sh\nset -u\n" + body + "\n");
  fs::permissions(path, fs::perms::owner_all);
  return {"/bin/sh", path};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace devplace::testing
