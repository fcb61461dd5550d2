// from_pretrained(device_map=...) (docs/SEMANTICS.md section 6): None (I-NONE), the keywords and their
// max_memory budgets (I-AUTO, I-MEM), an int (I-INT; pipeline's int device goes through IntDevice too).
// A device string is explicit_device.cc's.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/placement/resolver_internal.h"
#include "server/placement/torch_device_types.h"
#include "server/placement/versions.h"
#include "server/placement/visibility.h"

namespace devplace::placement::resolver_internal {

// The order of docs/SEMANTICS.md for an int device_map; it did not change across the supported releases
// (by PyTorch device type; "cuda" is whichever GPU row is available). The versioned orders are in
// versions.cc.
// from_pretrained int: set_module_tensor_to_device maps it to npu/mlu/sdaa/musa:<n>, hpu; otherwise
// PyTorch's int rule takes the current accelerator, PrivateUse1 (neuron, torch-tpu's tpu) first.
const std::vector<std::string> kIntOrder = {"npu", "mlu", "sdaa", "musa", "hpu", "neuron", "tpu", "cuda", "xpu", "mps"};

// The device_map keywords (I-AUTO).
const std::set<std::string> kKeywords = {"auto", "balanced", "balanced_low_0", "sequential"};

// A Python int written as digits in device_map: "0", "12", "-1"; no sign but '-', no spaces,
// no leading zero (anything else is a string and goes through the device-string grammar).
std::optional<int64_t> DeviceMapInt(absl::string_view s) {
  absl::string_view digits = s;
  if (!digits.empty() && digits[0] == '-') digits.remove_prefix(1);
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0') || (digits == "0" && s[0] == '-')) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) return std::nullopt;
  return v;
}

absl::Status Resolution::FromPretrained() {
  const std::string& m = req_.device_map();
  out_.add_explanation(absl::StrCat("convention from_pretrained: emulating from_pretrained(device_map=",
                                    m.empty() ? "None" : absl::StrCat("\"", m, "\""), ")"));
  if (m.empty()) {
    AnswerCpu("I-NONE device_map is None: from_pretrained loads the weights on cpu");
    if (const RowState* r = FirstAvailable(versions_.Order(OrderKind::kAccMaxMemory))) {
      out_.add_warnings(absl::StrCat("hint: pass device_map=\"auto\" to use ", r->backend->device_type(), ":0"));
    }
    return absl::OkStatus();
  }
  if (kKeywords.count(m)) return AutoMap(m);
  if (std::optional<int64_t> n = DeviceMapInt(m)) {
    if (*n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device_map: ", m, ": You can't pass device_map as a negative int. If you want to put the model on the cpu, "
          "pass device_map = 'cpu'"));
    }
    return IntDevice(*n, kIntOrder, "I-INT");
  }
  return ExplicitString(m);
}

absl::Status Resolution::AutoMap(const std::string& keyword) {
  const OrderRule& mem = versions_.Order(OrderKind::kAccMaxMemory);
  const std::vector<std::string>& auto_order = mem.order;
  out_.add_explanation(absl::StrCat("I-AUTO get_max_memory order ", versions_.Cite(mem)));
  const RowState* r = FirstAvailable(mem);
  const RowState* mps = FirstAvailable({"mps"});
  AutomaticChoiceHazards();
  NeverAutoPlaced(mem, keyword);
  const uint64_t ram = inv_.host().memory_available_bytes() ? inv_.host().memory_available_bytes()
                                                            : inv_.host().memory_total_bytes();
  const std::string spill = mps != nullptr ? "mps" : "cpu";
  if (r == nullptr) {
    SpillOnly(mps, ram, absl::StrCat("I-AUTO no row of ", OrderText(auto_order), " is available"));
    return absl::OkStatus();
  }
  if (r->backend->device_type() == "xpu") {
    const XpuBudget budget = XpuMemoryBudget(keyword, spill);
    if (budget != XpuBudget::kFree) {
      SpillOnly(mps, ram, absl::StrCat("I-AUTO get_max_memory probes ", r->backend->name(), " (first available of ",
                                       OrderText(auto_order), ") and no other row, and gives it no usable budget, so "
                                       "infer_auto_device_map places no module there"),
                budget == XpuBudget::kPeakAllocated ? static_cast<int>(r->vis.units.size()) : 0);
      return absl::OkStatus();
    }
  }
  PlaceAutoDevices(*r, auto_order, spill);
  MaxMemory(keyword, *r, spill, ram);
  return absl::OkStatus();
}

