// The lease file's writer and reader (lease_file.h) on real files: what is written is read back,
// a file cut at any length or damaged at any byte is a warning or whole leases (never a crash), the
// size limit to the byte, a failed write keeps the old table, and a file an older devplaced wrote
// (tests/fixtures/lease_state) is read and, restored, written back byte for byte as it wrote it.
// Also the table's use of a file that is not its own (LeaseTable::Restore).
#include "server/service/lease_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/lease_state.pb.h"
#include "server/service/lease_table.h"
#include "tests/common/temp_dir.h"
#include "tests/service/lease_testing.h"

namespace devplace::testing {
namespace {

// What this daemon writes after the fields an older one wrote: LeaseState.boot_id (field 3, so
// serialized last).
std::string BootIdField() {
  service::state::LeaseState boot;
  boot.set_boot_id(service::CurrentBootId());
  return boot.SerializeAsString();
}

using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using service::LeaseFileContents;
using service::LeaseFileWriter;
using service::LeaseTable;
using service::ReadLeaseFile;
using service::RestoreReport;
using service::state::HeldLease;

constexpr char kFixtures[] = DEVPLACE_FIXTURES_DIR "/lease_state";

HeldLease Held(const std::string& id, int64_t created_seconds, v1::LeaseHolder kind = v1::LEASE_HOLDER_TTL) {
  HeldLease held;
  v1::LeaseInfo& info = *held.mutable_info();
  info.set_lease_id(id);
  info.set_holder(kind);
  info.add_devices()->set_pci_bus_id(absl::StrCat("0000:", id.substr(0, 2), ":00.0"));
  info.mutable_created_at()->set_seconds(created_seconds);
  if (kind == v1::LEASE_HOLDER_TTL) {
    info.mutable_expires_at()->set_seconds(created_seconds + 300);
  } else {
    info.set_pid(4321);
    held.set_start_time(123456);
    held.set_process_uid(1000);
  }
  return held;
}

std::vector<std::string> Ids(const LeaseFileContents& contents) {
  std::vector<std::string> ids;
  for (const HeldLease& held : contents.leases) ids.push_back(held.info().lease_id());
  return ids;
}

// `bytes` as the daemon's own file would be: written to `name` in `dir`, mode 0600.
std::string OwnFile(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.Write(name, bytes);
  chmod(path.c_str(), 0600);
  return path;
}

TEST(LeaseFile, WhatTheWriterWritesTheReaderReadsOldestFirst) {
  TempDir dir;
  const LeaseFileWriter writer(dir.File("leases.state"));
  // Created out of order; "bb" and "cc" at the same time keep the file's order.
  const std::vector<HeldLease> leases = {Held("dd", 300), Held("bb", 100, v1::LEASE_HOLDER_PROCESS), Held("cc", 100),
                                         Held("aa", 200, v1::LEASE_HOLDER_PROCESS_GROUP)};
  ASSERT_TRUE(writer.Write(leases).ok());
  struct stat st {};
  ASSERT_EQ(stat(writer.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  const LeaseFileContents read = ReadLeaseFile(writer.path());
  EXPECT_TRUE(read.report.found);
  EXPECT_EQ(read.report.warning, "");
  EXPECT_EQ(read.report.kept, 0u);  // the table's to count
  EXPECT_THAT(Ids(read), ElementsAre("bb", "cc", "aa", "dd"));
  for (const HeldLease& held : read.leases) {
    const auto same = std::find_if(leases.begin(), leases.end(), [&](const HeldLease& h) {
      return h.info().lease_id() == held.info().lease_id();
    });
    ASSERT_NE(same, leases.end());
    EXPECT_EQ(held.SerializeAsString(), same->SerializeAsString()) << held.info().lease_id();
  }
  // The whole table is replaced: an empty one is a file of version 1 with no lease.
  ASSERT_TRUE(writer.Write({}).ok());
  const LeaseFileContents empty = ReadLeaseFile(writer.path());
  EXPECT_TRUE(empty.report.found);
  EXPECT_EQ(empty.report.warning, "");
  EXPECT_TRUE(empty.leases.empty());
  service::state::LeaseState raw;
  ASSERT_TRUE(raw.ParseFromString(ReadFile(writer.path())));
  EXPECT_EQ(raw.version(), service::kLeaseFileVersion);
  // A missing file is no warning.
  const LeaseFileContents missing = ReadLeaseFile(dir.File("none"));
  EXPECT_FALSE(missing.report.found);
  EXPECT_EQ(missing.report.warning, "");
}

// WriteFileAtomically writes through "<dir>/.<name>.tmp-<pid>": a directory there makes the write
// fail, and the file keeps the table it held.
TEST(LeaseFile, AWriteThatFailsKeepsTheTableTheFileHeld) {
  TempDir dir;
  const LeaseFileWriter writer(dir.File("leases.state"));
  ASSERT_TRUE(writer.Write({Held("aa", 100)}).ok());
  const std::string before = ReadFile(writer.path());
  dir.Touch(absl::StrCat(".leases.state.tmp-", getpid(), "/"));
  const absl::Status failed = writer.Write({Held("aa", 100), Held("bb", 200)});
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr(dir.path()));
  EXPECT_EQ(ReadFile(writer.path()), before);
  EXPECT_THAT(Ids(ReadLeaseFile(writer.path())), ElementsAre("aa"));
}

// The file's directory must be the daemon's own: one others may write, sticky or not, is neither
// written (another user could have made leases.state a directory, or could replace it) nor read.
TEST(LeaseFile, ADirectoryOthersMayWriteIsNeitherWrittenNorReadStickyOrNot) {
  for (const mode_t mode : {01777, 0777, 0775}) {
    TempDir dir;
    const LeaseFileWriter writer(dir.File("shared/leases.state"));
    dir.Touch("shared/");
    ASSERT_TRUE(writer.Write({Held("aa", 100)}).ok());
    ASSERT_EQ(chmod(dir.File("shared").c_str(), mode), 0);
    const absl::Status refused = writer.Write({Held("aa", 100), Held("bb", 200)});
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("directory ", dir.File("shared"), " is writable by group or "
                                                          "others")));
    EXPECT_THAT(refused.message(), HasSubstr("another user could create or replace the lease table"));
    const LeaseFileContents read = ReadLeaseFile(writer.path());
    EXPECT_THAT(read.report.warning, HasSubstr("is writable by group or others"));
    EXPECT_TRUE(read.leases.empty());
  }
}

// Temporary files of writes whose process was killed between create and rename are removed, this
// process's own name, other names and what is not a regular file are left.
TEST(LeaseFile, TemporaryFilesOfKilledWritersAreRemoved) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  for (const std::string name : {".leases.state.tmp-1", ".leases.state.tmp-99999", ".leases.state.tmp-", ".leases.state.tmp-1x",
                                 ".other.tmp-1", "leases.state"}) {
    dir.Write(name, "x");
  }
  dir.Touch(".leases.state.tmp-7/");
  std::vector<std::string> removed = service::RemoveLeaseTemporaryFiles(file);
  std::sort(removed.begin(), removed.end());
  EXPECT_THAT(removed, ElementsAre(".leases.state.tmp-1", ".leases.state.tmp-99999"));
  for (const char* kept : {".leases.state.tmp-", ".leases.state.tmp-1x", ".other.tmp-1", "leases.state",
                           ".leases.state.tmp-7"}) {
    EXPECT_EQ(access(dir.File(kept).c_str(), F_OK), 0) << kept;
  }
  // In a directory others may write nothing is trusted, so nothing is removed.
  dir.Write(".leases.state.tmp-2", "x");
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  EXPECT_TRUE(service::RemoveLeaseTemporaryFiles(file).empty());
  EXPECT_EQ(access(dir.File(".leases.state.tmp-2").c_str(), F_OK), 0);
  chmod(dir.path().c_str(), 0700);
}

