// How a user tests code that takes a devplace::Client: devplace::MockConnection, no daemon.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "devplace/client.h"
#include "devplace/mock_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// ---- the user's code ----

// The device a model server should load onto: the daemon's answer for device_map="auto", or cpu
// when the daemon cannot be asked.
std::string PickDevice(devplace::Client& client) {
  devplace::ResolveOptions options;
  options.workload = devplace::v1::WORKLOAD_INFERENCE;
  options.device_map = "auto";
  absl::StatusOr<devplace::v1::ResolveDeviceResponse> answer = client.Resolve(options);
  if (!answer.ok()) return "cpu";
  return answer->device();
}

// The number of usable accelerators, counted at each inventory revision until one has some.
int WaitForAccelerators(devplace::Client& client) {
  int usable = 0;
  absl::Status status = client.Watch(0, [&](const devplace::v1::Inventory& inventory) {
    usable = 0;
    for (const devplace::v1::Backend& backend : inventory.backends()) {
      for (const devplace::v1::Device& device : backend.devices()) usable += device.usable() ? 1 : 0;
    }
    return usable == 0;  // keep watching while there is none
  });
  return status.ok() ? usable : -1;
}

// ---- the user's tests ----

namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::Property;
using ::testing::Return;
using ::testing::StrictMock;

TEST(PickDeviceTest, UsesTheDaemonsAnswer) {
  auto connection = std::make_shared<StrictMock<devplace::MockConnection>>();
  devplace::v1::ResolveDeviceResponse answer;
  answer.set_device("cuda:1");
  EXPECT_CALL(*connection,
              ResolveDevice(AllOf(Property(&devplace::v1::ResolveDeviceRequest::workload, devplace::v1::WORKLOAD_INFERENCE),
                                  Property(&devplace::v1::ResolveDeviceRequest::device_map, "auto"))))
      .WillOnce(Return(answer));
  devplace::Client client(connection);
  EXPECT_EQ(PickDevice(client), "cuda:1");
}

TEST(PickDeviceTest, FallsBackToCpuWhenTheDaemonIsDown) {
  auto connection = std::make_shared<StrictMock<devplace::MockConnection>>();
  EXPECT_CALL(*connection, ResolveDevice(_)).WillOnce(Return(absl::UnavailableError("connection refused")));
  devplace::Client client(connection);
  EXPECT_EQ(PickDevice(client), "cpu");
}

TEST(WaitForAcceleratorsTest, WatchesUntilADeviceIsUsable) {
  auto connection = std::make_shared<StrictMock<devplace::MockConnection>>();
  EXPECT_CALL(*connection, WatchInventory(0, _))
      .WillOnce([](uint64_t, const devplace::InventoryCallback& on_inventory) {
        devplace::v1::Inventory inventory;
        inventory.set_revision(1);
        devplace::v1::Device* gpu = inventory.add_backends()->add_devices();
        if (!on_inventory(inventory)) return absl::OkStatus();  // driver not loaded yet: keep going
        inventory.set_revision(2);
        gpu->set_usable(true);
        EXPECT_FALSE(on_inventory(inventory));
        return absl::OkStatus();
      });
  devplace::Client client(connection);
  EXPECT_EQ(WaitForAccelerators(client), 1);
}

