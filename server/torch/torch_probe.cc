// devplace-torch-probe: what a stock PyTorch (libtorch) runtime on this host can use. The only
// devplace code that links libtorch: libtorch costs ~0.8 s and ~150 MB at
// start-up, so devplaced runs this as a short-lived child process and merges the view it prints
// (one serialized devplace.v1.Inventory whose `torch` field is set) into its inventory.
// Exit status: 0 when a view was written (libtorch errors are reported in `torch.error`, never
// thrown out of here), 2 on bad flags, 1 when writing failed.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ATen/Context.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"
#include "devplace/v1/devplace.pb.h"
#include "server/common/flag_help.h"
#include "server/common/version.h"
#include "google/protobuf/util/json_util.h"
#include "torch/cuda.h"
#include "torch/version.h"

ABSL_FLAG(bool, json, false, "Print the view as pretty JSON (protobuf JSON mapping) instead of serialized bytes");

namespace {

devplace::v1::TorchInfo Probe() {
  devplace::v1::TorchInfo info;
  try {
    info.set_version(TORCH_VERSION);
    info.add_compiled_backends("cpu");
    const std::pair<const char*, bool> backends[] = {
        {"cuda", at::hasCUDA()}, {"hip", at::hasHIP()},     {"mps", at::hasMPS()},
        {"xla", at::hasXLA()},   {"ipu", at::hasIPU()},     {"mkldnn", at::hasMKLDNN()},
        {"mkl", at::hasMKL()},   {"lapack", at::hasLAPACK()}, {"openmp", at::hasOpenMP()},
    };
    for (const auto& [name, has] : backends) {
      if (has) info.add_compiled_backends(name);
    }
    if (at::hasCUDA() && torch::cuda::is_available()) {
      info.set_cuda_device_count(static_cast<uint32_t>(torch::cuda::device_count()));
    }
    info.set_probed(true);
  } catch (const std::exception& e) {  // c10::Error derives from std::exception
    info.set_probed(false);
    info.set_error(e.what());
  } catch (...) {
    info.set_probed(false);
    info.set_error("unknown exception from libtorch");
  }
  return info;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Reports what this host's libtorch can use (version, compiled backends, CUDA "
      "device count) as one devplace.v1.Inventory with only `torch` set, for devplaced.\n\n"
      "Usage: devplace-torch-probe [--json] [--version]");
  absl::FlagsUsageConfig config;
  config.version_string = [] { return absl::StrCat("devplace-torch-probe ", devplace::kVersion, "\n"); };
  // This file's flags are the binary's own (--help lists them), named by the file, not its build path.
  config.normalize_filename = [](absl::string_view file) {
    if (file == __FILE__) return std::string("devplace-torch-probe.cc");
    const size_t slash = file.rfind('/');
    return std::string(slash == absl::string_view::npos ? file : file.substr(slash + 1));
  };
  config.contains_help_flags = [](absl::string_view file) { return file == "devplace-torch-probe.cc"; };
  absl::SetFlagsUsageConfig(config);
  // --help and -h (absl's handler exits 1 and knows no -h): on stdout, exit 0, as devplaced's.
  if (std::optional<std::string> help = devplace::FlagHelp(std::vector<std::string>(argv + 1, argv + argc),
                                                           "devplace-torch-probe", "devplace-torch-probe.cc")) {
    std::fputs(help->c_str(), stdout);
    return 0;
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "devplace-torch-probe: unexpected argument '%s' (see --help)\n", rest[1]);
    return 2;
  }
  devplace::v1::Inventory out;
  *out.mutable_torch() = Probe();
  std::string text;
  if (absl::GetFlag(FLAGS_json)) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.always_print_primitive_fields = true;
    if (!google::protobuf::util::MessageToJsonString(out, &text, options).ok()) return 1;
  } else if (!out.SerializeToString(&text)) {
    return 1;
  }
  std::cout << text << std::flush;
  return std::cout.good() ? 0 : 1;
}