// A file cut short (a disk that lost its tail; WriteFileAtomically makes it unlikely) is never a
// crash: it no longer parses (a warning, no lease) or it ends between two leases (the leases before
// the cut, each whole).
TEST(LeaseFile, AFileCutAtAnyLengthIsAWarningOrWholeLeases) {
  TempDir dir;
  const LeaseFileWriter writer(dir.File("written.state"));
  const std::vector<HeldLease> leases = {Held("aa", 100), Held("bb", 200, v1::LEASE_HOLDER_PROCESS), Held("cc", 300)};
  ASSERT_TRUE(writer.Write(leases).ok());
  const std::string whole = ReadFile(writer.path());
  int warned = 0, partial = 0;
  for (size_t length = 0; length < whole.size(); ++length) {
    const LeaseFileContents read = ReadLeaseFile(OwnFile(dir, "cut.state", whole.substr(0, length)));
    if (!read.report.warning.empty()) {
      ++warned;
      EXPECT_THAT(read.report.warning, HasSubstr("; starting with no leases")) << length;
      EXPECT_TRUE(read.leases.empty()) << length;
      continue;
    }
    ++partial;
    // Cut right before the boot id (the last field): every lease, read as an older daemon's file.
    ASSERT_TRUE(read.leases.size() < leases.size() || (read.leases.size() == leases.size() && read.boot_id.empty()))
        << length;
    for (size_t i = 0; i < read.leases.size(); ++i) {
      EXPECT_EQ(read.leases[i].SerializeAsString(), leases[i].SerializeAsString()) << length;
    }
  }
  EXPECT_GT(warned, 0);
  EXPECT_GT(partial, 0);
  // Nothing at all (a file created, never written) has version 0.
  EXPECT_THAT(ReadLeaseFile(OwnFile(dir, "cut.state", "")).report.warning,
              HasSubstr("has lease table version 0, this devplaced reads version 1"));
}

