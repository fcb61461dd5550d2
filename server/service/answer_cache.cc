#include "server/service/answer_cache.h"

#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/placement/resolver.h"

namespace devplace::service {

std::string CanonicalRequestKey(const v1::ResolveDeviceRequest& request) {
  std::string key;
  key.reserve(request.ByteSizeLong());
  {
    google::protobuf::io::StringOutputStream stream(&key);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&out);
  }
  return key;
}

PreparedSnapshot::PreparedSnapshot(inventory::Snapshot snapshot, AnswerCacheLimits limits)
    : snapshot_(std::move(snapshot)),
      limits_(limits),
      inventory_bytes_(std::make_shared<const std::string>(snapshot_->SerializeAsString())) {}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::FindByWire(absl::string_view wire) const {
  if (limits_.max_entries == 0) return nullptr;
  absl::ReaderMutexLock lock(&mu_);
  auto it = by_wire_.find(wire);
  if (it == by_wire_.end()) return nullptr;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::Resolve(const v1::ResolveDeviceRequest& request,
                                                               absl::string_view wire) {
  std::shared_ptr<const ResolveAnswer> answer = Resolve(request);
  if (limits_.max_entries > 0 && wire.size() <= limits_.max_key_bytes) {
    Remember(KeyKind::kWire, std::string(wire), answer);
  }
  return answer;
}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::Resolve(const v1::ResolveDeviceRequest& request) {
  std::string key;
  const bool cacheable = limits_.max_entries > 0 && request.ByteSizeLong() <= limits_.max_key_bytes;
  if (cacheable) {
    key = CanonicalRequestKey(request);
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = answers_.find(key); it != answers_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  // A miss: several callers may resolve the same request at once; the resolver is pure, so
  // whichever answer lands in the cache equals the others.
  auto answer = std::make_shared<ResolveAnswer>();
  answer->status = placement::ResolveSerialized(*snapshot_, request, &answer->bytes, &answer->newer);
  if (cacheable) Remember(KeyKind::kCanonical, std::move(key), answer);
  return answer;
}

void PreparedSnapshot::Remember(KeyKind kind, std::string key, const std::shared_ptr<const ResolveAnswer>& answer) {
  const size_t cost = key.size() + answer->bytes.size() + answer->status.message().size();
  if (cost > limits_.max_bytes / 4) return;  // served, but one answer must not crowd out the rest
  absl::MutexLock lock(&mu_);
  AnswerMap& map = kind == KeyKind::kWire ? by_wire_ : answers_;
  if (map.contains(key)) return;
  if (map.size() >= limits_.max_entries || cached_bytes_ + cost > limits_.max_bytes) {
    // Full: start over. A storm of one request refills its entry at once; a stream of distinct
    // requests (which a cache cannot help) costs one resolve each, as without the cache.
    answers_.clear();
    by_wire_.clear();
    cached_bytes_ = 0;
  }
  cached_bytes_ += cost;
  map.emplace(std::move(key), answer);
}

size_t PreparedSnapshot::cached_answers() const {
  absl::ReaderMutexLock lock(&mu_);
  return answers_.size();
}

uint64_t PreparedSnapshot::hits() const { return hits_.load(std::memory_order_relaxed); }

std::shared_ptr<PreparedSnapshot> PreparedSnapshots::Current() {
  inventory::Snapshot now = store_.Current();
  if (now == nullptr) return nullptr;
  {
    absl::ReaderMutexLock lock(&mu_);  // the common case: callers share it
    if (prepared_ != nullptr && prepared_->snapshot() == now) return prepared_;
  }
  // Serialize outside the lock; callers that race here each build one, and the one for the
  // snapshot that is still current stays.
  auto fresh = std::make_shared<PreparedSnapshot>(now, limits_);
  absl::MutexLock lock(&mu_);
  if (prepared_ != nullptr && prepared_->snapshot() == now) return prepared_;
  if (store_.Current() == now) prepared_ = fresh;
  return fresh;
}

}  // namespace devplace::service
