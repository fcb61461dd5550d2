// Request and answer bytes of the DevicePlacement service, shared by its files (service.cc: the
// inventory calls; pick_service.cc: PickDevices and the lease calls; the workers they hand calls
// to). Internal to devplace_service.
#ifndef DEVPLACE_SERVER_SERVICE_WIRE_H_
#define DEVPLACE_SERVER_SERVICE_WIRE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/inventory/store.h"

namespace devplace::service {

// An absl::Status as a grpc::Status, its message cut to 4 KiB (status messages travel in a
// trailer, which clients cap at 8 KiB by default).
grpc::Status ToGrpc(const absl::Status& s);

// Bytes shared with the cache or the prepared snapshot, as a response body. Small answers are
// copied (one allocation); larger ones travel without a copy, the slice keeping them alive.
grpc::ByteBuffer SharedBytes(std::shared_ptr<const std::string> bytes);
// The same followed by `tail` (copied): one message body in two slices, so that appending a few
// bytes (an inventory's leases, a repeated field that merges) never copies a large shared body.
grpc::ByteBuffer SharedBytes(std::shared_ptr<const std::string> bytes, const std::string& tail);

// A raw request body as one contiguous view: small requests arrive as one slice, viewed in place
// (`slices` keeps it alive); others are copied into `flat`. False when the buffer cannot be read.
bool WireBytes(const grpc::ByteBuffer* bytes, std::vector<grpc::Slice>& slices, std::string& flat,
               absl::string_view& wire);

// UNAVAILABLE "devplaced is shutting down": what a call gets once shutdown began.
grpc::Status ShuttingDown();

// UNAVAILABLE before the first inventory, with the latest probe failure when there was one.
grpc::Status NoInventory(const inventory::InventoryStore& store);

template <typename Message>
grpc::Status Unparsable(size_t length) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat("request: ", length, " bytes that do not parse as a ",
                                   Message::descriptor()->full_name(),
                                   " (malformed protobuf, or a string field that is not UTF-8)"));
}

// Parses a raw request body into `message`; false (and INVALID_ARGUMENT in `error`) when it does
// not parse.
template <typename Message>
bool ParseRequest(const grpc::ByteBuffer* bytes, Message* message, grpc::Status* error) {
  std::vector<grpc::Slice> slices;
  std::string flat;
  absl::string_view wire;
  if (WireBytes(bytes, slices, flat, wire) && message->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return true;
  }
  *error = Unparsable<Message>(bytes->Length());
  return false;
}

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_WIRE_H_
