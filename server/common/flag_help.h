// --help for the server binaries that parse their flags with absl (devplaced, devplace-probe):
// absl's own --help handler exits 1 and knows no -h; these print the same layout on stdout and
// exit 0, as the devplace CLI does.
#ifndef DEVPLACE_SERVER_COMMON_FLAG_HELP_H_
#define DEVPLACE_SERVER_COMMON_FLAG_HELP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace devplace {

// The help that `args` (argv without argv[0], up to `--`) ask for, or nullopt: --help, -h,
// --helpshort and --helppackage list the program's own flags (those whose normalized file name,
// absl::FlagsUsageConfig::normalize_filename's, is `own_file`), --helpfull every flag,
// --help=SUBSTRING (or --helpmatch=) the flags whose name, file or description holds SUBSTRING,
// --helpon=FILE those of FILE.cc; in absl's layout ("<program>: <usage message>", "  Flags from
// <file>:", "    --name (help); default: x;" filled to 80 columns), which deploy/man/make_manpage.sh
// reads for the man pages.
std::optional<std::string> FlagHelp(const std::vector<std::string>& args, absl::string_view program,
                                    absl::string_view own_file);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_FLAG_HELP_H_
