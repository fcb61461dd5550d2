// Builds against an installed libdevplace: a Client over MakeGrpcConnection and a request from
// ResolveOptions. Prints the default target and the request; contacts no daemon.
#include <cstdio>

#include "devplace/client.h"

int main() {
  devplace::Client client(devplace::MakeGrpcConnection(devplace::DefaultTarget()));
  devplace::ResolveOptions options = devplace::ResolveOptions::FromEnvironment();
  options.workload = devplace::v1::WORKLOAD_INFERENCE;
  options.device_map = "auto";
  const devplace::v1::ResolveDeviceRequest request = options.ToRequest();
  std::printf("target %s\nworkload %s device_map %s\n", devplace::DefaultTarget().c_str(),
              devplace::v1::Workload_Name(request.workload()).c_str(), request.device_map().c_str());
  return client.connection() != nullptr ? 0 : 1;
}
