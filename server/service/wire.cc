#include "server/service/wire.h"

#include <optional>
#include <utility>

namespace devplace::service {
namespace {

// Status messages travel in a trailer, which clients cap (8 KiB by default): longer ones are cut.
constexpr size_t kMaxStatusMessageBytes = 4096;

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  std::string message(s.message());
  if (message.size() > kMaxStatusMessageBytes) {
    message.resize(kMaxStatusMessageBytes);
    message += "... (truncated)";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), message);
}

// Bytes shared with the cache or the prepared snapshot, as a response body. Small answers are
// copied (one allocation); larger ones travel without a copy, the slice keeping them alive.
grpc::Status ShuttingDown() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "devplaced is shutting down"); }

namespace {

grpc::Slice SharedSlice(std::shared_ptr<const std::string> bytes) {
  constexpr size_t kCopyBelowBytes = 4096;
  if (bytes->size() < kCopyBelowBytes) return grpc::Slice(bytes->data(), bytes->size());
  auto* holder = new std::shared_ptr<const std::string>(std::move(bytes));
  return grpc::Slice(const_cast<char*>((*holder)->data()), (*holder)->size(),
                     [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, holder);
}

}  // namespace

grpc::ByteBuffer SharedBytes(std::shared_ptr<const std::string> bytes) {
  grpc::Slice slice = SharedSlice(std::move(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer SharedBytes(std::shared_ptr<const std::string> bytes, const std::string& tail) {
  if (tail.empty()) return SharedBytes(std::move(bytes));
  grpc::Slice slices[2] = {SharedSlice(std::move(bytes)), grpc::Slice(tail.data(), tail.size())};
  return grpc::ByteBuffer(slices, 2);
}

// A raw request body as one contiguous view: small requests arrive as one slice, viewed in place
// (`slices` keeps it alive); others are copied into `flat`. False when the buffer cannot be read.
bool WireBytes(const grpc::ByteBuffer* bytes, std::vector<grpc::Slice>& slices, std::string& flat,
               absl::string_view& wire) {
  if (!bytes->Dump(&slices).ok()) return false;
  if (slices.size() == 1) {
    wire = absl::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size());
    return true;
  }
  flat.reserve(bytes->Length());
  for (const grpc::Slice& s : slices) flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  wire = flat;
  return true;
}

// UNAVAILABLE before the first inventory, with the latest probe failure when there was one.
grpc::Status NoInventory(const inventory::InventoryStore& store) {
  const std::optional<inventory::ProbeOutcome> error = store.LastError();
  if (!error.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no inventory yet: the first probe of this host has not completed");
  }
  return ToGrpc(absl::UnavailableError(absl::StrCat("no inventory yet: the last probe of this host failed (",
                                                    absl::StatusCodeToString(error->status.code()), ": ",
                                                    error->status.message(), "); retrying with backoff")));
}

}  // namespace devplace::service
