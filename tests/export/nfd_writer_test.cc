// The NFD feature-file writer against real files: writes only on a new revision (and at the
// re-stamp half-way through the expiry window), atomically (a reader thread never sees a partial
// or empty file), reports errors and recovers, and the publisher thread keeps the file current.
#include "server/export/nfd_writer.h"

#include <sys/stat.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/common/atomic_file.h"
#include "server/export/labels.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

v1::Inventory Inventory(uint64_t revision, int gpus) {
  v1::Inventory inv;
  inv.set_revision(revision);
  inv.add_backends()->set_row(v1::ROW_CPU);
  v1::Backend* b = inv.add_backends();
  b->set_row(v1::ROW_CUDA_NVIDIA);
  b->set_name("cuda/nvidia");
  for (int i = 0; i < gpus; ++i) {
    v1::Device* d = b->add_devices();
    d->set_name("NVIDIA H100 80GB HBM3");
    d->set_usable(true);
  }
  return inv;
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);  // 2027-01-15T08:00:00Z

// The temp file is always new: a symlink planted at its name (features.d writable by someone
// else) is neither followed nor written through; the victim keeps its content.
TEST(WriteFileAtomicallyTest, APlantedSymlinkAtTheTempNameIsNotFollowed) {
  TempDir dir;
  const std::string victim = dir.File("victim"), path = dir.File("devplace");
  { std::ofstream(victim) << "precious\n"; }
  const std::string temp = absl::StrCat(dir.path(), "/.devplace.tmp-", getpid());
  ASSERT_EQ(symlink(victim.c_str(), temp.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "a=b\n").ok());
  EXPECT_EQ(ReadFile(victim), "precious\n");
  EXPECT_EQ(ReadFile(path), "a=b\n");
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(NfdFileWriterTest, WritesOnNewRevisionOnly) {
  TempDir dir;
  const std::string path = dir.File("devplace");
  labels::NfdFileWriter writer(path, absl::Minutes(10));
  ASSERT_EQ(writer.Update(Inventory(1, 2), kT0).value(), true);
  const std::string first = ReadFile(path);
  EXPECT_EQ(first, labels::FeatureFileText(Inventory(1, 2), kT0 + absl::Minutes(10)));
  const ino_t inode = Inode(path);
  // Same revision, before half the window: nothing written (same inode, same bytes).
  EXPECT_EQ(writer.Update(Inventory(1, 2), kT0 + absl::Minutes(4)).value(), false);
  EXPECT_EQ(Inode(path), inode);
  EXPECT_EQ(ReadFile(path), first);
  // A new revision is written at once.
  ASSERT_EQ(writer.Update(Inventory(2, 1), kT0 + absl::Minutes(4)).value(), true);
  EXPECT_NE(Inode(path), inode);
  EXPECT_TRUE(absl::StrContains(ReadFile(path), "cuda-nvidia.count=1\n"));
  EXPECT_TRUE(absl::StrContains(ReadFile(path), "# +expiry-time=2027-01-15T08:14:00Z\n"));
  // No temp file is left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(NfdFileWriterTest, RestampsWhenHalfTheWindowHasPassed) {
  TempDir dir;
  const std::string path = dir.File("devplace");
  labels::NfdFileWriter writer(path, absl::Minutes(10));
  ASSERT_TRUE(writer.Update(Inventory(7, 2), kT0).value());
  EXPECT_EQ(writer.NextRestamp(), kT0 + absl::Minutes(5));
  EXPECT_FALSE(writer.Update(Inventory(7, 2), kT0 + absl::Minutes(5) - absl::Seconds(1)).value());
  ASSERT_TRUE(writer.Update(Inventory(7, 2), kT0 + absl::Minutes(5)).value());
  // Same labels, later expiry: the file never expires while the writer keeps running.
  EXPECT_EQ(ReadFile(path), labels::FeatureFileText(Inventory(7, 2), kT0 + absl::Minutes(15)));
  EXPECT_EQ(writer.NextRestamp(), kT0 + absl::Minutes(10));
}

TEST(NfdFileWriterTest, WriteErrorIsReportedAndRetried) {
  TempDir dir;
  const std::string path = dir.File("gone/devplace");
  labels::NfdFileWriter writer(path, absl::Minutes(10));
  absl::StatusOr<bool> wrote = writer.Update(Inventory(1, 1), kT0);
  ASSERT_FALSE(wrote.ok());
  EXPECT_TRUE(absl::StrContains(wrote.status().message(), dir.File("gone"))) << wrote.status();
  EXPECT_EQ(writer.NextRestamp(), absl::InfiniteFuture());
  dir.Touch("gone/");
  EXPECT_TRUE(writer.Update(Inventory(1, 1), kT0).value()) << "the same revision is written once the error clears";
}

TEST(NfdFileWriterTest, ReaderNeverSeesAPartialFile) {
  TempDir dir;
  const std::string path = dir.File("devplace");
  labels::NfdFileWriter writer(path, absl::Minutes(10));
  // 200 revisions alternating between two label sets; every read must be exactly one of the
  // written texts (never empty, never a prefix of one).
  std::vector<std::string> texts;
  std::vector<v1::Inventory> invs;
  for (int r = 1; r <= 200; ++r) {
    invs.push_back(Inventory(r, r % 2 == 0 ? 1 : 9));
    texts.push_back(labels::FeatureFileText(invs.back(), kT0 + absl::Minutes(10)));
  }
  ASSERT_TRUE(writer.Update(invs[0], kT0).value());
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, bad{0};
  std::string bad_example;
  std::thread reader([&] {
    while (!done.load()) {
      const std::string got = ReadFile(path);
      ++reads;
      bool known = false;
      for (const std::string& t : texts) known |= got == t;
      if (!known && bad.fetch_add(1) == 0) bad_example = got;
    }
  });
  for (size_t i = 1; i < invs.size(); ++i) ASSERT_TRUE(writer.Update(invs[i], kT0).value());
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "partial or unknown content: '" << bad_example << "'";
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(ReadFile(path), texts.back());
}

TEST(NfdPublisherTest, WritesEachPublishedRevisionOnce) {
  TempDir dir;
  const std::string path = dir.File("devplace");
  std::vector<uint64_t> written;
  absl::Mutex mu;
  labels::NfdPublisher publisher(
      path, absl::Minutes(10), [](const absl::Status& s) { ADD_FAILURE() << s; },
      [&](uint64_t revision) {
        absl::MutexLock lock(&mu);
        written.push_back(revision);
      });
  publisher.Publish(std::make_shared<v1::Inventory>(Inventory(3, 2)));
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(+[](std::vector<uint64_t>* w) { return !w->empty(); }, &written),
                                    absl::Seconds(20)));
  }
  publisher.Publish(std::make_shared<v1::Inventory>(Inventory(3, 2)));  // same revision: not written
  publisher.Publish(std::make_shared<v1::Inventory>(Inventory(4, 1)));
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(+[](std::vector<uint64_t>* w) { return !w->empty() && w->back() == 4; }, &written),
        absl::Seconds(20)));
  }
  publisher.Stop();
  EXPECT_EQ(written, (std::vector<uint64_t>{3, 4}));
  EXPECT_TRUE(absl::StrContains(ReadFile(path), "cuda-nvidia.count=1\n"));
}