// I-AUTO with no accelerator budget: every module on mps when it is available, else on cpu; max_memory
// holds that device, with its SpillBudget (the host's available RAM; cpu 90 % of it from Transformers 5.0),
// after `zero_budgets` device indices with budget 0 (the library's own keys, whose budgets hold no module: a
// job that passes max_memory gets what the library does).
void Resolution::SpillOnly(const RowState* mps, uint64_t ram, const std::string& why, int zero_budgets) {
  if (mps != nullptr) {
    Answer(*mps, "mps");
    Place(*mps, 0);
    out_.add_explanation(absl::StrCat(why, "; MPS is available: mps"));
  } else {
    AnswerCpu(absl::StrCat(why, ": everything on cpu"));
  }
  const std::string spill = mps != nullptr ? "mps" : "cpu";
  for (int i = 0; i < zero_budgets; ++i) (*out_.mutable_max_memory())[absl::StrCat(i)] = 0;
  std::string how;
  const uint64_t budget = SpillBudget(spill, ram, how);
  (*out_.mutable_max_memory())[spill] = budget;
  out_.add_explanation(absl::StrCat("I-MEM max_memory {", zero_budgets > 0 ? absl::StrCat("0..", zero_budgets - 1, ": 0, ") : "",
                                    "\"", spill, "\": ", budget, "}", zero_budgets > 0 ?
                                    "; each Intel GPU: the library's own budget, about 0, written as 0" : "",
                                    "; \"", spill, "\": ", how));
}

// I-MEM, V-TF-CPU-90: the spill-over device's budget: the host's available RAM; from Transformers 5.0 its own
// get_max_memory keeps 90 % of it for "cpu" when the job passes none (a product of doubles, as Python's
// `int * 0.90`, whose floor infer_auto_device_map compares the same against whole module sizes). `how` says which.
uint64_t Resolution::SpillBudget(const std::string& spill, uint64_t ram, std::string& how) const {
  if (spill == "mps") {
    how = "available host RAM (mps: Accelerate gives it the RAM it shares, and no \"cpu\" key for the 90 % cut)";
    return ram;
  }
  if (!versions_.Has(Feature::kTfCpuBudget90)) {
    how = absl::StrCat("available host RAM (V-TF-CPU-90: Transformers ", versions_.transformers().ToString(),
                       " < 5.0.0, whose from_pretrained budgets cpu with Accelerate's get_max_memory)");
    return ram;
  }
  how = absl::StrCat("90 % of the available host RAM (V-TF-CPU-90: Transformers ", versions_.transformers().ToString(),
                     " >= 5.0.0, whose own get_max_memory keeps 10 % of the cpu's budget back when the job passes "
                     "no max_memory)");
  return static_cast<uint64_t>(static_cast<double>(ram) * 0.90);
}

