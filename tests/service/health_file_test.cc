// devplaced's health file (health_file.h) on real files: what is written is read back with mode
// 0600; a missing or empty file is nothing kept and no warning; a file that cannot be used (not a health
// state, another version, too large, writable by others) is a warning naming it, never a crash.
#include "server/service/health_file.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/lease_file.h"
#include "server/service/lease_state.pb.h"
#include "tests/common/temp_dir.h"

namespace devplace::testing {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

v1::Inventory Readings() {
  v1::Inventory inv;
  inv.mutable_probed_at()->set_seconds(1796612400);
  v1::Backend& b = *inv.add_backends();
  b.set_row(v1::ROW_CUDA_NVIDIA);
  v1::Device& d = *b.add_devices();
  d.set_pci_bus_id("0000:18:00.0");
  d.set_uuid("GPU-00000000-0000-4000-8000-000000000001");
  v1::HealthCounter& c = *d.add_health_counters();
  c.set_name("ecc.errors.uncorrected.volatile.total");
  c.set_value("1");
  c.set_effect(v1::HEALTH_FAULT);
  return inv;
}

TEST(HealthFile, WhatIsWrittenIsReadBackAndAMissingFileIsNoWarning) {
  TempDir dir;
  const std::string path = service::HealthFileBeside(dir.path() + "/leases.state");
  EXPECT_EQ(path, dir.path() + "/health.state");
  service::HealthFileContents missing = service::ReadHealthFile(path);
  EXPECT_FALSE(missing.found);
  EXPECT_EQ(missing.warning, "");
  EXPECT_EQ(missing.readings.backends_size(), 0);

  ASSERT_TRUE(service::WriteHealthFile(path, Readings()).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0);
  service::HealthFileContents read = service::ReadHealthFile(path);
  EXPECT_TRUE(read.found);
  EXPECT_EQ(read.warning, "");
  EXPECT_EQ(read.readings.SerializeAsString(), Readings().SerializeAsString());
}

// The default directory beside the socket is made only after the health file is first read: a
// directory not made yet is a missing file, not one that cannot be used.
TEST(HealthFile, AMissingDirectoryIsAMissingFileAndNoWarning) {
  TempDir dir;
  const std::string path = service::HealthFileBeside(dir.path() + "/devplaced-leases/leases.state");
  service::HealthFileContents missing = service::ReadHealthFile(path);
  EXPECT_FALSE(missing.found);
  EXPECT_EQ(missing.warning, "");
  // A lease file there is the same: no leases, no warning.
  service::LeaseFileContents leases = service::ReadLeaseFile(dir.path() + "/devplaced-leases/leases.state");
  EXPECT_FALSE(leases.report.found);
  EXPECT_EQ(leases.report.warning, "");
  // A path through a file (ENOTDIR) is still a directory that cannot be used.
  std::ofstream(dir.File("plain")) << "x";
  EXPECT_THAT(service::ReadHealthFile(dir.File("plain") + "/health.state").warning, HasSubstr("not a directory"));
}

// An empty file (0 bytes: emptied by hand, or a disk that filled) keeps no readings and is no
// warning: protobuf reads it as a health state of version 0, which no devplaced ever wrote.
TEST(HealthFile, AnEmptyFileIsNoReadingsKeptAndNoWarning) {
  TempDir dir;
  const std::string path = dir.path() + "/health.state";
  std::ofstream(path).flush();
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  service::HealthFileContents read = service::ReadHealthFile(path);
  EXPECT_TRUE(read.found);
  EXPECT_EQ(read.warning, "");
  EXPECT_EQ(read.readings.backends_size(), 0);
  // A state with no readings, as devplaced writes one, reads the same.
  ASSERT_TRUE(service::WriteHealthFile(path, v1::Inventory()).ok());
  read = service::ReadHealthFile(path);
  EXPECT_EQ(read.warning, "");
  EXPECT_EQ(read.readings.backends_size(), 0);
}

TEST(HealthFile, AFileThatCannotBeUsedIsAWarningNamingIt) {
  TempDir dir;
  const std::string path = dir.path() + "/health.state";
  std::ofstream(path) << "\xff\xff\xff not a proto";
  service::HealthFileContents read = service::ReadHealthFile(path);
  EXPECT_TRUE(read.found);
  EXPECT_EQ(read.warning, path + " is not a health state (corrupt or another format); starting without the kept readings");
  EXPECT_EQ(read.readings.backends_size(), 0);

  service::state::HealthState newer;
  newer.set_version(2);
  *newer.mutable_readings() = Readings();
  std::ofstream(path, std::ios::trunc) << newer.SerializeAsString();
  read = service::ReadHealthFile(path);
  EXPECT_EQ(read.warning, path + " has health state version 2, this devplaced reads version 1; starting without the "
                                 "kept readings");
  EXPECT_EQ(read.readings.backends_size(), 0);

  std::ofstream(path, std::ios::trunc) << std::string(service::kMaxHealthFileBytes + 1, 'x');
  read = service::ReadHealthFile(path);
  EXPECT_THAT(read.warning, HasSubstr("is larger than"));
  EXPECT_THAT(read.warning, EndsWith("; starting without the kept readings"));

  ASSERT_TRUE(service::WriteHealthFile(path, Readings()).ok());
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  read = service::ReadHealthFile(path);
  EXPECT_THAT(read.warning, HasSubstr("writable by group or others"));
  EXPECT_EQ(read.readings.backends_size(), 0);
}

}  // namespace
}  // namespace devplace::testing