TEST(NfdPublisherTest, ErrorsGoToTheCallbackAndTheThreadKeepsRunning) {
  TempDir dir;
  std::atomic<int> errors{0};
  absl::Notification first_error;
  labels::NfdPublisher publisher(dir.File("missing/devplace"), absl::Minutes(10), [&](const absl::Status&) {
    if (errors.fetch_add(1) == 0) first_error.Notify();
  });
  publisher.Publish(std::make_shared<v1::Inventory>(Inventory(1, 1)));
  ASSERT_TRUE(first_error.WaitForNotificationWithTimeout(absl::Seconds(20)));
  publisher.Stop();  // returns although the writer keeps failing
  EXPECT_GE(errors.load(), 1);
}

// The directory is opened once: swapping its path for a link to another directory (say, one only
// root may write) afterwards does not move the file there; it keeps going to the directory opened.
TEST(NfdFileWriterTest, WritesIntoTheDirectoryItOpenedWhenItsPathIsSwappedForALink) {
  TempDir dir;
  dir.Touch("features.d/");
  dir.Touch("root-only/");
  labels::NfdFileWriter writer(dir.File("features.d/devplace"), absl::Minutes(10));
  ASSERT_TRUE(writer.Update(Inventory(1, 1), kT0).value());
  ASSERT_EQ(rename(dir.File("features.d").c_str(), dir.File("features.d.old").c_str()), 0);
  ASSERT_EQ(symlink(dir.File("root-only").c_str(), dir.File("features.d").c_str()), 0);
  ASSERT_TRUE(writer.Update(Inventory(2, 3), kT0).value());
  EXPECT_TRUE(std::filesystem::is_empty(dir.File("root-only")));
  EXPECT_TRUE(absl::StrContains(ReadFile(dir.File("features.d.old/devplace")), "cuda-nvidia.count=3\n"));
}