// V-ACC-XPU-MEM-IPEX, -FIX, -STOCK: how get_max_memory of the applied Accelerate release budgets an Intel GPU
// for this job's packages: its free memory (kFree); where it cannot read that, torch.xpu.max_memory_allocated,
// what this process has allocated, about 0 at start-up (kPeakAllocated), or, in 1.0.x with Intel Extension for
// PyTorch, no key at all, its version check raising (kLeftOut). Either way infer_auto_device_map places every
// module on the spill-over device: said with its cause and fixes, a hazard as any automatic fall-back to cpu
// with accelerators present is (P6). Packages not told: kFree, with a warning where the release reads the
// memory only through Intel Extension for PyTorch >= 2.5.
Resolution::XpuBudget Resolution::XpuMemoryBudget(const std::string& keyword, const std::string& spill) {
  const bool known = job_ && job_->torch;
  const std::optional<Version> torch = known ? PackageMajorMinor(*job_->torch) : std::nullopt;
  const std::optional<Version> ipex = known && job_->ipex ? PackageMajorMinor(*job_->ipex) : std::nullopt;
  // is_ipex_available(): installed, and of torch's MAJOR.MINOR (else Accelerate warns and ignores it).
  const bool has_ipex = ipex && torch && ipex->major == torch->major && ipex->minor == torch->minor;
  const std::string release = absl::StrCat("get_max_memory of Accelerate ", versions_.accelerate().ToString());
  const std::string peak = " gives each Intel GPU torch.xpu.max_memory_allocated, the memory this process has "
                           "allocated (about 0 at start-up), as its budget";
  std::string why;
  Feature rule = Feature::kAccXpuMemoryStock;
  bool left_out = false;
  if (!versions_.Has(Feature::kAccXpuMemoryIpex)) {
    why = absl::StrCat(release, peak, " whatever the job's packages");
    rule = Feature::kAccXpuMemoryIpex;
  } else if (has_ipex && !versions_.Has(Feature::kAccXpuMemoryIpexFixed)) {
    why = absl::StrCat("the job has intel_extension_for_pytorch ", *job_->ipex, ", and ", release,
                       " fails to read an Intel GPU's memory through it, so it leaves every Intel GPU out");
    rule = Feature::kAccXpuMemoryIpex;
    left_out = true;
  } else if (has_ipex) {
    if (*ipex >= Version{2, 5, 0}) return XpuBudget::kFree;
    why = absl::StrCat("the job has intel_extension_for_pytorch ", *job_->ipex, ", older than 2.5, so ", release, peak);
    rule = Feature::kAccXpuMemoryIpexFixed;
  } else if (known) {
    if (versions_.Has(Feature::kAccXpuMemoryStock) && torch && *torch >= Version{2, 6, 0}) return XpuBudget::kFree;
    why = absl::StrCat("the job has torch ", *job_->torch, " and no usable intel_extension_for_pytorch, so ", release, peak);
  } else {
    if (!versions_.Has(Feature::kAccXpuMemoryStock)) {
      out_.add_warnings(absl::StrCat(
          "the job's packages are not known: ", release, " reads an Intel GPU's free memory only through Intel "
          "Extension for PyTorch >= 2.5; without it, it", peak, " and device_map=\"", keyword, "\" puts every "
          "module on ", spill, " (", versions_.Cite(Feature::kAccXpuMemoryStock), "); send the job's packages "
          "(devplace resolve --python_env)"));
    }
    return XpuBudget::kFree;
  }
  const std::string w = absl::StrCat(
      why, ": device_map=\"", keyword, "\" puts every module on ", spill, " (", versions_.Cite(rule), "); ",
      rule == Feature::kAccXpuMemoryIpex && versions_.Has(Feature::kAccXpuMemoryIpex)
          ? "use Accelerate >= 1.1.0, or pass device_map=\"xpu\""
          : "pass device_map=\"xpu\", or a max_memory of your own with each Intel GPU's free memory, or use "
            "Accelerate >= 1.3.0 with torch >= 2.6 (or >= 1.1.0 with Intel Extension for PyTorch >= 2.5)");
  out_.add_warnings(w);
  hazards_.push_back(w);
  return left_out ? XpuBudget::kLeftOut : XpuBudget::kPeakAllocated;
}

