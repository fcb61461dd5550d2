// Keeps an NFD local feature file (features.d) current for devplaced's --nfd_features_file.
//
// The file is rewritten atomically (a temp file in the same directory, fsync, rename, fsync of the
// directory) when the inventory revision changes, and never for an unchanged revision, with one
// exception: the NFD expiry header. Each write stamps "# +expiry-time=" at now + `expiry`; when
// half of that window has passed without a new revision, the same labels are written again with a
// fresh stamp. While devplaced runs, NFD therefore never sees an expired file; when it dies, the
// labels expire within `expiry`.
#ifndef DEVPLACE_SERVER_EXPORT_NFD_WRITER_H_
#define DEVPLACE_SERVER_EXPORT_NFD_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace::labels {

// Writes `content` to `path` atomically: "<dir>/.<name>.tmp-<pid>" (NFD ignores dot files),
// fsync, rename over `path`, fsync of the directory. Readers see the old or the new file, never a
// partial one. Errors: the errno-derived status of the failing step, message naming the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view content);

// Decides when to write; not thread-safe (NfdPublisher serialises it).
class NfdFileWriter {
 public:
  // `expiry` > 0: the window each stamp covers.
  NfdFileWriter(std::string path, absl::Duration expiry);

  // Writes the file for `inventory` when its revision differs from the last one written, or when
  // `now` is at least half the window past the last write (a re-stamp). Returns whether it wrote;
  // a failed write returns the error and is retried on the next call.
  absl::StatusOr<bool> Update(const v1::Inventory& inventory, absl::Time now);

  // When the next re-stamp is due (InfiniteFuture before the first write).
  absl::Time NextRestamp() const;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const absl::Duration expiry_;
  std::optional<uint64_t> written_revision_;
  absl::Time written_at_ = absl::InfinitePast();
};

// The daemon's wiring: Publish() (called from the store's subscription, quick) hands the newest
// snapshot to a thread that runs NfdFileWriter::Update on each new snapshot and at each re-stamp.
// Write errors go to `on_error` and are retried at the next snapshot or re-stamp; they never stop
// the thread.
class NfdPublisher {
 public:
  NfdPublisher(std::string path, absl::Duration expiry, std::function<void(const absl::Status&)> on_error,
               std::function<void(uint64_t revision)> on_written = nullptr);
  // Stops the thread (as Stop()).
  ~NfdPublisher();
  NfdPublisher(const NfdPublisher&) = delete;
  NfdPublisher& operator=(const NfdPublisher&) = delete;

  void Publish(std::shared_ptr<const v1::Inventory> snapshot);
  // Stops and joins the thread; idempotent. The file is left in place (it expires by itself).
  void Stop();

 private:
  void Loop();

  NfdFileWriter writer_;  // used by the thread only
  const std::function<void(const absl::Status&)> on_error_;
  const std::function<void(uint64_t)> on_written_;
  absl::Mutex mu_;
  std::shared_ptr<const v1::Inventory> latest_ ABSL_GUARDED_BY(mu_);
  bool fresh_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace devplace::labels

#endif  // DEVPLACE_SERVER_EXPORT_NFD_WRITER_H_
