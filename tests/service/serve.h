// A real gRPC server for one service on a unix socket, and a DevicePlacement stub that calls it:
// what the tests of the service's workers (RefreshRounds, WatchHub) serve their handler with.
#ifndef DEVPLACE_TESTS_SERVICE_SERVE_H_
#define DEVPLACE_TESTS_SERVICE_SERVE_H_

#include <memory>
#include <string>

#include "devplace/v1/devplace.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace devplace::testing {

struct Served {
  std::unique_ptr<grpc::Server> server;  // null when it did not start
  std::unique_ptr<v1::DevicePlacement::Stub> stub;
};

// Serves `service` (which must outlive the server) on the unix socket at `socket_path`.
inline Served ServeOnUnixSocket(grpc::Service* service, const std::string& socket_path) {
  Served served;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  served.server = builder.BuildAndStart();
  served.stub = v1::DevicePlacement::NewStub(grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()));
  return served;
}

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_SERVICE_SERVE_H_