// One warning per available row get_max_memory does not probe (mps aside: it is the spill-over).
void Resolution::NeverAutoPlaced(const OrderRule& mem, const std::string& keyword) {
  for (const RowState& x : rows_) {
    const std::string type = x.backend->device_type();
    if (!x.available || type == "mps" || std::find(mem.order.begin(), mem.order.end(), type) != mem.order.end()) {
      continue;
    }
    out_.add_warnings(absl::StrCat("device_map=\"", keyword, "\" never places on ", x.backend->name(),
                                   " (get_max_memory of Accelerate ", versions_.accelerate().ToString(),
                                   " does not probe it, ", mem.id, "): pass device_map=\"", type, "\" to use it"));
  }
}

// I-AUTO: every device the job sees on row `r`, <type>:0 first, then `spill` for what does not fit.
void Resolution::PlaceAutoDevices(const RowState& r, const std::vector<std::string>& auto_order,
                                  const std::string& spill) {
  const std::string type = r.backend->device_type();
  const int n = static_cast<int>(r.vis.units.size());
  Answer(r, absl::StrCat(type, ":0"));
  Place(r, 0);
  for (int i = 1; i < n; ++i) {
    out_.add_devices(absl::StrCat(type, ":", i));
    Place(r, i);
  }
  out_.add_devices(spill);
  out_.add_explanation(absl::StrCat("I-AUTO first available of ", OrderText(auto_order), " is ", r.backend->name(),
                                    ": devices ", type, ":0..", n - 1, ", then ", spill, " for what does not fit"));
}

namespace {

// The budgets from_pretrained's own get_max_memory / get_balanced_memory start from for `keyword` when the job
// passes no max_memory (`budget` starts as each device's free memory): that free memory, and where exactly one
// device has any (get_balanced_memory counts the devices with a budget above 0), 90 % of device 0's, the first
// index key, as get_balanced_memory does then; where it counts none of the row's devices (`counted` false:
// BalancedCounts), their free memory as it is. Nothing is shared out here: for every keyword but "sequential",
// from_pretrained (Transformers 4.36 to 5.x) and Accelerate's load_checkpoint_and_dispatch pass the job's
// max_memory through get_balanced_memory again, which shares the model out by its layers and only lowers a
// budget; a share computed here without the layer sizes was lower still and pushed modules off the devices
// (executed: scripts/fidelity/run.py --landing). Returns how, in words.
std::string Budgets(const std::string& keyword, bool counted, std::vector<uint64_t>& budget) {
  if (keyword == "sequential") return "sequential: 100 % of each device's free memory (get_max_memory)";
  if (!counted) {
    return absl::StrCat(keyword, ": each device's free memory (get_max_memory); get_balanced_memory counts none of "
                        "these devices, so it keeps them as they are (V-ACC-BALANCED-XPU, V-TF-BALANCED)");
  }
  const auto with_memory = std::count_if(budget.begin(), budget.end(), [](uint64_t b) { return b > 0; });
  if (with_memory != 1) {
    return absl::StrCat(keyword, ": each device's free memory (get_max_memory); from_pretrained's "
                        "get_balanced_memory shares the model out over them by its layers");
  }
  budget[0] = static_cast<uint64_t>(std::floor(static_cast<long double>(budget[0]) * 0.9L));
  return absl::StrCat(keyword, ": one device with free memory: 90 % of device 0's (get_balanced_memory's "
                      "buffer, on the first index key), the others' free memory");
}

}  // namespace

