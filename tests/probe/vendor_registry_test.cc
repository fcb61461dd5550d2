// The vendor-library registry (server/common/vendor_libraries.h) against everything that must
// follow it: every registered library's flag, with its default, in the --help of devplace-probe,
// `devplace probe` and devplaced and in devplaced's flag file; docs/PROBE.md's vendor-library
// table (each registered library with its flag, default and memory_source, and no other); each
// factory's prober name; the memory_source values the probers wrote into the goldens; and that no
// other file of the project (outside tests/) lists the registered libraries again.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/common/vendor_libraries.h"
#include "server/probe/vendor_libs/vendor_prober.h"
#include "tests/common/command.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;

// `text` with every run of whitespace made one space (help text is wrapped anywhere).
std::string OneLine(const std::string& text) {
  std::vector<std::string> words = absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  return absl::StrJoin(words, " ");
}

// The help of one flag in `help`: from the line that starts with `start` (after indentation) to
// the next line that starts a flag, on one line; "" when no line starts so.
std::string FlagEntry(const std::string& help, const std::string& start) {
  const std::vector<std::string> lines = absl::StrSplit(help, '\n');
  std::string entry;
  bool in = false;
  for (const std::string& line : lines) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (in && absl::StartsWith(stripped, "--")) break;
    if (!in && absl::StartsWith(stripped, start)) in = true;
    if (in) absl::StrAppend(&entry, line, "\n");
  }
  return OneLine(entry);
}

// Every registered library's flag is a flag of `help` (an absl --help, or the CLI's when `cli`)
// with the library's default.
void ExpectEveryLibraryFlag(const std::string& binary, const std::string& help, bool cli) {
  for (const VendorLibrary& library : kVendorLibraries) {
    const std::string flag = absl::StrCat("--", library.flag);
    const std::string entry = FlagEntry(help, cli ? flag + "=VALUE" : flag + " (");
    ASSERT_FALSE(entry.empty()) << binary << "'s --help lacks " << flag << ":\n" << help;
    EXPECT_THAT(entry, HasSubstr(cli ? absl::StrCat("(default: ", library.default_library, ")")
                                     : absl::StrCat("default: \"", library.default_library, "\"")))
        << binary << ": " << entry;
    EXPECT_THAT(entry, HasSubstr(OneLine(library.description))) << binary << ": " << entry;
  }
}

TEST(VendorRegistry, EntriesAreWellFormed) {
  std::set<std::string> names;
  for (const VendorLibrary& library : kVendorLibraries) {
    const std::string name = library.name;
    EXPECT_TRUE(names.insert(name).second) << "registered twice: " << name;
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_islower(c) || c == '_'; }))
        << name;
    EXPECT_EQ(std::string(library.flag), name + "_library");
    EXPECT_FALSE(std::string(library.default_library).empty()) << name;
    EXPECT_EQ(std::string(library.memory_source).find_first_of(" \n"), std::string::npos) << name;
    EXPECT_FALSE(std::string(library.description).empty()) << name;
    EXPECT_EQ(std::string(library.description).find('\n'), std::string::npos) << name;
    EXPECT_EQ(&RegisteredVendorLibrary(name), &library);
  }
  EXPECT_EQ(names.size(), kVendorLibraryCount);
  EXPECT_THROW(RegisteredVendorLibrary("no_such_library"), std::out_of_range);
}