TEST(MockConnectionTest, EveryMethodCanBeMocked) {
  auto connection = std::make_shared<StrictMock<devplace::MockConnection>>();
  devplace::v1::Inventory inventory;
  inventory.set_revision(7);
  EXPECT_CALL(*connection, GetInventory()).WillOnce(Return(inventory));
  EXPECT_CALL(*connection, RefreshInventory()).WillOnce(Return(absl::InternalError("probe crashed")));
  EXPECT_CALL(*connection, ListBackends()).WillOnce(Return(devplace::v1::ListBackendsResponse()));
  EXPECT_CALL(*connection, Health()).WillOnce(Return(false));
  const devplace::Client client(connection);
  EXPECT_EQ(client.Inventory()->revision(), 7u);
  EXPECT_EQ(client.Refresh().status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(client.Backends().ok());
  EXPECT_FALSE(*client.Health());
}

TEST(MockConnectionTest, PicksAndLeasesCanBeMockedAndThePickIsApplied) {
  auto connection = std::make_shared<StrictMock<devplace::MockConnection>>();
  devplace::v1::PickDevicesResponse picked;
  (*picked.mutable_env())["CUDA_VISIBLE_DEVICES"] = "GPU-1";
  picked.add_unset("HIP_VISIBLE_DEVICES");
  picked.mutable_lease()->set_lease_id("abc");
  EXPECT_CALL(*connection, PickDevices(AllOf(Property(&devplace::v1::PickDevicesRequest::count, 2u),
                                             Property(&devplace::v1::PickDevicesRequest::wait_ms, 1500u),
                                             Property(&devplace::v1::PickDevicesRequest::holder,
                                                      devplace::v1::LEASE_HOLDER_TTL))))
      .WillOnce(Return(picked));
  devplace::v1::LeaseReleaseResponse released;
  released.mutable_lease()->set_lease_id("abc");
  EXPECT_CALL(*connection, LeaseRelease(Property(&devplace::v1::LeaseReleaseRequest::lease_id, "abc")))
      .WillOnce(Return(released));
  EXPECT_CALL(*connection, LeaseKeepAlive(_)).WillOnce(Return(absl::NotFoundError("no lease abc")));
  const devplace::Client client(connection);
  devplace::PickOptions options;
  options.count = 2;
  options.wait = absl::Milliseconds(1500);
  options.holder = devplace::v1::LEASE_HOLDER_TTL;
  absl::StatusOr<devplace::v1::PickDevicesResponse> answer = client.Pick(options);
  ASSERT_TRUE(answer.ok());
  setenv("HIP_VISIBLE_DEVICES", "0", 1);
  devplace::ApplyPickEnvironment(*answer);
  EXPECT_STREQ(getenv("CUDA_VISIBLE_DEVICES"), "GPU-1");
  EXPECT_EQ(getenv("HIP_VISIBLE_DEVICES"), nullptr);
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(client.ReleaseLease("abc")->lease_id(), "abc");
  EXPECT_EQ(client.KeepLeaseAlive("abc", absl::Minutes(5)).status().code(), absl::StatusCode::kNotFound);
}

TEST(ConnectionTest, AConnectionWrittenBeforePicksAnswersUnimplemented) {
  class OldConnection : public devplace::Connection {
   public:
    absl::StatusOr<devplace::v1::ResolveDeviceResponse> ResolveDevice(const devplace::v1::ResolveDeviceRequest&) override {
      return absl::UnavailableError("");
    }
    absl::StatusOr<devplace::v1::Inventory> GetInventory() override { return absl::UnavailableError(""); }
    absl::StatusOr<devplace::v1::ListBackendsResponse> ListBackends() override { return absl::UnavailableError(""); }
    absl::StatusOr<devplace::v1::Inventory> RefreshInventory() override { return absl::UnavailableError(""); }
    absl::Status WatchInventory(uint64_t, devplace::InventoryCallback) override { return absl::UnavailableError(""); }
    absl::StatusOr<bool> Health() override { return absl::UnavailableError(""); }
  };
  const devplace::Client client(std::make_shared<OldConnection>());
  devplace::PickOptions options;
  EXPECT_EQ(client.Pick(options).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(client.ReleaseLease("x").status().code(), absl::StatusCode::kUnimplemented);
}

// Client::Pick's default holder in a child process that leads its own group (`lead`) or stays in
// this test's group: 0 when the request and the answer are what JobLeaseHolder() promises.
int PickInChild(bool lead) {
  if (lead && setpgid(0, 0) != 0) return 2;
  auto connection = std::make_shared<::testing::NiceMock<devplace::MockConnection>>();
  devplace::v1::PickDevicesRequest sent;
  ON_CALL(*connection, PickDevices(::testing::_)).WillByDefault([&sent](const devplace::v1::PickDevicesRequest& r) {
    sent = r;
    devplace::v1::PickDevicesResponse answer;
    answer.add_warnings("the daemon's warning");
    return absl::StatusOr<devplace::v1::PickDevicesResponse>(answer);
  });
  devplace::PickOptions options;
  options.job = devplace::ResolveOptions::ForJob(devplace::v1::WORKLOAD_TRAINING, {});
  absl::StatusOr<devplace::v1::PickDevicesResponse> answer = devplace::Client(connection).Pick(options);
  if (!answer.ok()) return 3;
  if (lead) return sent.holder() == devplace::v1::LEASE_HOLDER_PROCESS_GROUP && answer->warnings_size() == 1 ? 0 : 4;
  const std::string says = absl::StrCat("the lease is held for this process only (pid ", getpid(),
                                        "): it does not lead its process group ", getpgrp());
  return sent.holder() == devplace::v1::LEASE_HOLDER_PROCESS && answer->warnings_size() == 2 &&
                 absl::StartsWith(answer->warnings(1), says)
             ? 0
             : 5;
}

TEST(ClientPickTest, ByDefaultTheLeaseIsTheJobsGroupWhenTheCallerLeadsItElseTheCallersWithAWarning) {
  for (const bool lead : {true, false}) {
    const pid_t child = fork();
    if (child == 0) _exit(PickInChild(lead));
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "lead=" << lead << " status " << status;
  }
  // Asked for: this process alone (no warning), or a TTL lease (the daemon's choice: unspecified).
  auto connection = std::make_shared<::testing::StrictMock<devplace::MockConnection>>();
  EXPECT_CALL(*connection, PickDevices(::testing::Property(&devplace::v1::PickDevicesRequest::holder,
                                                          devplace::v1::LEASE_HOLDER_PROCESS)))
      .WillOnce(::testing::Return(devplace::v1::PickDevicesResponse()));
  EXPECT_CALL(*connection, PickDevices(::testing::Property(&devplace::v1::PickDevicesRequest::holder,
                                                          devplace::v1::LEASE_HOLDER_UNSPECIFIED)))
      .WillOnce(::testing::Return(devplace::v1::PickDevicesResponse()));
  const devplace::Client client(connection);
  devplace::PickOptions options;
  options.holder = devplace::v1::LEASE_HOLDER_PROCESS;
  EXPECT_EQ(client.Pick(options)->warnings_size(), 0);
  options.holder = devplace::v1::LEASE_HOLDER_UNSPECIFIED;
  options.ttl = absl::Minutes(5);
  EXPECT_EQ(client.Pick(options)->warnings_size(), 0);
}

}  // namespace