// I-MEM: max_memory for the devices PlaceAutoDevices placed, and `spill` with its SpillBudget; none
// when a device's memory is unknown.
void Resolution::MaxMemory(const std::string& keyword, const RowState& r, const std::string& spill, uint64_t ram) {
  const int n = static_cast<int>(r.vis.units.size());
  std::vector<uint64_t> free(n, 0);
  std::vector<std::string> unknown, total_only;
  std::vector<std::string> faulty;  // H-HEALTH: budget 0, so a job that passes max_memory leaves them out
  for (int i = 0; i < n; ++i) {
    std::optional<uint64_t> unit_total, unit_free;
    UnitMemory(r.vis.units[i], unit_total, unit_free);
    if (r.vis.units[i].device->health() == v1::HEALTH_FAULT) {
      faulty.push_back(out_.devices(i));
    } else if (unit_free) {
      free[i] = *unit_free;
    } else if (unit_total) {
      free[i] = *unit_total;
      total_only.push_back(out_.devices(i));  // devices(i) is `<type>:i`, as placed(i) would be
    } else {
      unknown.push_back(out_.devices(i));
    }
  }
  if (!unknown.empty()) {
    // Every device of the answer is named: the FAULT ones apart (no budget is given to any).
    out_.add_warnings(absl::StrCat(
        "max_memory left empty: the memory of ", BoundedList(unknown),
        " is unknown to devplace, and a partial map would push the model to the spill-over device; let Accelerate "
        "measure (pass no max_memory)",
        faulty.empty() ? std::string()
                       : absl::StrCat("; ", BoundedList(faulty), " (health FAULT, H-HEALTH) would be measured and "
                                      "used too: give it max_memory 0, or leave it out of the job's mask")));
    out_.add_explanation("I-MEM no budgets: device memory unknown");
    return;
  }
  if (total_only.size() <= kMaxPlacedDevices) {
    for (const std::string& d : total_only) {
      out_.add_warnings(absl::StrCat("free memory of ", d, " is unknown: its max_memory budget uses total memory"));
    }
  } else {  // one line, bounded, on big hosts
    out_.add_warnings(absl::StrCat("free memory of ", BoundedList(total_only),
                                   " is unknown: their max_memory budgets use total memory"));
  }
  std::vector<uint64_t> budget = free;
  const std::string how = Budgets(keyword, BalancedCounts(r.backend->device_type()), budget);
  auto& max_memory = *out_.mutable_max_memory();
  for (int i = 0; i < n; ++i) {
    max_memory[absl::StrCat(i)] = r.vis.units[i].device->health() == v1::HEALTH_FAULT ? 0 : budget[i];
  }
  std::string spill_how;
  (*out_.mutable_max_memory())[spill] = SpillBudget(spill, ram, spill_how);
  out_.add_explanation(absl::StrCat("I-MEM ", how, "; \"", spill, "\": ", spill_how));
  if (!faulty.empty()) {
    out_.add_explanation(absl::StrCat("I-MEM H-HEALTH budget 0 for ", BoundedList(faulty),
                                      " (health FAULT): a job that passes max_memory puts no module there"));
  }
  ExplainMemorySources(r);
  FirstWithBudget(keyword, r, budget, spill);
}

// V-TF-BALANCED, V-ACC-BALANCED-XPU: whether from_pretrained's get_balanced_memory counts the devices of a row of
// `type` (it balances, keeps 10 % of one device as a buffer and applies low_zero only over the devices it counts):
// Transformers' own copy (5.0 on) counts every accelerator key; Accelerate's counts an index key as
// torch.device(<index>), a CUDA device, so CUDA rows only, and Intel GPUs by their properties before 0.31.
bool Resolution::BalancedCounts(const std::string& type) const {
  return versions_.Has(Feature::kTfOwnBalancedMemory) || type == "cuda" ||
         (type == "xpu" && !versions_.Has(Feature::kAccBalancedXpuUncounted));
}

