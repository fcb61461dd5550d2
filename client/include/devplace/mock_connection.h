// A GoogleMock Connection, for testing code that takes a devplace::Client without a daemon.
// Header-only; link GTest::gmock (or -lgmock) in the test that includes it.
//
//   auto connection = std::make_shared<::testing::StrictMock<devplace::MockConnection>>();
//   devplace::v1::ResolveDeviceResponse answer;
//   answer.set_device("cuda:0");
//   EXPECT_CALL(*connection, ResolveDevice(::testing::_)).WillOnce(::testing::Return(answer));
//   devplace::Client client(connection);
//   ... code under test calls client.Resolve(...) and gets "cuda:0" ...
//
// An error is returned the same way: Return(absl::UnavailableError("no inventory yet")).
// WatchInventory's callback is the second argument: Invoke a lambda that feeds it inventories.
#ifndef DEVPLACE_MOCK_CONNECTION_H_
#define DEVPLACE_MOCK_CONNECTION_H_

#include <cstdint>

#include "devplace/client.h"
#include "gmock/gmock.h"

namespace devplace {

class MockConnection : public Connection {
 public:
  // The WatchCanceller overload keeps Connection's default (CANCELLED when already cancelled, else
  // the mocked two-argument WatchInventory).
  using Connection::WatchInventory;
  MOCK_METHOD(absl::StatusOr<v1::ResolveDeviceResponse>, ResolveDevice, (const v1::ResolveDeviceRequest& request),
              (override));
  MOCK_METHOD(absl::StatusOr<v1::Inventory>, GetInventory, (), (override));
  MOCK_METHOD(absl::StatusOr<v1::ListBackendsResponse>, ListBackends, (), (override));
  MOCK_METHOD(absl::StatusOr<v1::Inventory>, RefreshInventory, (), (override));
  MOCK_METHOD(absl::Status, WatchInventory, (uint64_t known_revision, InventoryCallback on_inventory), (override));
  MOCK_METHOD(absl::StatusOr<bool>, Health, (), (override));
  MOCK_METHOD(absl::StatusOr<v1::PickDevicesResponse>, PickDevices, (const v1::PickDevicesRequest& request),
              (override));
  MOCK_METHOD(absl::StatusOr<v1::LeaseReleaseResponse>, LeaseRelease, (const v1::LeaseReleaseRequest& request),
              (override));
  MOCK_METHOD(absl::StatusOr<v1::LeaseKeepAliveResponse>, LeaseKeepAlive, (const v1::LeaseKeepAliveRequest& request),
              (override));
};

}  // namespace devplace

#endif  // DEVPLACE_MOCK_CONNECTION_H_
