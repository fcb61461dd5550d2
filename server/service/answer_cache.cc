#include "server/service/answer_cache.h"

#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/message_differencer.h"
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

bool SameAnswers(const v1::Inventory& a, const v1::Inventory& b) {
  google::protobuf::util::MessageDifferencer differencer;
  const google::protobuf::Descriptor* inventory = v1::Inventory::descriptor();
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kProbedAtFieldNumber));
  differencer.IgnoreField(inventory->FindFieldByNumber(v1::Inventory::kUsageReadAtFieldNumber));
  differencer.IgnoreField(v1::ProbeReport::descriptor()->FindFieldByNumber(v1::ProbeReport::kDurationMsFieldNumber));
  differencer.IgnoreField(v1::Device::descriptor()->FindFieldByNumber(v1::Device::kUsageFieldNumber));
  differencer.IgnoreField(v1::Partition::descriptor()->FindFieldByNumber(v1::Partition::kUsageFieldNumber));
  return differencer.Compare(a, b);
}

PreparedSnapshot::PreparedSnapshot(inventory::Snapshot snapshot, AnswerCacheLimits limits,
                                   const PreparedSnapshot* previous)
    : snapshot_(std::move(snapshot)),
      limits_(limits),
      inventory_bytes_(std::make_shared<const std::string>(snapshot_->SerializeAsString())),
      cache_(previous != nullptr ? previous->cache_ : std::make_shared<Cache>()) {}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::FindByWire(absl::string_view wire) const {
  if (limits_.max_entries == 0) return nullptr;
  absl::ReaderMutexLock lock(&cache_->mu);
  auto it = cache_->by_wire.find(wire);
  if (it == cache_->by_wire.end()) return nullptr;
  cache_->hits.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::Resolve(const v1::ResolveDeviceRequest& request,
                                                               absl::string_view wire) {
  std::shared_ptr<const ResolveAnswer> answer = Resolve(request);
  if (limits_.max_entries > 0 && wire.size() <= limits_.max_key_bytes) Remember(true, std::string(wire), answer);
  return answer;
}

std::shared_ptr<const ResolveAnswer> PreparedSnapshot::Resolve(const v1::ResolveDeviceRequest& request) {
  std::string key;
  const bool cacheable = limits_.max_entries > 0 && request.ByteSizeLong() <= limits_.max_key_bytes;
  if (cacheable) {
    key = CanonicalRequestKey(request);
    absl::ReaderMutexLock lock(&cache_->mu);
    if (auto it = cache_->answers.find(key); it != cache_->answers.end()) {
      cache_->hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  // A miss: several callers may resolve the same request at once; the resolver is pure, so
  // whichever answer lands in the cache equals the others.
  auto answer = std::make_shared<ResolveAnswer>();
  answer->status = placement::ResolveSerialized(*snapshot_, request, &answer->bytes, &answer->newer);
  if (cacheable) Remember(false, std::move(key), answer);
  return answer;
}

void PreparedSnapshot::Remember(bool by_wire, std::string key, const std::shared_ptr<const ResolveAnswer>& answer) {
  const size_t cost = key.size() + answer->bytes.size() + answer->status.message().size();
  if (cost > limits_.max_bytes / 4) return;  // served, but one answer must not crowd out the rest
  Cache& c = *cache_;
  absl::MutexLock lock(&c.mu);
  AnswerMap& map = by_wire ? c.by_wire : c.answers;
  if (map.contains(key)) return;
  if (map.size() >= limits_.max_entries || c.cached_bytes + cost > limits_.max_bytes) {
    // Full: start over. A storm of one request refills its entry at once; a stream of distinct
    // requests (which a cache cannot help) costs one resolve each, as without the cache.
    c.answers.clear();
    c.by_wire.clear();
    c.cached_bytes = 0;
  }
  c.cached_bytes += cost;
  map.emplace(std::move(key), answer);
}

size_t PreparedSnapshot::cached_answers() const {
  absl::ReaderMutexLock lock(&cache_->mu);
  return cache_->answers.size();
}

uint64_t PreparedSnapshot::hits() const { return cache_->hits.load(std::memory_order_relaxed); }

std::shared_ptr<PreparedSnapshot> PreparedSnapshots::Current() {
  inventory::Snapshot now = store_.Current();
  if (now == nullptr) return nullptr;
  {
    absl::ReaderMutexLock lock(&mu_);  // the common case: callers share it
    if (prepared_ != nullptr && prepared_->snapshot() == now) return prepared_;
  }
  // Serialize outside the lock; callers that race here each build one, and the one for the
  // snapshot that is still current stays. A snapshot that gives the same answers as the last one
  // (a usage refresh that moved nothing an answer shows) keeps its answers.
  std::shared_ptr<PreparedSnapshot> last;
  {
    absl::ReaderMutexLock lock(&mu_);
    last = prepared_;
  }
  const bool same = last != nullptr && SameAnswers(*last->snapshot(), *now);
  auto fresh = std::make_shared<PreparedSnapshot>(now, limits_, same ? last.get() : nullptr);
  absl::MutexLock lock(&mu_);
  if (prepared_ != nullptr && prepared_->snapshot() == now) return prepared_;
  if (store_.Current() == now) prepared_ = fresh;
  return fresh;
}

}  // namespace devplace::service
