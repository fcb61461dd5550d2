// Enumeration hazards over the wire: the real devplaced on fixture hosts, its devplace-probe child
// loading the fake NVML (MIG UUIDs) and the fake libcuda (the runtime's GPU numbering), answering
// ResolveDevice through gRPC. The table-driven cases are in tests/placement/hazards_test.cc.
#include <signal.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "devplace/client.h"
#include "devplace/v1/devplace.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/command.h"
#include "tests/common/no_vendor_libraries.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test_util.h"

namespace devplace::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Fixture(const std::string& path) { return std::string(DEVPLACE_FIXTURES_DIR) + "/" + path; }

struct Daemon {
  Daemon(const std::string& host, std::vector<std::string> flags) : process(dir.path(), [&] {
    flags.push_back("--host_root=" + Fixture("hosts/" + host));
    return flags;
  }()) {}
  TempDir dir;
  DaemonProcess process;
};

grpc::Status Resolve(DaemonProcess& d, const v1::ResolveDeviceRequest& req, v1::ResolveDeviceResponse* out) {
  return Stub(d.tcp_target())->ResolveDevice(Ctx().get(), req, out);
}

v1::ResolveDeviceRequest Training(std::initializer_list<std::pair<const char*, const char*>> env) {
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_TRAINING);
  for (const auto& [k, v] : env) (*req.mutable_env())[k] = v;
  return req;
}

constexpr char kMigA1[] = "MIG-00000000-0000-4000-8000-0000000000a1";  // nvml/mig.txt, GPU 0000:07:00.0
constexpr char kMigA2[] = "MIG-00000000-0000-4000-8000-0000000000a2";

