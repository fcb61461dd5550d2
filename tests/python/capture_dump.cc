// devplace_capture_dump: libdevplace's own environment capture, for the Python client's parity
// tests. `devplace_capture_dump DEV_DIR` prints ResolveOptions::FromEnvironment(DEV_DIR).ToRequest()
// as protobuf JSON; `devplace_capture_dump --variables` prints PlacementEnvironmentVariables(), one
// per line; `devplace_capture_dump --dra DIR` prints ReadDeviceAllocation(DIR) as protobuf JSON (or
// its error on stderr, exit 1).
#include <cstdio>
#include <string>

#include "devplace/client.h"
#include "google/protobuf/util/json_util.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--dra") {
    const auto allocation = devplace::ReadDeviceAllocation(argv[2]);
    std::string json;
    if (!allocation.ok() || !google::protobuf::util::MessageToJsonString(*allocation, &json).ok()) {
      std::fprintf(stderr, "%s\n", allocation.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", json.c_str());
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: devplace_capture_dump DEV_DIR | --variables | --dra DIR\n");
    return 2;
  }
  const std::string arg = argv[1];
  if (arg == "--variables") {
    for (const std::string& name : devplace::PlacementEnvironmentVariables()) std::printf("%s\n", name.c_str());
    return 0;
  }
  std::string json;
  const auto status =
      google::protobuf::util::MessageToJsonString(devplace::ResolveOptions::FromEnvironment(arg).ToRequest(), &json);
  if (!status.ok()) {
    std::fprintf(stderr, "devplace_capture_dump: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", json.c_str());
  return 0;
}