// I-AUTO-FIRST: infer_auto_device_map gives no module to a device whose budget is 0 (no free memory, or a
// FAULT device's H-HEALTH budget), so the model's first module, the answer's `device`, is on the first device
// with a budget (balanced_low_0: the next one after device 0, unless model_size_bytes says the others cannot
// hold the model); with none, every module is on the spill-over device (a fall-back with accelerators present:
// a hazard, P6). A budget above 0 that is smaller than the first layer is also skipped by the library; devplace
// does not know the layers (docs/FIDELITY.md, intended differences).
void Resolution::FirstWithBudget(const std::string& keyword, const RowState& r, const std::vector<uint64_t>& budget,
                                 const std::string& spill) {
  const int n = static_cast<int>(budget.size());
  int first = 0;
  while (first < n && budget[first] == 0) ++first;
  if (first == 0 && keyword == "balanced_low_0" && BalancedCounts(r.backend->device_type())) {
    // get_balanced_memory(low_zero=True) with two or more devices with memory gives device 0 only what the
    // others cannot hold: the model's size less the budgets of indices 1 .. num_devices - 1 (num_devices: the
    // devices with a budget; the library sums that range of indices, a device with none inside it included), each
    // device with a budget but the last capped at the model's size // (num_devices - 1) first (the library adds a
    // buffer of 1.25 mean layer sizes that devplace does not know). With no model size known, that is nothing.
    std::vector<int> with_budget;
    for (int i = 0; i < n; ++i) {
      if (budget[i] > 0) with_budget.push_back(i);
    }
    const int num = static_cast<int>(with_budget.size());
    if (num < 2) return;
    const int next = with_budget[1];
    uint64_t others = 0;
    if (req_.has_model_size_bytes()) {
      const uint64_t share = req_.model_size_bytes() / static_cast<uint64_t>(num - 1);
      for (int i = 1; i < num; ++i) {
        others += budget[i] > 0 && i != with_budget.back() ? std::min(share, budget[i]) : budget[i];
      }
    }
    if (!(req_.has_model_size_bytes() && req_.model_size_bytes() > others)) {
      out_.set_device(out_.devices(next));
      out_.add_explanation(absl::StrCat("I-AUTO-FIRST balanced_low_0: get_balanced_memory gives ", out_.devices(0),
                                        " only what the other devices cannot hold (", req_.has_model_size_bytes()
                                        ? absl::StrCat("model_size_bytes fits in the budgets of indices 1..", num - 1)
                                        : "no model_size_bytes: taken to be nothing", "): the first module lands on ",
                                        out_.devices(next)));
    } else {
      out_.add_explanation(absl::StrCat("I-AUTO-FIRST balanced_low_0: model_size_bytes exceeds the budgets "
                                        "get_balanced_memory sums for indices 1..", num - 1, " (", others, " bytes), so ",
                                        out_.devices(0), " keeps the excess and the first module"));
    }
    return;
  }
  if (first == 0) return;
  if (first < n) {
    out_.set_device(out_.devices(first));
    out_.add_explanation(absl::StrCat("I-AUTO-FIRST budget 0 for ", out_.devices(0), first > 1 ? ".." : "",
                                      first > 1 ? out_.devices(first - 1) : "", ": the first module lands on ",
                                      out_.devices(first)));
    return;
  }
  out_.set_device(spill);
  out_.set_backend(spill == "mps" ? v1::ROW_MPS : v1::ROW_CPU);
  out_.set_package(spill == "mps" || cpu_ == nullptr ? "torch" : cpu_->package());
  const std::string w = absl::StrCat("no ", r.backend->name(), " device has free memory (each max_memory budget is 0): "
                                     "device_map=\"", keyword, "\" puts every module on ", spill,
                                     " (I-AUTO-FIRST); free a device or pass device_map=\"", r.backend->device_type(),
                                     ":<n>\"");
  out_.add_warnings(w);
  hazards_.push_back(w);
}

// Which vendor library each device figure came from (Device.attributes["memory_source"]).
void Resolution::ExplainMemorySources(const RowState& r) {
  std::map<std::string, std::vector<std::string>> sources;
  for (int i = 0; i < static_cast<int>(r.vis.units.size()); ++i) {
    const auto& attributes = r.vis.units[i].device->attributes();
    if (const auto it = attributes.find("memory_source"); it != attributes.end()) {
      sources[it->second].push_back(out_.devices(i));
    }
  }
  for (const auto& [source, devices] : sources) {
    out_.add_explanation(absl::StrCat("I-MEM memory of ", BoundedList(devices), " from ", source));
  }
}

