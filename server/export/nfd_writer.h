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

// Opens `dir` as the daemon writes its feature file there: O_DIRECTORY | O_NOFOLLOW (a symbolic
// link is refused, not followed), then the rule of server/common/safe_directory.h applied to the
// opened directory, so the directory checked is the one written to. Returns the descriptor (the
// caller closes it) or FAILED_PRECONDITION / the errno's code with a message that names `dir`.
absl::StatusOr<int> OpenFeatureDirectory(const std::string& dir);

// The directory part of a feature-file path ("." when it has none).
std::string FeatureDirectory(const std::string& path);

// Decides when to write; not thread-safe (NfdPublisher serialises it).
//
// The directory is opened once (OpenFeatureDirectory), at construction or, while that fails, at
// the next Update; from then on every write goes into that directory through its descriptor, so
// replacing the directory's path (say, by a link to a directory only root may write) does not
// move where the daemon writes. Only a directory that was removed is opened again by its path.
class NfdFileWriter {
 public:
  // `expiry` > 0: the window each stamp covers.
  NfdFileWriter(std::string path, absl::Duration expiry);
  ~NfdFileWriter();
  NfdFileWriter(const NfdFileWriter&) = delete;
  NfdFileWriter& operator=(const NfdFileWriter&) = delete;

  // OK once the directory is open; otherwise why it could not be opened (as OpenFeatureDirectory).
  const absl::Status& directory_status() const { return directory_status_; }

  // Writes the file for `inventory` when its revision differs from the last one written, or when
  // `now` is at least half the window past the last write (a re-stamp). Returns whether it wrote;
  // a failed write returns the error and is retried on the next call.
  absl::StatusOr<bool> Update(const v1::Inventory& inventory, absl::Time now);

  // When the next re-stamp is due (InfiniteFuture before the first write).
  absl::Time NextRestamp() const;
  const std::string& path() const { return path_; }

 private:
  void OpenDirectory();
  absl::Status Write(absl::string_view text);

  const std::string path_;
  const absl::Duration expiry_;
  int dir_fd_ = -1;
  absl::Status directory_status_;
  std::optional<uint64_t> written_revision_;
  absl::Time written_at_ = absl::InfinitePast();
};

// The daemon's wiring: Publish() (called from the store's subscription, quick) hands the newest
// snapshot to a thread that runs NfdFileWriter::Update on each new snapshot and at each re-stamp.
// A failed write is retried after a back-off (1 s, doubling up to 1 min; a new snapshot tries at
// once) and never stops the thread. `on_error` hears of each failure once: not again while writes
// keep failing the same way, again when the error changes or after a write succeeded.
class NfdPublisher {
 public:
  NfdPublisher(std::string path, absl::Duration expiry, std::function<void(const absl::Status&)> on_error,
               std::function<void(uint64_t revision)> on_written = nullptr);
  // The writer's directory_status() as of construction: OK when the directory was opened.
  const absl::Status& directory_status() const { return directory_status_; }
  // Stops the thread (as Stop()).
  ~NfdPublisher();
  NfdPublisher(const NfdPublisher&) = delete;
  NfdPublisher& operator=(const NfdPublisher&) = delete;

  void Publish(std::shared_ptr<const v1::Inventory> snapshot);
  // Stops and joins the thread; idempotent. The file is left in place (it expires by itself).
  void Stop();

 private:
  void Loop();

  NfdFileWriter writer_;  // used by the thread only (after construction)
  const absl::Status directory_status_;
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