// Every byte damaged in turn: a warning or leases, never a crash.
TEST(LeaseFile, ADamagedByteAnywhereIsNeverACrash) {
  TempDir dir;
  const LeaseFileWriter writer(dir.File("written.state"));
  ASSERT_TRUE(writer.Write({Held("aa", 100), Held("bb", 200, v1::LEASE_HOLDER_PROCESS)}).ok());
  const std::string whole = ReadFile(writer.path());
  int warned = 0;
  for (size_t at = 0; at < whole.size(); ++at) {
    std::string damaged = whole;
    damaged[at] = static_cast<char>(damaged[at] ^ 0xff);
    const LeaseFileContents read = ReadLeaseFile(OwnFile(dir, "damaged.state", damaged));
    if (!read.report.warning.empty()) {
      ++warned;
      EXPECT_TRUE(read.leases.empty()) << at;
    }
  }
  EXPECT_GT(warned, 0);
}

// kMaxLeaseFileBytes to the byte: a valid file of exactly that size (its padding an unknown field,
// which proto3 keeps and the daemon ignores) is read; one byte more is refused unread.
TEST(LeaseFile, AFileOfTheSizeLimitIsReadOneByteMoreIsRefused) {
  TempDir dir;
  const LeaseFileWriter writer(dir.File("written.state"));
  ASSERT_TRUE(writer.Write({Held("aa", 100)}).ok());
  const std::string base = ReadFile(writer.path());
  // Field 15, length-delimited (tag 0x7a), with a 4-byte varint length.
  const size_t padding = service::kMaxLeaseFileBytes - base.size() - 5;
  ASSERT_GE(padding, size_t{1} << 21);
  ASSERT_LT(padding, size_t{1} << 28);
  std::string file = base + '\x7a';
  for (size_t n = padding, i = 0; i < 4; ++i, n >>= 7) file += static_cast<char>((n & 0x7f) | (i < 3 ? 0x80 : 0));
  file += std::string(padding, 'x');
  ASSERT_EQ(file.size(), service::kMaxLeaseFileBytes);
  const LeaseFileContents at_limit = ReadLeaseFile(OwnFile(dir, "leases.state", file));
  EXPECT_EQ(at_limit.report.warning, "");
  EXPECT_THAT(Ids(at_limit), ElementsAre("aa"));
  const LeaseFileContents over = ReadLeaseFile(OwnFile(dir, "leases.state", file + 'x'));
  EXPECT_THAT(over.report.warning, HasSubstr("is larger than"));
  EXPECT_TRUE(over.report.found);
  EXPECT_TRUE(over.leases.empty());
}