// An int device (I-INT, pipeline int): `<type>:<n>` on the first available row of `order` (of
// `*versioned`, as its library's release sees the rows, when given).
absl::Status Resolution::IntDevice(int64_t n, const std::vector<std::string>& order, const char* rule,
                                   const OrderRule* versioned) {
  const RowState* r = versioned != nullptr ? FirstAvailable(*versioned) : FirstAvailable(order);
  if (r == nullptr) {
    if (convention_ == v1::CONVENTION_PIPELINE && order.size() == 1) {  // V-TF-PIPE-4.30: always cuda:<n>
      return absl::FailedPreconditionError(absl::StrCat(
          "device_map (pipeline device): ", n, " is cuda:", n, " for this pipeline (", versions_.Cite(*versioned),
          "), and no CUDA device is available to this job, so moving the model there fails; pass device=-1 for "
          "cpu", Unavailable()));
    }
    if (convention_ == v1::CONVENTION_PIPELINE && !versions_.Has(Feature::kTfPipelineAccelDefault)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device_map (pipeline device): ", n, " unrecognized or not available: no row of ", OrderText(order),
          " is available to this job, and the pipeline raises ValueError (", versions_.Cite(Feature::kTfPipelineAccelDefault),
          "); pass device=-1 for cpu", Unavailable()));
    }
    if (convention_ == v1::CONVENTION_PIPELINE) {
      AutomaticChoiceHazards();
      AnswerCpu(absl::StrCat(rule, " device=", n, " with no row of ", OrderText(order), " available: cpu"));
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "device_map: ", n, " means accelerator index ", n, ", but no row of ", OrderText(order),
        " is available to this job (PyTorch: Cannot access accelerator device when none is available); pass "
        "device_map=\"cpu\"", Unavailable()));
  }
  const std::string type = r->backend->device_type();
  if (type == "hpu" && convention_ == v1::CONVENTION_PIPELINE) {  // H-HPU: pipeline makes it hpu:<n>
    RETURN_IF_ERROR(CheckHpuIndex(absl::StrCat("hpu:", n), static_cast<int>(std::min<int64_t>(n, INT32_MAX)),
                                  absl::StrCat("device_map (pipeline device ", n, ")"), req_.env()));
  }
  const int visible = static_cast<int>(r->vis.units.size());
  if (n >= visible) {
    return absl::FailedPreconditionError(absl::StrCat(
        convention_ == v1::CONVENTION_PIPELINE ? "device_map (pipeline device)" : "device_map", ": ", n,
        " means ", type, ":", n, ", but the job sees ", visible, " ", type, " device(s): ", Visible(*r)));
  }
  std::string device = absl::StrCat(type, ":", n);
  int job_index = static_cast<int>(n);
  if ((type == "mps" && convention_ == v1::CONVENTION_FROM_PRETRAINED) ||
      (type == "hpu" && convention_ == v1::CONVENTION_FROM_PRETRAINED)) {
    device = type;  // no index: the process's current device (set_module_tensor_to_device maps ints to "hpu")
    job_index = 0;
  } else if (type == "mps") {
    job_index = 0;  // pipeline: torch.device(f"mps:{device}"); MPS has one device
  }
  out_.add_explanation(absl::StrCat(rule, " int ", n, ": first available of ", OrderText(order), " is ",
                                    r->backend->name(), " -> ", device));
  Answer(*r, device);
  Place(*r, job_index)->set_device(device);
  return absl::OkStatus();
}

std::string Resolution::Unavailable() const {
  std::vector<std::string> why;
  for (const RowState& r : rows_) if (!r.available) why.push_back(r.reason);
  return why.empty() ? "" : absl::StrCat(" (", absl::StrJoin(why, "; "), ")");
}

}  // namespace devplace::placement::resolver_internal
