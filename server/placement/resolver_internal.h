// The resolver's insides, shared by its files: resolver.h is the interface, and nothing outside
// server/placement includes this header. A `Resolution` is one call of Resolve(): the request, the
// rows the job can use, the answer being built. Its member functions live in the file named after
// the library API whose choice they reproduce:
//   resolver.cc            the core: Run(), which rows the job can use (P4, P5), building the answer
//   request.cc             the request: validation, LOCAL_RANK / WORLD_SIZE (T8), the job's packages (V-JOB)
//   hazards.cc             warnings and hazards common to the conventions (P5, P6, E-ORDER-SMI)
//   training_arguments.cc  the chain of TrainingArguments.device and Accelerator().device (section 5)
//   partial_state.cc       Accelerate's PartialState: ACCELERATE_TORCH_DEVICE, XLA, MULTI_CPU, the distributed device
//   device_map.cc          from_pretrained(device_map=...): None, the keywords (I-AUTO, I-MEM), an int (I-INT)
//   pipeline.cc            pipeline(device=...) (I-PIPE)
//   explicit_device.cc     an explicit device string (I-STR, I-CUDA-RANK, G-PLUGIN, H-HPU)
// Which library release does what is data in versions.cc; what the visibility variables leave the
// job is visibility.h's.
#ifndef DEVPLACE_SERVER_PLACEMENT_RESOLVER_INTERNAL_H_
#define DEVPLACE_SERVER_PLACEMENT_RESOLVER_INTERNAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/device_string.h"
#include "server/placement/job_environment.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"
#include "server/placement/visibility.h"

namespace devplace::placement::resolver_internal {

inline constexpr int kMaxPlacedDevices = 16;  // entries of ResolveDeviceResponse.placed (BoundPlaced)

// The order that did not change across the supported releases (the versioned ones are in
// versions.cc), and the device_map keywords.
extern const std::vector<std::string> kIntOrder;       // device_map.cc: from_pretrained int (I-INT)
extern const std::set<std::string> kKeywords;          // device_map.cc: auto, balanced, ...

// Shared helpers, each described where it is defined.
std::string BoundedList(const std::vector<std::string>& items);  // resolver.cc
std::string OrderText(const std::vector<std::string>& order);    // resolver.cc
std::optional<int64_t> DeviceMapInt(absl::string_view s);        // device_map.cc
std::optional<int64_t> PyInt(absl::string_view s);               // request.cc

struct RowState {
  const v1::Backend* backend = nullptr;
  RowVisibility vis;
  bool available = false;
  std::string reason;   // why not available
  bool hazard = false;  // counts under `strict` when the choice is automatic
};

class Resolution {
 public:
  // The answer is built in `*out` (empty, not null; on an arena or not), which must outlive this.
  Resolution(const v1::Inventory& inv, const v1::ResolveDeviceRequest& req, v1::ResolveDeviceResponse* out)
      : inv_(inv), req_(req), out_(*out) {}

  // resolver.cc
  absl::Status Run();
  // The releases applied, after Run() (V-SKEW: ResolveSerialized reports the newer ones).
  const LibraryVersions& versions() const { return versions_; }

  // request.cc
  void DescribeJobPython();
  void TransformersImportWarnings();

  // hazards.cc
  void RenumberingWarnings();

 private:
  // resolver.cc
  bool RuntimeHas(const v1::Backend& b) const;
  bool HasRow(v1::Row row) const;
  absl::Status ComputeRows();
  RowState* FindRow(v1::Row row);
  const RowState* FirstAvailable(const std::vector<std::string>& order) const;
  // The same for a versioned order, as the release of its library sees the rows: an Intel GPU only
  // through Intel Extension for PyTorch before V-ACC-XPU-STOCK / V-TF-XPU-STOCK (SeesXpu).
  const RowState* FirstAvailable(const OrderRule& rule);
  bool SeesXpu(Library lib);
  void BoundPlaced();
  static void UnitMemory(const VisibleUnit& u, std::optional<uint64_t>& total, std::optional<uint64_t>& free);
  v1::PlacedDevice* Place(const RowState& r, int job_index);
  void Answer(const RowState& r, const std::string& device);
  void AnswerCpu(const std::string& why);
  std::string Visible(const RowState& r) const;

  // request.cc
  const std::string* Env(const char* name) const;
  absl::Status EnvFlag(const char* name, absl::string_view consequence, bool& flag) const;
  // ValidateRequest's steps, in order; the first error is the request's.
  absl::Status ValidateRequest();
  absl::Status CheckEnums() const;
  absl::Status ReadJobPackages();
  absl::Status ApplyConvention();
  absl::Status CheckBounds() const;
  absl::Status CheckTrainingDeviceMap() const;
  absl::Status ReadRankAndWorldSize();
  absl::Status ReadRuntimeBackends();
  absl::Status ReadAccelerateVariables();
  JobTorch JobTorchOf() const;

  // hazards.cc
  // H-HEALTH: a warning and a strict hazard for a placed unit whose device is HEALTH_FAULT.
  void FaultWarning(const RowState& r, const v1::PlacedDevice& p, const VisibleUnit& u);
  void AutomaticChoiceHazards();
  void NeverPicked(const std::vector<std::string>& order, const std::string& who, const std::string& rule,
                   bool fell_to_cpu, const std::string& fix_for_tpu_neuron);

