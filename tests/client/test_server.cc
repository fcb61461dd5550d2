#include "tests/client/test_server.h"

#include <chrono>

#include "gtest/gtest.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/probe/build_inventory.h"
#include "server/placement/backends.h"
#include "server/placement/resolver.h"
#include "server/probe/host/host_root.h"
#include "tests/common/fixtures.h"

namespace devplace::testing {

v1::Inventory FixtureInventory(const std::string& name) {
  v1::Inventory inventory = probe::ProbeInventory(probe::HostRoot(FixtureHost(name)));
  inventory.set_revision(1);
  return inventory;
}

namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

grpc::Status TestPlacementService::ResolveDevice(grpc::ServerContext*, const v1::ResolveDeviceRequest* request,
                                                 v1::ResolveDeviceResponse* response) {
  v1::Inventory inventory;
  {
    absl::MutexLock lock(&mu_);
    inventory = inventory_;
  }
  absl::StatusOr<v1::ResolveDeviceResponse> answer = placement::Resolve(inventory, *request);
  if (!answer.ok()) return ToGrpc(answer.status());
  *response = *std::move(answer);
  return grpc::Status::OK;
}

grpc::Status TestPlacementService::GetInventory(grpc::ServerContext* context, const v1::GetInventoryRequest*,
                                                v1::Inventory* response) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mu_);
    delay = delay_;
  }
  const absl::Time until = absl::Now() + delay;
  while (absl::Now() < until && !context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&mu_);
  *response = inventory_;
  return grpc::Status::OK;
}

grpc::Status TestPlacementService::ListBackends(grpc::ServerContext*, const v1::ListBackendsRequest*,
                                                v1::ListBackendsResponse* response) {
  *response = placement::ListBackendsResponse();
  return grpc::Status::OK;
}

grpc::Status TestPlacementService::RefreshInventory(grpc::ServerContext*, const v1::RefreshInventoryRequest*,
                                                    v1::Inventory* response) {
  absl::MutexLock lock(&mu_);
  inventory_.set_revision(inventory_.revision() + 1);
  *response = inventory_;
  return grpc::Status::OK;
}

grpc::Status TestPlacementService::WatchInventory(grpc::ServerContext* context,
                                                  const v1::WatchInventoryRequest* request,
                                                  grpc::ServerWriter<v1::Inventory>* writer) {
  uint64_t sent = request->known_revision();
  int count = 0;
  while (!context->IsCancelled()) {
    v1::Inventory snapshot;
    int limit;
    grpc::Status end;
    {
      absl::MutexLock lock(&mu_);
      if (inventory_.revision() != sent) snapshot = inventory_;
      limit = watch_limit_;
      end = watch_end_;
    }
    if (snapshot.revision() != 0) {
      if (!writer->Write(snapshot)) break;
      {
        absl::MutexLock lock(&mu_);
        ++watch_messages_;
      }
      sent = snapshot.revision();
      if (limit > 0 && ++count >= limit) return end;
      continue;
    }
    absl::SleepFor(absl::Milliseconds(10));  // a test server may poll
  }
  return grpc::Status::CANCELLED;
}

TestServer::TestServer(const std::string& fixture_host) : target_("unix:" + dir_.File("devplace.sock")) {
  service_ = std::make_unique<TestPlacementService>(FixtureInventory(fixture_host));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(target_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) ADD_FAILURE() << "cannot listen on " << target_;
}

TestServer::~TestServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_.reset();
}

void TestServer::SetServing(bool serving) { server_->GetHealthCheckService()->SetServingStatus(serving); }

}  // namespace devplace::testing