TEST(VendorRegistry, PathsAreNamedAfterTheFlagsAndDefaultToTheSonames) {
  const VendorLibraryPaths none;
  const VendorLibraryPaths defaults = VendorLibraryPaths::Defaults();
  std::set<const std::string*> fields;
  for (size_t i = 0; i < kVendorLibraryCount; ++i) {
    EXPECT_EQ(none[i], "") << kVendorLibraries[i].name;
    EXPECT_EQ(defaults[i], kVendorLibraries[i].default_library) << kVendorLibraries[i].name;
    fields.insert(&defaults[i]);
  }
  EXPECT_EQ(fields.size(), kVendorLibraryCount);  // one field each
  // Each named field is its library's indexed one.
#define DEVPLACE_EXPECT_NAMED_FIELD(name, ...) \
  EXPECT_EQ(&defaults.name##_library, &defaults[&RegisteredVendorLibrary(#name) - kVendorLibraries]);
  DEVPLACE_VENDOR_LIBRARIES(DEVPLACE_EXPECT_NAMED_FIELD)
#undef DEVPLACE_EXPECT_NAMED_FIELD
}

TEST(VendorRegistry, EachFactoryMakesTheProberOfItsName) {
  probe::ProbeOptions options;
  EXPECT_TRUE(probe::VendorProbers(options).empty());  // no path, no prober
  for (size_t i = 0; i < kVendorLibraryCount; ++i) options[i] = "/nonexistent/devplace-vendor-library.so";
  const std::vector<probe::VendorProber> probers = probe::VendorProbers(options);
  ASSERT_EQ(probers.size(), kVendorLibraryCount);
  for (size_t i = 0; i < kVendorLibraryCount; ++i) EXPECT_EQ(probers[i].name, kVendorLibraries[i].name);
}

TEST(VendorRegistry, ProbeHelpListsEveryLibraryFlag) {
  const CommandResult r = RunCommand(ShellQuote(DEVPLACE_PROBE_BINARY) + " --help 2>&1");
  ExpectEveryLibraryFlag("devplace-probe", r.out, false);
  for (const VendorLibrary& library : kVendorLibraries) {  // and the usage line names it
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("[--", library.flag, "=PATH]")));
  }
}

#ifdef DEVPLACED_BINARY
TEST(VendorRegistry, DaemonHelpListsEveryLibraryFlag) {
  const CommandResult r = RunCommand(ShellQuote(DEVPLACED_BINARY) + " --help 2>&1");
  ExpectEveryLibraryFlag("devplaced", r.out, false);
}

TEST(VendorRegistry, CliProbeHelpListsEveryLibraryFlag) {
  const CommandResult r = RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " probe --help 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  ExpectEveryLibraryFlag("devplace probe", r.out, true);
}

TEST(VendorRegistry, FlagFileDocumentsEveryLibraryDefault) {
  const std::string file = ReadFile(DEVPLACE_FLAGS_FILE);
  for (const VendorLibrary& library : kVendorLibraries) {
    EXPECT_THAT(file, HasSubstr(absl::StrCat("\n#--", library.flag, "=", library.default_library, "\n")));
  }
  EXPECT_THAT(file, ::testing::Not(HasSubstr("@VENDOR_LIBRARY_FLAGS@")));
}
#endif

// One row of docs/PROBE.md's vendor-library table.
struct DocRow {
  std::string flag, default_library, memory_source;
};

// "`x`" -> "x"; anything else as it is.
std::string Code(absl::string_view cell) {
  cell = absl::StripAsciiWhitespace(cell);
  if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') cell = cell.substr(1, cell.size() - 2);
  return std::string(cell);
}

// The rows of the table whose header starts "| prober | flag (default) |", by prober name.
std::map<std::string, DocRow> ProbeDocTable(std::string& error) {
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(DEVPLACE_SOURCE_DIR "/docs/PROBE.md"), '\n');
  std::map<std::string, DocRow> rows;
  size_t i = 0;
  while (i < lines.size() && !absl::StartsWith(lines[i], "| prober | flag (default) |")) ++i;
  if (i == lines.size()) {
    error = "docs/PROBE.md has no table whose header starts \"| prober | flag (default) |\"";
    return rows;
  }
  for (i += 2; i < lines.size() && absl::StartsWith(lines[i], "|"); ++i) {
    const std::vector<std::string> cells = absl::StrSplit(absl::string_view(lines[i]).substr(1), '|');
    if (cells.size() < 3) {
      error = absl::StrCat("docs/PROBE.md: a table row of fewer than 3 cells: ", lines[i]);
      return rows;
    }
    // "`--nvml_library` (`libnvidia-ml.so.1`)"
    const std::vector<std::string> flag = absl::StrSplit(std::string(absl::StripAsciiWhitespace(cells[1])), " (");
    DocRow row{flag.empty() ? "" : Code(flag[0]), flag.size() == 2 ? Code(absl::StripSuffix(flag[1], ")")) : "",
               Code(cells[2]) == "—" ? "" : Code(cells[2])};
    if (!rows.emplace(Code(cells[0]), row).second) error = absl::StrCat("docs/PROBE.md lists twice: ", lines[i]);
  }
  return rows;
}

