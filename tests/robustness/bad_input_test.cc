// Enum numbers the proto does not define, and requests that do not parse, are
// INVALID_ARGUMENT naming what is wrong (not read as a known value, not UNIMPLEMENTED with an
// empty message).
#include <string>

#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "absl/synchronization/notification.h"
#include "tests/common/fixtures.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<DaemonProcess>(dir_.path(), std::vector<std::string>{"--host_root=" + FixtureHost("cpu-only")});
    ASSERT_TRUE(daemon_->WaitForLog("event=inventory revision=1", absl::Seconds(20))) << daemon_->Log();
    channel_ = grpc::CreateChannel(daemon_->unix_target(), grpc::InsecureChannelCredentials());
    stub_ = v1::DevicePlacement::NewStub(channel_);
  }
  grpc::Status Resolve(const v1::ResolveDeviceRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ResolveDeviceResponse response;
    return stub_->ResolveDevice(&ctx, request, &response);
  }
  // Sends `bytes` as the ResolveDevice request body, unparsed.
  grpc::Status ResolveRaw(const std::string& bytes) { return Raw("ResolveDevice", bytes); }
  // Sends `bytes` as the request body of `method`, unparsed, and waits for its status (for a
  // stream: one that ends before its first message).
  grpc::Status Raw(const std::string& method, const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    absl::Notification done;
    generic.UnaryCall(&ctx, "/devplace.v1.DevicePlacement/" + method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status;
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DevicePlacement::Stub> stub_;
};

TEST_F(BadInput, UnknownWorkloadIsInvalidArgumentNamingFieldAndValue) {
  for (int workload : {99, -1}) {
    SCOPED_TRACE(workload);
    v1::ResolveDeviceRequest request;
    request.set_workload(static_cast<v1::Workload>(workload));
    const grpc::Status s = Resolve(request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("workload: " + std::to_string(workload) + " is not a Workload value"));
    EXPECT_THAT(s.error_message(), HasSubstr("WORKLOAD_INFERENCE"));
  }
}

TEST_F(BadInput, UnknownConventionIsInvalidArgumentNotAnEmptyName) {
  for (v1::Workload workload : {v1::WORKLOAD_INFERENCE, v1::WORKLOAD_TRAINING}) {
    SCOPED_TRACE(v1::Workload_Name(workload));
    v1::ResolveDeviceRequest request;
    request.set_workload(workload);
    request.set_convention(static_cast<v1::Convention>(99));
    const grpc::Status s = Resolve(request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("convention: 99 is not a Convention value"));
    EXPECT_THAT(s.error_message(), Not(HasSubstr("convention:  ")));
  }
  // A known convention still answers.
  v1::ResolveDeviceRequest good;
  good.set_workload(v1::WORKLOAD_INFERENCE);
  good.set_convention(v1::CONVENTION_PIPELINE);
  EXPECT_TRUE(Resolve(good).ok());
}

TEST_F(BadInput, UnparsableRequestIsInvalidArgumentWithAMessage) {
  // device_map (field 3, length-delimited) holding bytes that are not UTF-8.
  const std::string not_utf8 = std::string("\x08\x02\x1a\x02\xff\xfe", 6);
  // A length prefix running past the end of the message.
  const std::string truncated = std::string("\x1a\x7f" "abc", 5);
  for (const std::string& bytes : {not_utf8, truncated}) {
    const grpc::Status s = ResolveRaw(bytes);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("do not parse as a devplace.v1.ResolveDeviceRequest"));
  }
  // The same path still answers a well-formed request.
  v1::ResolveDeviceRequest good;
  good.set_workload(v1::WORKLOAD_INFERENCE);
  EXPECT_TRUE(ResolveRaw(good.SerializeAsString()).ok());
}

// Every method, the streaming WatchInventory and the refreshing RefreshInventory included,
// answers bytes that do not parse with INVALID_ARGUMENT naming the message type (gRPC's typed
// handlers answered UNIMPLEMENTED with an empty message).
TEST_F(BadInput, UnparsableRequestToAnyMethodIsInvalidArgumentWithAMessage) {
  const std::string truncated = std::string("\x0a\x7f" "abc", 5);
  for (const std::string method : {"ResolveDevice", "GetInventory", "ListBackends", "WatchInventory",
                                   "RefreshInventory"}) {
    SCOPED_TRACE(method);
    const grpc::Status s = Raw(method, truncated);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("5 bytes that do not parse as a devplace.v1." + method + "Request"));
  }
  // The raw paths still serve well-formed requests: a watch's first snapshot, a refresh's inventory.
  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::WatchInventoryRequest watch;
  std::unique_ptr<grpc::ClientReader<v1::Inventory>> reader = stub_->WatchInventory(&watch_ctx, watch);
  v1::Inventory first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_GE(first.revision(), 1u);
  EXPECT_GT(first.backends_size(), 0);
  watch_ctx.TryCancel();
  grpc::ClientContext refresh_ctx;
  refresh_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::Inventory refreshed;
  const grpc::Status refresh = stub_->RefreshInventory(&refresh_ctx, {}, &refreshed);
  ASSERT_TRUE(refresh.ok()) << refresh.error_message();
  EXPECT_EQ(refreshed.epoch(), first.epoch());
  EXPECT_GT(refreshed.backends_size(), 0);
}

}  // namespace
}  // namespace devplace::testing