  // training_arguments.cc
  absl::Status Training();  // TrainingChain, then XlaRealDevicesCheck
  absl::Status TrainingChain();
  bool WorldOfOneIsSingle(bool state_cpu);
  bool TaKeepsMpsFromEnv();  // TrainingArguments before 4.42 keeps PartialState's mps device  // V-ACC-LOCAL-RANK: single-process torchrun before 0.28
  absl::Status XlaRealDevicesCheck();
  std::string SingleDevice(bool acc, const std::string& type) const;
  absl::Status SingleProcess(bool acc);

  // partial_state.cc
  bool XlaApplies(bool state_cpu);
  absl::Status AnswerXla(bool state_cpu);
  absl::Status MultiCpu(bool acc, bool state_cpu, const std::string& why);
  // T-XLA-NEURON under torchrun: the NEURON_RT_VISIBLE_CORES torch_xla leaves for the Neuron runtime (nullopt:
  // as the job set it), or torch_xla's ValueError. `host_cores`: the NeuronCores before any mask.
  absl::StatusOr<std::optional<std::string>> TorchXlaNeuronCores(int host_cores);
  bool NeuronOnXlaTorchrun() const;  // the job's torch-neuronx runs on torch_xla, launched by torchrun
  const RowState* XlaRow() const;
  // T-XLA-PJRT: what xm.xla_device() does in the job's torch_xla on this host, for the releases that call it to
  // test for an XLA device (Accelerate before 0.28, Transformers before 4.39) and for the XLA branch. Explained once.
  enum class XlaDevice { kFound, kNone, kRaises };
  XlaDevice TorchXlaDevice();
  // T-XLA-PJRT: warns (a hazard) once that `who` calls xm.xla_device(), which raises NotImplementedError here.
  void WarnXlaRaises(absl::string_view who);
  bool TfXlaCheckPasses();  // TrainingArguments' own XLA check (V-TF-XLA-ENV, T-XLA-PJRT)
  absl::Status AnswerVerbatim(const DeviceString& d);
  absl::Status Distributed(const RowState& row, const OrderRule& chain);

  // device_map.cc
  absl::Status FromPretrained();
  absl::Status AutoMap(const std::string& keyword);
  // How get_max_memory of the applied release budgets an Intel GPU for the job: its free memory, the memory this
  // process allocated (about 0), or no key at all (V-ACC-XPU-MEM-IPEX, -FIX, -STOCK).
  enum class XpuBudget { kFree, kPeakAllocated, kLeftOut };
  XpuBudget XpuMemoryBudget(const std::string& keyword, const std::string& spill);
  void SpillOnly(const RowState* mps, uint64_t ram, const std::string& why, int zero_budgets = 0);
  uint64_t SpillBudget(const std::string& spill, uint64_t ram, std::string& how) const;
  void NeverAutoPlaced(const OrderRule& mem, const std::string& keyword);
  void PlaceAutoDevices(const RowState& r, const std::vector<std::string>& auto_order, const std::string& spill);
  void MaxMemory(const std::string& keyword, const RowState& r, const std::string& spill, uint64_t ram);
  bool BalancedCounts(const std::string& type) const;
  void FirstWithBudget(const std::string& keyword, const RowState& r, const std::vector<uint64_t>& budget,
                       const std::string& spill);
  void ExplainMemorySources(const RowState& r);
  absl::Status IntDevice(int64_t n, const std::vector<std::string>& order, const char* rule,
                         const OrderRule* versioned = nullptr);
  std::string Unavailable() const;

  // pipeline.cc
  absl::Status Pipeline();

  // explicit_device.cc
  absl::Status ExplicitString(const std::string& s);
  absl::StatusOr<std::string> CudaForRank();
  std::string AvailableText() const;

  const v1::Inventory& inv_;
  const v1::ResolveDeviceRequest& req_;
  v1::ResolveDeviceResponse& out_;
  int placed_total_ = 0;          // Place() calls: devices the answer uses
  std::map<const RowState*, std::set<int>> used_;  // job indices Place() used, per row (E-ORDER-SMI)
  v1::PlacedDevice beyond_;       // scratch entry for devices past kMaxPlacedDevices
  v1::Convention convention_ = v1::CONVENTION_UNSPECIFIED;
  LibraryVersions versions_;
  std::optional<int> local_rank_;
  std::optional<int64_t> world_size_;
  std::set<std::string> runtime_;
  std::vector<std::string> runtime_list_;  // the runtime backends applied: given, else detected
  v1::Provenance runtime_from_ = v1::PROVENANCE_DEFAULT;
  std::optional<JobPython> job_;           // the request's job_environment, read
  bool accelerate_use_cpu_ = false;
  bool use_torch_xla_ = true;      // USE_TORCH_XLA as Accelerate reads it (str_to_bool; from 0.28)
  bool tf_use_torch_xla_ = true;   // as Transformers reads it (upper() in 1, ON, YES, TRUE; from 4.39)
  std::optional<DeviceString> torch_device_env_;
  std::string torch_device_env_note_;  // G-PLUGIN: who registers its type, when the build is not told
  const v1::Backend* cpu_ = nullptr;
  std::vector<RowState> rows_;
  std::vector<std::string> hazards_;
  std::set<Library> xpu_said_;  // SeesXpu explained (or warned) once per library
  std::optional<XlaDevice> xla_device_;  // TorchXlaDevice(), once worked out
  std::string xla_why_;                  // and why (its explanation)
  bool xla_raise_warned_ = false;
};

}  // namespace devplace::placement::resolver_internal

#endif  // DEVPLACE_SERVER_PLACEMENT_RESOLVER_INTERNAL_H_