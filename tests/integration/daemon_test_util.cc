#include "tests/integration/daemon_test_util.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace devplace::testing {

CommandResult RunCli(const std::string& args, const std::string& prefix) {
  return RunCommand(absl::StrCat(prefix, prefix.empty() ? "" : " ", ShellQuote(DEVPLACE_CLI_BINARY), " ", args));
}

std::unique_ptr<v1::DevicePlacement::Stub> Stub(const std::string& target) {
  return v1::DevicePlacement::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Ctx(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return ctx;
}

bool HealthServes(const std::string& target, absl::Duration timeout) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(Ctx(timeout).get(), {}, &response).ok();
}

v1::Inventory ParseInventoryJson(const std::string& json) {
  v1::Inventory inv;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &inv).ok()) << json.substr(0, 500);
  return inv;
}

std::string Tail(const std::string& log) { return log.substr(log.size() > 3000 ? log.size() - 3000 : 0); }

std::string OtherRunsExec(const std::string& probe) {
  return absl::StrCat("case \" $* \" in *' --usage_only '*|*' --watch_xid '*) exec ", ShellQuote(probe),
                      " \"$@\";; esac\n");
}

}  // namespace devplace::testing