TEST(DaemonHazards, MigRanksShareTheOneInstanceUnlessEachNamesItsOwn) {
  ScopedEnv nvml("FAKE_NVML_CONFIG", Fixture("nvml/mig.txt"));
  Daemon d("nvidia-mig", {"--nvml_library=" DEVPLACE_FAKE_NVML, "--cuda_library="});
  ASSERT_TRUE(d.process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.process.Log();

  v1::ResolveDeviceResponse shared;
  ASSERT_TRUE(Resolve(d.process, Training({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}), &shared).ok());
  EXPECT_EQ(shared.device(), "cuda:0");
  ASSERT_EQ(shared.placed_size(), 1);
  EXPECT_EQ(shared.placed(0).partition_uuid(), kMigA1);
  EXPECT_EQ(shared.placed(0).pci_bus_id(), "0000:07:00.0");
  const std::string warnings = absl::StrJoin(shared.warnings(), "\n");
  EXPECT_THAT(warnings, HasSubstr("MIG: each CUDA process of this job enumerates one MIG instance"));
  EXPECT_THAT(warnings, HasSubstr("CUDA_VISIBLE_DEVICES=MIG-<uuid>"));
  EXPECT_THAT(warnings, HasSubstr(kMigA2));

  v1::ResolveDeviceResponse own;
  ASSERT_TRUE(Resolve(d.process, Training({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"CUDA_VISIBLE_DEVICES", kMigA2}}),
                      &own).ok());
  EXPECT_EQ(own.device(), "cuda:0");
  ASSERT_EQ(own.placed_size(), 1);
  EXPECT_EQ(own.placed(0).partition_uuid(), kMigA2);
  EXPECT_THAT(absl::StrJoin(own.warnings(), "\n"), Not(HasSubstr("MIG: each CUDA process")));

  v1::ResolveDeviceRequest strict = Training({{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  strict.set_strict(true);
  v1::ResolveDeviceResponse refused;
  const grpc::Status s = Resolve(d.process, strict, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("MIG"));
  d.process.Signal(SIGTERM);
  EXPECT_EQ(d.process.WaitExit(absl::Seconds(10)), 0);
}

TEST(DaemonHazards, GaudiIndexIsInvalidArgumentNamingTheModuleVariable) {
  Daemon d("hpu-2x-gaudi2", {});
  ASSERT_TRUE(d.process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.process.Log();
  v1::ResolveDeviceRequest req;
  req.set_workload(v1::WORKLOAD_INFERENCE);
  req.set_device_map("hpu:1");
  (*req.mutable_env())["HABANA_VISIBLE_DEVICES"] = "1";
  v1::ResolveDeviceResponse answer;
  const grpc::Status s = Resolve(d.process, req, &answer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("'hpu:1'"));
  EXPECT_THAT(s.error_message(), HasSubstr("HABANA_VISIBLE_MODULES"));
  EXPECT_THAT(s.error_message(), HasSubstr("container runtime"));
  req.set_device_map("hpu");
  ASSERT_TRUE(Resolve(d.process, req, &answer).ok());
  EXPECT_EQ(answer.device(), "hpu");
  EXPECT_THAT(absl::StrJoin(answer.warnings(), "\n"), HasSubstr("HABANA_VISIBLE_DEVICES=1: HABANA_VISIBLE_DEVICES is"));
  d.process.Signal(SIGTERM);
  EXPECT_EQ(d.process.WaitExit(absl::Seconds(10)), 0);
}

// The client side of H-HPU and E-ORDER (Level Zero): HABANA_VISIBLE_DEVICES and
// ZE_ENABLE_PCI_ID_DEVICE_ORDER set in the job's own environment reach the daemon through
// libdevplace's ResolveOptions::FromEnvironment() and change the answer as the rule book says.
TEST(DaemonHazards, ClientEnvironmentCarriesGaudiAndLevelZeroVariables) {
  Daemon gaudi("hpu-2x-gaudi2", {});
  Daemon xpu("xpu-2x-arc", {});  // an iGPU and two Arc A770: the visible Intel GPUs differ in model
  ASSERT_TRUE(gaudi.process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << gaudi.process.Log();
  ASSERT_TRUE(xpu.process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << xpu.process.Log();
  auto ask = [](DaemonProcess& d, v1::Workload workload, const std::string& device_map) {
    ResolveOptions options = ResolveOptions::FromEnvironment();  // this process's variables
    options.job_device_nodes.reset();  // the fixture host's nodes, not this machine's /dev
    options.workload = workload;
    options.device_map = device_map;
    ConnectOptions connect;
    connect.address = d.unix_target();
    absl::StatusOr<Client> client = Client::Connect(connect);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? client->Resolve(options) : absl::StatusOr<v1::ResolveDeviceResponse>(client.status());
  };
  constexpr char kZeWarning[] = "ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1";
  unsetenv("HABANA_VISIBLE_DEVICES");
  unsetenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER");
  absl::StatusOr<v1::ResolveDeviceResponse> hpu = ask(gaudi.process, v1::WORKLOAD_INFERENCE, "hpu:1");
  EXPECT_EQ(hpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(hpu.status().message()), Not(HasSubstr("container runtime")));
  absl::StatusOr<v1::ResolveDeviceResponse> arc = ask(xpu.process, v1::WORKLOAD_TRAINING, "");
  ASSERT_TRUE(arc.ok()) << arc.status();
  EXPECT_THAT(absl::StrJoin(arc->warnings(), "\n"), HasSubstr(kZeWarning));
  {
    ScopedEnv habana("HABANA_VISIBLE_DEVICES", "1");
    ScopedEnv ze("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1");
    hpu = ask(gaudi.process, v1::WORKLOAD_INFERENCE, "hpu:1");
    EXPECT_EQ(hpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(hpu.status().message()), HasSubstr("container runtime"));
    hpu = ask(gaudi.process, v1::WORKLOAD_INFERENCE, "hpu");
    ASSERT_TRUE(hpu.ok()) << hpu.status();
    EXPECT_EQ(hpu->device(), "hpu");
    EXPECT_THAT(absl::StrJoin(hpu->warnings(), "\n"), HasSubstr("HABANA_VISIBLE_DEVICES=1: HABANA_VISIBLE_DEVICES is"));
    arc = ask(xpu.process, v1::WORKLOAD_TRAINING, "");
    ASSERT_TRUE(arc.ok()) << arc.status();
    EXPECT_EQ(arc->device(), "xpu:0");
    EXPECT_THAT(absl::StrJoin(arc->warnings(), "\n"), Not(HasSubstr(kZeWarning)));
  }
  for (Daemon* d : {&gaudi, &xpu}) {
    d->process.Signal(SIGTERM);
    EXPECT_EQ(d->process.WaitExit(absl::Seconds(10)), 0);
  }
}

TEST(DaemonHazards, CudaOrderFromLibcudaNumbersTheJobsGpus) {
  ScopedEnv cuda("FAKE_CUDA_CONFIG", Fixture("cuda/mixed-models.txt"));
  // The daemon's own CUDA_VISIBLE_DEVICES must not narrow what the probe learns.
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0");
  Daemon d("nvidia-mixed-models", {"--nvml_library=", "--cuda_library=" DEVPLACE_FAKE_CUDA});
  ASSERT_TRUE(d.process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d.process.Log();
  auto stub = v1::DevicePlacement::NewStub(grpc::CreateChannel(d.process.tcp_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::Inventory inv;
  ASSERT_TRUE(stub->GetInventory(&ctx, {}, &inv).ok());
  ASSERT_EQ(inv.backends_size(), 2);
  const v1::Backend& nv = inv.backends(1);
  ASSERT_EQ(nv.devices_size(), 2);
  EXPECT_EQ(nv.devices(0).runtime_ordinal(), 1);  // GTX 745 at bus 01: second, fastest first
  EXPECT_EQ(nv.devices(1).runtime_ordinal(), 0);
  EXPECT_EQ(nv.devices(0).runtime_ordinal_pci(), 0);

  v1::ResolveDeviceResponse answer;
  ASSERT_TRUE(Resolve(d.process, Training({{"CUDA_VISIBLE_DEVICES", "1"}}), &answer).ok());
  EXPECT_EQ(answer.device(), "cuda:0");
  ASSERT_EQ(answer.placed_size(), 1);
  EXPECT_EQ(answer.placed(0).pci_bus_id(), "0000:01:00.0");
  EXPECT_THAT(absl::StrJoin(answer.warnings(), "\n"), Not(HasSubstr("may differ")));
  d.process.Signal(SIGTERM);
  EXPECT_EQ(d.process.WaitExit(absl::Seconds(10)), 0);
}

// E-ORDER (HIP), E-ORDER-SMI and E-XPU-PIN over the wire: real daemons on fixture hosts (the KFD
// topology of amd-2x-mi210-kfd-order lists 83:00.0 first; nvidia-mixed-models with the fake
// libcuda; xpu-2x-arc's UHD 770 next to two Arc A770), asked by the devplace CLI with --explain.
TEST(DaemonHazards, RenumberingIsWarnedOverTheWire) {
  ScopedEnv cuda("FAKE_CUDA_CONFIG", Fixture("cuda/mixed-models.txt"));
  const std::vector<std::string> no_libraries = NoVendorLibraryFlagList();
  Daemon amd("amd-2x-mi210-kfd-order", no_libraries);
  Daemon nv("nvidia-mixed-models", {"--nvml_library=", "--cuda_library=" DEVPLACE_FAKE_CUDA});
  Daemon xpu("xpu-2x-arc", no_libraries);
  for (Daemon* d : {&amd, &nv, &xpu}) {
    ASSERT_TRUE(d->process.WaitForLog("event=inventory revision=1", absl::Seconds(20))) << d->process.Log();
  }
  auto resolve = [](Daemon& d, const std::string& args) {
    return RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " --address=" + d.process.unix_target() +
                      " resolve --no_environment --explain " + args);
  };
  CommandResult r = resolve(amd, "--workload=training --env=HIP_VISIBLE_DEVICES=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");
  EXPECT_THAT(r.err, HasSubstr("E-ORDER HIP numbers GPUs in the KFD topology's node order (ROCr's agent order, probed "
                               "from sysfs): ordinal 0 = host device 1 (0000:83:00.0)"));
  EXPECT_THAT(r.err, HasSubstr("E-ORDER-SMI cuda/amd"));
  EXPECT_THAT(r.err, HasSubstr("cuda:0 = HIP device 1 = GPU 0 in PCI bus order (0000:63:00.0"));
  EXPECT_THAT(r.err, HasSubstr("ROCR_VISIBLE_DEVICES=GPU-0de0b6b3a7640002"));
  r = resolve(amd, "--workload=inference --device_map=auto --json");
  EXPECT_THAT(r.out, HasSubstr("\"0\": \"64407732224\""));  // 83:00.0's free memory: HIP device 0
  EXPECT_THAT(r.out, HasSubstr("max_memory keys are the job's ordinals"));  // a warning in the JSON answer
  EXPECT_THAT(r.out, HasSubstr("is cuda:0 = GPU 1 in PCI bus order (0000:83:00.0"));
  r = resolve(amd, "--workload=training --env=ROCR_VISIBLE_DEVICES=GPU-0de0b6b3a7640002");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("E-ORDER-SMI")));

  r = resolve(nv, "--workload=training --env=CUDA_VISIBLE_DEVICES=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cuda:0\n");
  EXPECT_THAT(r.err, HasSubstr("E-ORDER-SMI cuda/nvidia"));
  EXPECT_THAT(r.err, HasSubstr("cuda:0 = CUDA device 1 = nvidia-smi GPU 0 (0000:01:00.0"));
  EXPECT_THAT(r.err, HasSubstr("set CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  r = resolve(nv, "--workload=training --env=CUDA_VISIBLE_DEVICES=1,CUDA_DEVICE_ORDER=PCI_BUS_ID");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("E-ORDER-SMI")));

  r = resolve(xpu, "--workload=training --env=ZE_ENABLE_PCI_ID_DEVICE_ORDER=1");
  EXPECT_EQ(r.out, "xpu:0\n");
  EXPECT_THAT(r.err, HasSubstr("E-XPU-PIN the integrated GPU host device 0 (0000:00:02.0)"));
  EXPECT_THAT(r.err, HasSubstr("it is xpu:0; pin the discrete cards with ZE_AFFINITY_MASK=1,2"));
  r = resolve(xpu, "--workload=training");
  EXPECT_THAT(r.err, HasSubstr("pin the discrete cards with ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ZE_AFFINITY_MASK=1,2"));
  r = resolve(xpu, "--workload=training --json --env=ZE_ENABLE_PCI_ID_DEVICE_ORDER=1,ZE_AFFINITY_MASK=1,2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"pciBusId\": \"0000:03:00.0\""));  // the first Arc A770
  EXPECT_THAT(r.err + r.out, Not(HasSubstr("E-XPU-PIN")));
  for (Daemon* d : {&amd, &nv, &xpu}) {
    d->process.Signal(SIGTERM);
    EXPECT_EQ(d->process.WaitExit(absl::Seconds(10)), 0);
  }
}

TEST(DaemonHazards, CliProbeShowsTheRuntimesNumbering) {
  const CommandResult r = RunCommand("FAKE_CUDA_CONFIG=" + ShellQuote(Fixture("cuda/mixed-models.txt")) + " " +
                                     ShellQuote(DEVPLACE_CLI_BINARY) + " probe --nvml_library= --cuda_library=" +
                                     ShellQuote(DEVPLACE_FAKE_CUDA) + " --host_root=" +
                                     ShellQuote(Fixture("hosts/nvidia-mixed-models")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("DEFAULT ORDER"));
  // host device 0 (bus 01, the GTX 745) is cuda:1 by default and cuda:0 in PCI order.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("cuda/nvidia +0 +0000:01:00.0 +cuda:1 +cuda:0"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("cuda/nvidia +1 +0000:02:00.0 +cuda:0 +cuda:1"));
  const CommandResult help = RunCommand(ShellQuote(DEVPLACE_CLI_BINARY) + " probe --help 2>&1");
  EXPECT_THAT(help.out, HasSubstr("--cuda_library"));
}

}  // namespace
}  // namespace devplace::testing
