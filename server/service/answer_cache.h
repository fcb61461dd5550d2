// Prebuilt answers for one published inventory snapshot: the serialized Inventory that
// GetInventory serves, and a bounded cache of ResolveDevice answers keyed by the canonical request
// bytes, for the pod-startup storm where hundreds of identical requests arrive at once.
//
// Correctness rests on two facts: the resolver is a pure function of (snapshot, request), and the
// answers of a PreparedSnapshot are shared only between snapshots that are equal in everything the
// resolver reads (SameAnswers). The store publishes a new object for every probe and every usage
// refresh (every 2 s by default); a usage refresh changes only what no answer shows (when usage was
// read, the usage table: processes and the memory they use) unless free memory or the processes
// changed, so its snapshot keeps the previous answers. Free memory is not such a field: answers
// show it (placed[].memory_free_bytes) and budget with it (max_memory, rule I-MEM), so a refresh
// that moves it starts an empty cache, as does any new revision (answers carry
// inventory_revision). No gRPC here: the service wraps the bytes into slices without copying.
#ifndef DEVPLACE_SERVER_SERVICE_ANSWER_CACHE_H_
#define DEVPLACE_SERVER_SERVICE_ANSWER_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "devplace/v1/devplace.pb.h"
#include "server/inventory/store.h"
#include "server/placement/resolver.h"

namespace devplace::service {

struct AnswerCacheLimits {
  // Most cached answers per snapshot under each kind of key, canonical request and wire bytes (so
  // up to twice this many map entries; 0 = no caching: every call runs the resolver).
  size_t max_entries = 1024;
  // Most bytes (keys plus serialized answers plus messages) cached per snapshot. An answer whose
  // key and bytes alone exceed a quarter of this is served but not cached.
  size_t max_bytes = size_t{8} << 20;
  // Requests whose bytes exceed this are answered but never cached: a job's request is a few
  // hundred bytes, and a big (usually invalid) one would otherwise take a large share of
  // max_bytes, once by its bytes and once by its canonical key, and empty the cache for everyone.
  size_t max_key_bytes = size_t{16} << 10;
};

// One ResolveDevice outcome: the resolver's status and, when OK, the serialized
// ResolveDeviceResponse and the libraries it answered with older rules than the job's (V-SKEW),
// so that a cached repeat is counted without parsing the answer.
struct ResolveAnswer {
  absl::Status status;
  std::string bytes;
  std::vector<placement::NewerLibrary> newer;
};

// The canonical form of a request: its deterministic serialization (map entries in key order,
// unknown fields kept), so two clients that send the same request with `env` in a different order
// share one cache entry.
std::string CanonicalRequestKey(const v1::ResolveDeviceRequest& request);

// Whether every ResolveDevice answer against `a` equals the one against `b`: the two are equal in
// every field but the ones the resolver (server/placement) never reads: `probed_at`,
// `usage_read_at`, the probe reports' `duration_ms`, `Device.usage` and `Partition.usage`.
// Revision, free memory (Device/Partition.memory_free_bytes) and host RAM
// (Host.memory_available_bytes) all appear in answers, so they must be equal.
bool SameAnswers(const v1::Inventory& a, const v1::Inventory& b);

// Thread-safe; immutable apart from the answer cache.
class PreparedSnapshot {
 public:
  // Serializes `snapshot` (not null) once. With `previous` (whose snapshot must give the same
  // answers: SameAnswers), its answer cache is shared instead of starting an empty one.
  PreparedSnapshot(inventory::Snapshot snapshot, AnswerCacheLimits limits,
                   const PreparedSnapshot* previous = nullptr);

  const inventory::Snapshot& snapshot() const { return snapshot_; }
  // The serialized Inventory: exactly what GetInventory returns for this snapshot.
  const std::shared_ptr<const std::string>& inventory_bytes() const { return inventory_bytes_; }

  // The answer to `request` against this snapshot: placement::Resolve's status and serialized
  // response, from the cache when an equal request (same CanonicalRequestKey) was answered before.
  // Never fails itself; the resolver's errors (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) come back
  // in ResolveAnswer::status and are cached like answers (the resolver is pure).
  std::shared_ptr<const ResolveAnswer> Resolve(const v1::ResolveDeviceRequest& request);

  // The same, and the answer is also remembered under `wire`, the request's bytes exactly as they
  // arrived (they parsed as `request`), for FindByWire.
  std::shared_ptr<const ResolveAnswer> Resolve(const v1::ResolveDeviceRequest& request, absl::string_view wire);

  // The answer cached for a request that arrived as exactly these bytes before, or null. A job (or
  // a storm of identical pods) repeats the same bytes, so a hit costs one hash of the bytes: no
  // parse and no canonical serialization. Null when the cache is off.
  std::shared_ptr<const ResolveAnswer> FindByWire(absl::string_view wire) const;

  // Answers cached now (by canonical request), and how many calls were served from the cache so far
  // (Resolve hits and FindByWire hits), counted over every snapshot that shared this cache.
  size_t cached_answers() const;
  uint64_t hits() const;

 private:
  using AnswerMap = absl::flat_hash_map<std::string, std::shared_ptr<const ResolveAnswer>>;
  // The answers, shared by consecutive snapshots that give the same answers.
  struct Cache {
    mutable absl::Mutex mu;
    AnswerMap answers ABSL_GUARDED_BY(mu);
    // The same answers by wire bytes; counted in the same byte budget and emptied with answers.
    AnswerMap by_wire ABSL_GUARDED_BY(mu);
    size_t cached_bytes ABSL_GUARDED_BY(mu) = 0;
    mutable std::atomic<uint64_t> hits{0};
  };
  // Caches `answer` under `key` in the answers (by_wire false) or the wire map unless it would
  // take over a quarter of max_bytes; empties both maps first when that map holds max_entries or
  // the bytes would pass max_bytes. Takes the cache's lock.
  void Remember(bool by_wire, std::string key, const std::shared_ptr<const ResolveAnswer>& answer);

  const inventory::Snapshot snapshot_;
  const AnswerCacheLimits limits_;
  const std::shared_ptr<const std::string> inventory_bytes_;
  const std::shared_ptr<Cache> cache_;
};

// Hands out the PreparedSnapshot of the store's current snapshot, building it when the store
// published a new snapshot object since the last call. Thread-safe.
class PreparedSnapshots {
 public:
  // `store` must outlive this.
  PreparedSnapshots(inventory::InventoryStore& store, AnswerCacheLimits limits) : store_(store), limits_(limits) {}
  // Null before the store has a snapshot.
  std::shared_ptr<PreparedSnapshot> Current();

 private:
  inventory::InventoryStore& store_;
  const AnswerCacheLimits limits_;
  absl::Mutex mu_;
  std::shared_ptr<PreparedSnapshot> prepared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_ANSWER_CACHE_H_
