// Library versions the resolver emulates (docs/SEMANTICS.md section "Versions"): which
// Transformers / Accelerate release's rules apply to a request. Every change between releases is
// one row of data here (library, first release with the behaviour, what changed, source), so the
// resolver asks "does the emulated release have X" or "which order applies" instead of comparing
// version numbers itself, and its explanation cites the row's id.
#ifndef DEVPLACE_SERVER_PLACEMENT_VERSIONS_H_
#define DEVPLACE_SERVER_PLACEMENT_VERSIONS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace devplace::placement {

// A release number MAJOR.MINOR.PATCH (pre-release and local suffixes dropped).
struct Version {
  int major = 0;
  int minor = 0;
  int patch = 0;
  std::string ToString() const;  // "1.14.0"
  friend bool operator<(const Version& a, const Version& b) {
    if (a.major != b.major) return a.major < b.major;
    if (a.minor != b.minor) return a.minor < b.minor;
    return a.patch < b.patch;
  }
  friend bool operator>=(const Version& a, const Version& b) { return !(a < b); }
  friend bool operator==(const Version& a, const Version& b) { return !(a < b) && !(b < a); }
};

enum class Library { kTransformers, kAccelerate };
absl::string_view LibraryName(Library lib);  // "Transformers", "Accelerate"

// Yes/no behaviours that appeared in one release and stayed.
enum class Feature {
  kAccXlaImportOnly,      // is_torch_xla_available tests only the import (no TPU/CUDA check); USE_TORCH_XLA read
  kAccLocalRankDistributed,  // LOCAL_RANK alone makes a world of one MULTI_CPU/MULTI_XPU (before: a single process)
  kAccSetDevice,          // PartialState.set_device: ACCELERATE_TORCH_DEVICE kept over MULTI_CPU, MULTI_CPU is cpu
  kAccXlaBeforeCpu,       // XLA is chosen before the cpu flag (_prepare_backend); set_device keeps ACCELERATE_TORCH_DEVICE over it
  kAccSetDeviceByType,    // set_device tests the distributed type, not num_processes == 1 (0.29.0-0.29.1: bare default_device)
  kAccStockXpu,           // is_xpu_available accepts stock torch.xpu (before: only through IPEX)
  kAccIndexModulo,        // distributed device index = local_process_index % device_count()
  kAccXpuBare,            // default_device returns `xpu`, not `xpu:0`
  kAccXpuMemoryIpex,      // get_max_memory asks IPEX's mem_get_info for an XPU, behind a version check that fails
  kAccXpuMemoryIpexFixed,  // ... and the check that works (the two rows bound Accelerate 1.0.x's bug)
  kAccXpuMemoryStock,     // ... and stock torch.xpu.mem_get_info without IPEX (before: max_memory_allocated)
  kAccMultiCpuNeedsCpu,   // a multi-process launch without accelerator is MULTI_CPU only with cpu=True
  kAccBalancedXpuUncounted,  // get_balanced_memory no longer counts Intel GPUs by get_device_properties().dev_type
  kTfUseCpu,              // TrainingArguments has use_cpu (before: no_cuda)
  kTfStockXpu,            // is_torch_xpu_available accepts stock torch.xpu (before: only through IPEX)
  kTfTaMpsBranch,         // single-process TrainingArguments has its own MPS branch (before: PartialState's device)
  kTfTaTorchDeviceFallback,  // single-process TrainingArguments falls back to ACCELERATE_TORCH_DEVICE (before: cpu)
  kTfPipelineAccelDefault,  // pipeline(device=None) means accelerator index 0 (before: cpu)
  kTfPipelineXpuCheck,    // pipeline refuses a device naming xpu unless is_torch_xpu_available(check_device=True)
  kTfV5,                  // v5: no_cuda / use_mps_device removed, Accelerate >= 1.1.0 required
  kTfDeviceMapCudaRank,   // from_pretrained(device_map="cuda") becomes cuda:<LOCAL_RANK or 0>
  kTfNativeTpu,           // TrainingArguments selects tpu:0 when torch_tpu is available
  kTfXlaReadsEnv,         // is_torch_xla_available reads USE_TORCH_XLA (before: TrainingArguments' XLA check ignores it)
  kTfXlaCpuDevice,        // get_xla_device_type answers CPU for cpu (before: xla_real_devices raised on it)
  kTfNoXlaDeviceCheck,    // __post_init__ no longer hands its device to get_xla_device_type (before: hpu, mps, ... raised)
  kTfOwnBalancedMemory,   // from_pretrained uses Transformers' own get_balanced_memory, counting every accelerator key
  kTfCpuBudget90,         // from_pretrained budgets cpu at 90 % of the available RAM when the job passes no max_memory
  kTfTorchMin21,          // Transformers disables PyTorch below torch 2.1 (is_torch_available() False)
  kTfTorchMin22,          // ... below torch 2.2
  kTfTorchMin24,          // ... below torch 2.4
  kTfTorchMin25,          // ... below torch 2.5
  kTfNoUseTf,             // USE_TF / USE_TORCH are no longer read (before: they could disable PyTorch)
};