TEST(VendorRegistry, ProbeDocTableListsExactlyTheRegisteredLibraries) {
  std::string error;
  const std::map<std::string, DocRow> rows = ProbeDocTable(error);
  ASSERT_EQ(error, "");
  for (const VendorLibrary& library : kVendorLibraries) {
    const auto it = rows.find(library.name);
    if (it == rows.end()) {
      ADD_FAILURE() << "docs/PROBE.md's vendor-library table lacks the registered library " << library.name;
      continue;
    }
    EXPECT_EQ(it->second.flag, absl::StrCat("--", library.flag)) << library.name;
    EXPECT_EQ(it->second.default_library, library.default_library) << library.name;
    EXPECT_EQ(it->second.memory_source, library.memory_source) << library.name;
  }
  for (const auto& [name, row] : rows) {
    EXPECT_NO_THROW(RegisteredVendorLibrary(name))
        << "docs/PROBE.md's vendor-library table lists " << name << ", which is not a registered library";
  }
}

// Every "memory_source" value in the golden inventories (what the real probers wrote) is a
// registered library's or the Neuron sysfs prober's, and every registered one occurs.
TEST(VendorRegistry, MemorySourcesAreThoseTheProbersWrite) {
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(DEVPLACE_SOURCE_DIR "/tests/golden")) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = ReadFile(entry.path().string());
    const std::string kKey = "\"memory_source\": \"";
    for (size_t at = text.find(kKey); at != std::string::npos; at = text.find(kKey, at + 1)) {
      const size_t start = at + kKey.size();
      seen.insert(text.substr(start, text.find('"', start) - start));
    }
  }
  std::set<std::string> registered = {"neuron_sysfs"};  // sysfs, no library
  for (const VendorLibrary& library : kVendorLibraries) {
    if (*library.memory_source != '\0') registered.insert(library.memory_source);
  }
  EXPECT_EQ(seen, registered);
}


// ---- no copy of the registry ----

// The files a new library touches besides its own (docs/ARCHITECTURE.md "A new vendor library"):
// they may name every registered library.
const std::set<std::string> kRecipeFiles = {"server/common/vendor_libraries.h", "server/probe/CMakeLists.txt",
                                            "docs/PROBE.md"};

// The registered libraries `text` names: each library's registry name in any case, its words
// joined by a space, '_', '-' or nothing ("ROCm SMI", "rocm_smi", "amdsmi", "Level Zero"), not
// inside a longer word.
std::set<std::string> LibrariesNamed(const std::string& text) {
  std::string folded = absl::AsciiStrToLower(text);
  std::replace_if(folded.begin(), folded.end(), [](char c) { return c == '_' || c == '-'; }, ' ');
  std::set<std::string> named;
  for (const VendorLibrary& library : kVendorLibraries) {
    const std::string spaced = absl::StrReplaceAll(library.name, {{"_", " "}});
    for (const std::string& form : {spaced, absl::StrReplaceAll(library.name, {{"_", ""}})}) {
      for (size_t at = folded.find(form); at != std::string::npos; at = folded.find(form, at + 1)) {
        const size_t end = at + form.size();
        if ((at == 0 || !absl::ascii_isalnum(folded[at - 1])) &&
            (end == folded.size() || !absl::ascii_isalnum(folded[end]))) {
          named.insert(library.name);
        }
      }
    }
  }
  return named;
}

