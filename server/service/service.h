// The gRPC edge of devplaced: the DevicePlacement service on gRPC's callback API. Proto in,
// proto out; no rules here (they live in server/placement) and no probing (server/inventory runs
// the probe process). absl::Status codes map 1:1 onto gRPC status codes.
#ifndef DEVPLACE_SERVER_SERVICE_SERVICE_H_
#define DEVPLACE_SERVER_SERVICE_SERVICE_H_

#include <memory>
#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "server/inventory/store.h"

namespace devplace::service {

class WatchReactor;

// Serves one host's inventory store. Thread-safe; every handler returns without blocking a gRPC
// thread (RefreshInventory waits for the probe on a thread of its own).
class DevicePlacementService final : public v1::DevicePlacement::CallbackService {
 public:
  // `store` must outlive the service and the server it is registered with.
  explicit DevicePlacementService(inventory::InventoryStore& store);
  ~DevicePlacementService() override;

  // UNAVAILABLE until the store has an inventory; otherwise placement::Resolve's answer or error
  // (INVALID_ARGUMENT / FAILED_PRECONDITION, message naming the field).
  grpc::ServerUnaryReactor* ResolveDevice(grpc::CallbackServerContext* ctx, const v1::ResolveDeviceRequest* request,
                                          v1::ResolveDeviceResponse* response) override;
  // The current snapshot; UNAVAILABLE before the first probe succeeded.
  grpc::ServerUnaryReactor* GetInventory(grpc::CallbackServerContext* ctx, const v1::GetInventoryRequest* request,
                                         v1::Inventory* response) override;
  // The hardware table; always answers.
  grpc::ServerUnaryReactor* ListBackends(grpc::CallbackServerContext* ctx, const v1::ListBackendsRequest* request,
                                         v1::ListBackendsResponse* response) override;
  // Re-probes now (concurrent calls share one probe run) and returns the resulting snapshot; a
  // failed probe returns its error (DEADLINE_EXCEEDED, INTERNAL, ...) and the last good snapshot
  // stays. UNAVAILABLE once shutdown began.
  grpc::ServerUnaryReactor* RefreshInventory(grpc::CallbackServerContext* ctx,
                                             const v1::RefreshInventoryRequest* request,
                                             v1::Inventory* response) override;
  // Streams the current snapshot (unless its revision equals `known_revision`), then every new
  // revision, until the client cancels or the service shuts down (the stream then ends with OK).
  grpc::ServerWriteReactor<v1::Inventory>* WatchInventory(grpc::CallbackServerContext* ctx,
                                                          const v1::WatchInventoryRequest* request) override;

  // Ends every watch cleanly and refuses new refreshes; waits up to `grace` for refreshes in
  // flight. Call before grpc::Server::Shutdown.
  void Shutdown(absl::Duration grace);

 private:
  friend class WatchReactor;
  void Forget(WatchReactor* watch);

  inventory::InventoryStore& store_;
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  int refreshes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_SERVICE_H_