// Every row records where its boundary comes from: the commit(s) that brought the behaviour; `since`
// is the first release tag, patch releases included, that contains any of them (a change can reach a
// patch release through a release-branch commit and the main line through another: V-ACC-XLA-CPU).
// tests/placement/version_boundaries.txt, written from every release tag by
// scripts/fidelity/run.py --boundaries, lists (rule, library, commit, first tag containing it), and
// tests/placement/versions_test.cc holds every row to it. The oldest row of an order names the
// release commit of the oldest supported release (the order as it was there).
struct FeatureRule {
  Feature feature;
  Library library;
  Version since;            // first release with the behaviour
  absl::string_view id;     // rule id cited by explanations and docs, e.g. "V-ACC-MODULO"
  absl::string_view what;   // the behaviour from `since` on, and before it
  absl::string_view source; // owner/repo:path function, PR
  absl::string_view commits;  // space-separated abbreviated commit ids, each first tagged in `since`
};

// Backend orders that changed between releases.
enum class OrderKind {
  kAccDefaultDevice,  // PartialState.default_device (single process, Accelerator().device)
  kAccDistributed,    // PartialState._prepare_backend with LOCAL_RANK set, not cpu
  kAccMaxMemory,      // get_max_memory (device_map="auto" and friends)
  kTfSingle,          // TrainingArguments._setup_devices, single process (distributed type NO)
  kTfPipeline,        // Pipeline.__init__: which accelerator an int device (and device=None) means
};

struct OrderRule {
  OrderKind kind;
  Library library;
  Version since;                    // first release with this order (until the next row's)
  std::vector<std::string> order;   // PyTorch device types, first match wins
  absl::string_view id;             // e.g. "V-ACC-DD-1.13"
  absl::string_view source;
  absl::string_view commits;        // as FeatureRule::commits
};

// All rows, grouped by feature / kind, each group in ascending `since`.
const std::vector<FeatureRule>& FeatureRules();
const std::vector<OrderRule>& OrderRules();

// Supported ranges, for messages and docs: Transformers 4.30.0 or newer (newest release: 5.15.0),
// Accelerate 0.25.0 or newer (newest release: 1.14.0; 1.15.x, the main branch's 1.15.0.dev0, follows
// 1.14.0's rules). The newest releases are the default. A release newer than the rules know
// (NewerThanRules) is read with the newest release's rules, with a warning (V-SKEW).
Version MinVersion(Library lib);
Version NewestVersion(Library lib);
std::string SupportedRange(Library lib);  // "0.25.0 or newer (rules up to 1.14.0 ...)"

// V-SKEW: whether `v` is of a MAJOR.MINOR line newer than every line devplace's rules were read
// against: Transformers' newest release line (5.15), Accelerate's newest release line and the main
// branch's next one (1.15.0.dev0, read: no rule changed since 1.14.0). Patch releases of a known
// line are known. Such a release is answered with NewestVersion's rules and a warning; `strict`
// refuses it (FAILED_PRECONDITION).
bool NewerThanRules(Library lib, const Version& v);
// "Transformers 5.15.0, Accelerate 1.14.0": the newest release of each library the rules know (for
// devplaced --version, devplace version and devplace_build_info).
std::string NewestRules();

// Parses a version string: "X.Y" or "X.Y.Z", each part decimal digits, optionally followed by a
// pre-release or local suffix (".dev0", "rc1", "a2", "b1", ".post1", "+cu121"), which is dropped
// (a pre-release of X.Y.Z follows X.Y.Z's rules). INVALID_ARGUMENT naming `field` when it does
// not parse or is older than the library's oldest supported release (the message gives the
// range). A release newer than the rules is returned as it is (NewerThanRules says so).
absl::StatusOr<Version> ParseLibraryVersion(Library lib, absl::string_view text, absl::string_view field);