// The directory rule of server/common/safe_directory.h, on the opened directory: others' write
// access without the sticky bit and a link are refused; the sticky bit makes it safe.
TEST(NfdFileWriterTest, RefusesADirectoryOthersCouldSwap) {
  TempDir dir;
  dir.Touch("open/");
  ASSERT_EQ(chmod(dir.File("open").c_str(), 0777), 0);
  labels::NfdFileWriter open_dir(dir.File("open/devplace"), absl::Minutes(10));
  EXPECT_EQ(open_dir.directory_status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(open_dir.directory_status().message(),
            absl::StrCat("directory ", dir.File("open"),
                         " is writable by group or others without the sticky bit (mode 0777): another user could "
                         "replace the feature file or the directory, and choose what is written where"));
  absl::StatusOr<bool> wrote = open_dir.Update(Inventory(1, 1), kT0);
  EXPECT_FALSE(wrote.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File("open/devplace")));

  ASSERT_EQ(symlink(dir.path().c_str(), dir.File("link").c_str()), 0);
  labels::NfdFileWriter link(dir.File("link/devplace"), absl::Minutes(10));
  EXPECT_EQ(link.directory_status().message(),
            absl::StrCat("directory ", dir.File("link"),
                         " is a symbolic link: name the directory itself (a link could be re-pointed)"));

  ASSERT_EQ(chmod(dir.File("open").c_str(), 01777), 0);
  labels::NfdFileWriter sticky(dir.File("open/devplace"), absl::Minutes(10));
  EXPECT_TRUE(sticky.directory_status().ok()) << sticky.directory_status();
  EXPECT_TRUE(sticky.Update(Inventory(1, 1), kT0).value());
}

// A re-stamp that keeps failing (the directory removed) is retried with back-off and reported
// once, not in a loop (it once logged ~18,000 lines a second); a re-created directory is written
// again.
TEST(NfdPublisherTest, AFailingRestampBacksOffIsReportedOnceAndRecovers) {
  TempDir dir;
  dir.Touch("features.d/");
  std::atomic<int> errors{0}, writes{0};
  // A 200 ms window: a re-stamp every 100 ms.
  labels::NfdPublisher publisher(
      dir.File("features.d/devplace"), absl::Milliseconds(200), [&](const absl::Status&) { ++errors; },
      [&](uint64_t) { ++writes; });
  publisher.Publish(std::make_shared<v1::Inventory>(Inventory(1, 1)));
  for (int i = 0; i < 200 && writes.load() < 3; ++i) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_GE(writes.load(), 3) << "re-stamps every 100 ms";
  std::filesystem::remove_all(dir.File("features.d"));
  constexpr absl::Duration kWatch = absl::Milliseconds(2500);
  absl::SleepFor(kWatch);
  const int failures = errors.load();
  std::cout << "failure reports in " << kWatch << " of failing re-stamps: " << failures << "\n";
  EXPECT_EQ(failures, 1);
  const int before = writes.load();
  dir.Touch("features.d/");
  for (int i = 0; i < 200 && writes.load() == before; ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_GT(writes.load(), before) << "written again once the directory is back (within the back-off)";
  EXPECT_TRUE(std::filesystem::exists(dir.File("features.d/devplace")));
  publisher.Stop();
}

}  // namespace
}  // namespace devplace::testing