// A daemon upgraded in place reads the file the older one wrote (leases-v1.state: two TTL leases
// and the lease of a process that has since ended), and what it writes back is byte for byte what
// the older daemon wrote after the same restore (leases-v1-kept.state).
TEST(LeaseFile, AFileAnOlderDaemonWroteIsRestoredAndWrittenBackAsItWroteIt) {
  TempDir dir;
  const std::string old_file = ReadFile(absl::StrCat(kFixtures, "/leases-v1.state"));
  const std::string old_kept = ReadFile(absl::StrCat(kFixtures, "/leases-v1-kept.state"));
  ASSERT_FALSE(old_file.empty());
  ASSERT_FALSE(old_kept.empty());
  const LeaseFileContents read = ReadLeaseFile(OwnFile(dir, "leases.state", old_file));
  EXPECT_EQ(read.report.warning, "");
  ASSERT_THAT(Ids(read), ElementsAre("cd141542ba202461db6c12f9dac055dd", "e49c63fbf21b635792386bb5fd7d15e6",
                                     "61c8db73bd6b64c46c072fc47479c154"));
  const v1::LeaseInfo& owned = read.leases[0].info();
  EXPECT_EQ(owned.holder(), v1::LEASE_HOLDER_TTL);
  EXPECT_EQ(owned.uid(), 1000u);
  EXPECT_EQ(owned.devices_size(), 1);
  EXPECT_EQ(owned.expires_at().seconds(), 4950161927);
  const HeldLease& process = read.leases[1];
  EXPECT_EQ(process.info().holder(), v1::LEASE_HOLDER_PROCESS);
  EXPECT_EQ(process.info().pid(), 29498u);
  EXPECT_EQ(process.start_time(), 269379u);
  EXPECT_EQ(read.leases[2].info().devices_size(), 2);
  EXPECT_FALSE(read.leases[2].info().has_uid());
  // Written back in the table's order (by lease id), the leases are the same bytes; this daemon
  // adds the boot it wrote them in.
  std::vector<HeldLease> by_id = read.leases;
  std::sort(by_id.begin(), by_id.end(),
            [](const HeldLease& a, const HeldLease& b) { return a.info().lease_id() < b.info().lease_id(); });
  const LeaseFileWriter writer(dir.File("rewritten.state"));
  ASSERT_TRUE(writer.Write(by_id).ok());
  EXPECT_EQ(ReadFile(writer.path()), old_file + BootIdField());
  // Restored by the table: the TTL leases are kept, the process lease is dropped (its pid has
  // exited, or is another process by now), and the file is rewritten as the older daemon did, with
  // the boot id.
  LeaseTable table;
  const RestoreReport report = table.Restore(dir.File("leases.state"));
  EXPECT_EQ(report.warning, "");
  EXPECT_EQ(report.kept, 2u);
  ASSERT_EQ(report.dropped.size(), 1u);
  EXPECT_THAT(report.dropped[0], AnyOf(HasSubstr("its holder, pid 29498, has exited"),
                                       HasSubstr("pid 29498 is another process now")));
  EXPECT_EQ(ReadFile(dir.File("leases.state")), old_kept + BootIdField());
  EXPECT_TRUE(table.Release("cd141542ba202461db6c12f9dac055dd", service::LeaseCaller{1000}).ok());
}

// A file that is not the daemon's own lease table is a warning and an empty table, never a crash,
// and is replaced by the daemon's own.
TEST(LeaseTableFile, ACorruptOrForeignFileIsAWarningAndAnEmptyTable) {
  TempDir dir;
  const std::string file = dir.File("leases.state");
  const auto restore = [&]() {
    LeaseTable table;
    RestoreReport report = table.Restore(file);
    EXPECT_EQ(table.size(), 0u);
    const placement::PickOutcome both = table.PickAndHold(TwoGpus(), Request(2), TtlHolder(absl::Minutes(1)));
    EXPECT_TRUE(both.status.ok()) << both.status;  // both devices free: nothing of the file was kept
    EXPECT_TRUE(table.Release(both.response.lease().lease_id()).ok());
    return report;
  };
  dir.Write("leases.state", std::string("\xff\xff\xff\xff garbage", 13));
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("is not a lease table (corrupt or another format); starting with no leases"));
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);  // rewritten: the daemon's own now
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(restore().warning, "");

  chmod(file.c_str(), 0622);
  EXPECT_THAT(restore().warning, HasSubstr("is writable by group or others (mode 0622)"));

  service::state::LeaseState newer;
  newer.set_version(2);
  dir.Write("leases.state", newer.SerializeAsString());
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("has lease table version 2, this devplaced reads version 1"));

  unlink(file.c_str());
  ASSERT_EQ(symlink(dir.File("elsewhere").c_str(), file.c_str()), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is a symbolic link"));

  unlink(file.c_str());
  ASSERT_EQ(mkfifo(file.c_str(), 0600), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is not a regular file"));

  unlink(file.c_str());
  dir.Write("leases.state", std::string((size_t{16} << 20) + 1, 'x'));
  chmod(file.c_str(), 0600);
  EXPECT_THAT(restore().warning, HasSubstr("is larger than"));

  if (geteuid() != 0) GTEST_SKIP() << "a file of another user needs root to make (chown)";
  dir.Write("leases.state", "");
  chmod(file.c_str(), 0600);
  ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0);
  EXPECT_THAT(restore().warning, HasSubstr("is owned by uid 65534, not by devplaced's uid 0"));
}

}  // namespace
}  // namespace devplace::testing