// Whether the Python package version `text` is below `min` in the order of packaging's version.parse
// (PEP 440, as packaging's VERSION_PATTERN reads it: case-insensitive, surrounding whitespace and a
// leading "v" allowed): [N!]N(.N)*, an optional pre-release (a, b, c, rc, alpha, beta, pre, preview),
// post-release (-N, post, rev, r) and dev-release (dev) segment, each with an optional separator and number,
// then an optional +local label. A pre-release or dev release of `min` ("2.5.0a0+872d972e41",
// "2.5.0rc1", "2.5.0.dev20240901") is below it, and then *prerelease_of_min is set; a local label or a
// post-release is not. nullopt when packaging would raise InvalidVersion, or for more than 256 bytes.
std::optional<bool> PackageVersionBelow(absl::string_view text, const Version& min,
                                        bool* prerelease_of_min = nullptr);

// V-TF-TORCH: (minimum torch, its row) for every release that raised the torch release below which
// Transformers disables PyTorch, ascending.
const std::vector<std::pair<Version, const FeatureRule*>>& TorchMinimumRules();

// The pair of releases a request emulates.
class LibraryVersions {
 public:
  // The newest releases devplace knows.
  LibraryVersions() : transformers_(NewestVersion(Library::kTransformers)), accelerate_(NewestVersion(Library::kAccelerate)) {}
  // From ResolveDeviceRequest.transformers_version / accelerate_version (empty = newest).
  // INVALID_ARGUMENT for a malformed version or one older than supported, and for Transformers >= 5
  // with Accelerate < 1.1.0 (v5's minimum). With transformers empty and Accelerate < 1.1.0, the last
  // Transformers 4.x line (4.57.0) is emulated instead of the newest. A release newer than the
  // rules (NewerThanRules) is emulated as NewestVersion, and remembered as the job's (V-SKEW).
  static absl::StatusOr<LibraryVersions> FromRequest(absl::string_view transformers, absl::string_view accelerate);
  // A release as the request names it: `text` empty = the newest; `detected_in` non-empty = `text`
  // was read from the job's packages there (ResolveDeviceRequest.job_environment, V-JOB-VERSION),
  // which the explanation and any INVALID_ARGUMENT say.
  struct Requested {
    std::string text;
    std::string detected_in;
  };
  static absl::StatusOr<LibraryVersions> FromRequest(const Requested& transformers, const Requested& accelerate);

  const Version& transformers() const { return transformers_; }
  const Version& accelerate() const { return accelerate_; }
  bool transformers_detected() const { return !transformers_detected_in_.empty(); }
  bool accelerate_detected() const { return !accelerate_detected_in_.empty(); }
  bool transformers_newest() const { return transformers_newest_; }
  bool accelerate_newest() const { return accelerate_newest_; }
  // V-SKEW: the job's own release, as the request named it or the job's packages gave it
  // (nullopt when neither did), and whether it is newer than the rules: then the emulated
  // release above is NewestVersion, not this one.
  const std::optional<Version>& transformers_job() const { return transformers_job_; }
  const std::optional<Version>& accelerate_job() const { return accelerate_job_; }
  bool transformers_newer() const { return transformers_newer_; }
  bool accelerate_newer() const { return accelerate_newer_; }
  // One warning per library newer than the rules, naming the job's release, where it came from,
  // the release whose rules were applied and how to apply them without the warning (V-SKEW).
  std::vector<std::string> SkewWarnings() const;

  bool Has(Feature f) const;
  const FeatureRule& Rule(Feature f) const;
  // V-TF-TORCH: the torch release below which the emulated Transformers disables PyTorch, and its
  // rule; nullopt before Transformers 4.52 (no minimum).
  std::optional<std::pair<Version, const FeatureRule*>> TorchMinimum() const;
  // The order in force for the emulated release.
  const OrderRule& Order(OrderKind kind) const;
  // "V-ACC-MODULO (Accelerate 0.32.0 < 0.33.0: <what>; <source>)": the rule, whether the
  // emulated release is on its new or old side, and the source, for explanations.
  std::string Cite(Feature f) const;
  std::string Cite(const OrderRule& r) const;
  // One explanation line: which releases are emulated, and where an empty field meant newest.
  std::string Describe() const;

 private:
  const Version& Of(Library lib) const { return lib == Library::kTransformers ? transformers_ : accelerate_; }
  Version transformers_, accelerate_;
  bool transformers_newest_ = true, accelerate_newest_ = true;
  bool transformers_v4_for_accelerate_ = false;
  std::string transformers_detected_in_, accelerate_detected_in_;
  std::optional<Version> transformers_job_, accelerate_job_;
  bool transformers_newer_ = false, accelerate_newer_ = false;
};

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_VERSIONS_H_