// "<file>:<line>" for each text file under `root` (but not tests/, build/, shared/, hidden folders,
// JSON data or the recipe's files) where three consecutive lines name every registered library,
// or all but one (a list written before the newest library, or one that leaves libcuda out):
// a copy of the registry that the next library would have to edit.
std::vector<std::string> CopiesOfTheRegistry(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> copies;
  fs::recursive_directory_iterator it(root), end;
  for (; it != end; ++it) {
    const fs::path rel = fs::relative(it->path(), root);
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      const bool top = it.depth() == 0;
      if (name.front() == '.' || name == "node_modules" ||
          (top && (name == "tests" || name == "build" || name == "shared"))) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!it->is_regular_file() || kRecipeFiles.count(rel.string()) > 0 || it->path().extension() == ".json" ||
        it->file_size() > (1u << 20)) {
      continue;
    }
    const std::string text = ReadFile(it->path().string());
    if (text.find('\0') != std::string::npos) continue;  // not text
    const std::vector<std::string> lines = absl::StrSplit(text, '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string window =
          absl::StrJoin(lines.begin() + i, lines.begin() + std::min(i + 3, lines.size()), "\n");
      if (LibrariesNamed(window).size() + 1 >= kVendorLibraryCount) {
        copies.push_back(absl::StrCat(rel.string(), ":", i + 1));
        break;
      }
    }
  }
  std::sort(copies.begin(), copies.end());
  return copies;
}

// The check itself finds a copy: a list of every library, or of all but one, in prose or as
// names, over wrapped lines; not one that names fewer, nor one under tests/ or in a recipe file.
TEST(VendorRegistry, CopyCheckFindsAListOfTheLibraries) {
  std::vector<std::string> all, prose;
  for (const VendorLibrary& library : kVendorLibraries) {
    all.push_back(library.name);
    prose.push_back(absl::AsciiStrToUpper(absl::StrReplaceAll(library.name, {{"_", " "}})));
  }
  TempDir tree;
  tree.Write("README.md", absl::StrCat("Not built yet: vendor libraries other than\n",
                                       absl::StrJoin(prose.begin() + 1, prose.end(), ", "), ".\n"));
  tree.Write("proto/api.proto", absl::StrCat("  // one of \"", absl::StrJoin(all.begin() + 1, all.begin() + 5, "\", \""),
                                             "\",\n  // \"", absl::StrJoin(all.begin() + 5, all.end(), "\", \""), "\"\n"));
  tree.Write("docs/FEW.md", absl::StrCat("Such as ", absl::StrJoin(prose.begin(), prose.begin() + 2, " and "), ".\n"));
  tree.Write("tests/probe/test.cc", absl::StrJoin(all, " "));
  tree.Write("docs/PROBE.md", absl::StrJoin(all, " "));
  EXPECT_EQ(CopiesOfTheRegistry(tree.path()), (std::vector<std::string>{"README.md:1", "proto/api.proto:1"}));
  EXPECT_EQ(LibrariesNamed("--amd_smi_library=, ROCm SMI, amdsmi.h, Level-Zero, NVMLx, cudaMalloc").size(), 3u);
}

// No file outside the recipe lists the registered libraries (docs/ARCHITECTURE.md "A new vendor
// library"): the README, the proto, the other docs and the code say "the libraries in
// docs/PROBE.md's vendor-library table" or give examples, so that a new library touches only its
// registry row, its CMake line and its PROBE.md row.
TEST(VendorRegistry, NoOtherFileListsEveryLibrary) {
  EXPECT_THAT(CopiesOfTheRegistry(DEVPLACE_SOURCE_DIR), ::testing::IsEmpty())
      << "these lines list the registered libraries again; name docs/PROBE.md's vendor-library table instead "
         "(examples are fine)";
}

}  // namespace
}  // namespace devplace::testing
