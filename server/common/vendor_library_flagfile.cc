// Build-time tool: writes devplaced's flag file from deploy/devplaced.flags, its one line
// "#@VENDOR_LIBRARY_FLAGS@" replaced by each registered vendor library's commented default
// (vendor_libraries.h), so the file needs no edit when a library is added.
// Usage: devplace_vendor_library_flagfile TEMPLATE OUTPUT
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "server/common/host_file.h"
#include "server/common/vendor_libraries.h"

namespace {

constexpr char kMarker[] = "#@VENDOR_LIBRARY_FLAGS@";

// `text` as "# " comment lines of at most 100 characters, broken at spaces.
std::string Comment(const std::string& text) {
  constexpr size_t kWidth = 100 - 2;
  std::string out, line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
      out += "# " + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + "# " + line + "\n";
}

// For each library, in registry order: its description as a comment and its commented default,
// "#" between them (the template has the lines around the block).
std::string LibraryLines() {
  std::string out;
  for (size_t i = 0; i < devplace::kVendorLibraryCount; ++i) {
    const devplace::VendorLibrary& library = devplace::kVendorLibraries[i];
    if (i > 0) out += "#\n";
    out += Comment(std::string(library.description) + ".");
    out += std::string("#--") + library.flag + "=" + library.default_library + "\n";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TEMPLATE OUTPUT\n", argv[0]);
    return 2;
  }
  const absl::StatusOr<std::string> text = devplace::ReadHostFile(argv[1]);
  if (!text.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], std::string(text.status().message()).c_str());
    return 1;
  }
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the last line's '\n' ends it
  std::ostringstream out;
  int markers = 0;
  for (absl::string_view line : lines) {
    if (line == kMarker) {
      out << LibraryLines();
      ++markers;
    } else {
      out << line << "\n";
    }
  }
  if (markers != 1) {
    std::fprintf(stderr, "%s: %s must hold the line %s once\n", argv[0], argv[1], kMarker);
    return 1;
  }
  std::ofstream file(argv[2], std::ios::trunc);
  file << out.str();
  if (!file.flush()) {
    std::fprintf(stderr, "%s: cannot write %s\n", argv[0], argv[2]);
    return 1;
  }
  return 0;
}
