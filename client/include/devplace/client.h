// libdevplace: the C++ client of devplaced, the per-host daemon that tells PyTorch jobs which
// device to use (Hugging Face Transformers / Accelerate rules) and serves the host's accelerator
// inventory.
//
//   absl::StatusOr<devplace::Client> client = devplace::Client::Connect();
//   devplace::ResolveOptions options = devplace::ResolveOptions::FromEnvironment();
//   options.workload = devplace::v1::WORKLOAD_INFERENCE;
//   options.device_map = "auto";
//   absl::StatusOr<devplace::v1::ResolveDeviceResponse> answer = client->Resolve(options);
//   if (answer.ok()) UseDevice(answer->device());   // e.g. "cuda:0", in the job's numbering
//
// Data model: the generated messages of devplace/v1/devplace.proto (package devplace.v1); their
// field comments document every unit (`_bytes` are bytes, `_ms` milliseconds) and value.
//
// Errors: every call returns absl::Status / absl::StatusOr, never throws. A gRPC status maps 1:1
// onto the absl code of the same number and name, with the server's message unchanged:
// INVALID_ARGUMENT (malformed request; the message names the field), FAILED_PRECONDITION (this
// host or the job's visibility cannot satisfy an explicit request), UNAVAILABLE (daemon not
// reachable, or no inventory yet), DEADLINE_EXCEEDED (the per-call deadline passed), CANCELLED.
//
// Thread-safety: a Connection made by MakeGrpcConnection, and a Client over it, may be used from
// any number of threads at once; copies of a Client share one Connection (one gRPC channel).
// ResolveOptions is a plain value.
#ifndef DEVPLACE_CLIENT_H_
#define DEVPLACE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "devplace/v1/devplace.pb.h"

namespace devplace {

// Called with each inventory a watch receives; return false to stop watching.
using InventoryCallback = std::function<bool(const v1::Inventory&)>;

// Ends a running watch from another thread: Client::Watch(known_revision, callback, &canceller)
// returns CANCELLED soon after Cancel(), wherever it is blocked (waiting for the next revision or
// connecting). Cancel() before the watch starts makes it return CANCELLED at once. Thread-safe;
// one canceller serves one watch at a time and must outlive it.
class WatchCanceller {
 public:
  // Idempotent.
  void Cancel();
  bool cancelled() const;
  // For Connection implementations: `hook` is run by Cancel() (at once when already cancelled)
  // until the watch clears it with an empty function. The hook runs under the canceller's lock,
  // so clearing it waits for a running hook: clear it before what the hook touches is destroyed,
  // and never call Cancel() or SetHook() from inside a hook.
  void SetHook(std::function<void()> hook);

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> hook_;
};

// The transport under a Client: one virtual per RPC of devplace.v1.DevicePlacement plus the
// standard health check. Implement it (or use MockConnection from devplace/mock_connection.h) to
// test code that takes a Client without a daemon. Implementations must be thread-safe.
class Connection {
 public:
  virtual ~Connection() = default;

  // DevicePlacement.ResolveDevice.
  virtual absl::StatusOr<v1::ResolveDeviceResponse> ResolveDevice(
      const v1::ResolveDeviceRequest& request) = 0;
  // DevicePlacement.GetInventory: the current snapshot.
  virtual absl::StatusOr<v1::Inventory> GetInventory() = 0;
  // DevicePlacement.ListBackends: the hardware table.
  virtual absl::StatusOr<v1::ListBackendsResponse> ListBackends() = 0;
  // DevicePlacement.RefreshInventory: re-probes now, returns the resulting snapshot.
  virtual absl::StatusOr<v1::Inventory> RefreshInventory() = 0;
  // DevicePlacement.WatchInventory. Blocks, calling `on_inventory` on this thread with the current
  // snapshot (always sent: this call passes no `known_epoch`, and revisions are comparable only
  // within one Inventory.epoch; `known_revision` is forwarded as is) and then each
  // new revision. Returns:
  //   OK                 `on_inventory` returned false (the call is then cancelled);
  //   ABORTED            the daemon ended the stream itself (it shuts down): reconnect to go on;
  //   UNAVAILABLE        the daemon could not be reached or the connection broke;
  //   CANCELLED          cancelled (a WatchCanceller, see the overload below);
  //   DEADLINE_EXCEEDED  ConnectOptions::watch_timeout passed.
  virtual absl::Status WatchInventory(uint64_t known_revision, InventoryCallback on_inventory) = 0;
  // The same, ended early by `canceller` (may be null). The default implementation returns
  // CANCELLED when `canceller` is already cancelled, else calls the overload above (so a
  // canceller only takes effect between watches); the gRPC connection cancels the call itself.
  virtual absl::Status WatchInventory(uint64_t known_revision, InventoryCallback on_inventory,
                                      WatchCanceller* canceller);
  // grpc.health.v1.Health/Check for service "" (the whole server): true when SERVING, false for
  // any other serving status. Errors as for any call (UNAVAILABLE when unreachable).
  virtual absl::StatusOr<bool> Health() = 0;
  // Shared hosts: DevicePlacement.PickDevices, LeaseRelease and LeaseKeepAlive. The gRPC
  // connection gives PickDevices the unary deadline plus the request's wait_ms. The defaults answer
  // UNIMPLEMENTED, so a Connection written before these calls existed still builds.
  virtual absl::StatusOr<v1::PickDevicesResponse> PickDevices(const v1::PickDevicesRequest& request);
  virtual absl::StatusOr<v1::LeaseReleaseResponse> LeaseRelease(const v1::LeaseReleaseRequest& request);
  virtual absl::StatusOr<v1::LeaseKeepAliveResponse> LeaseKeepAlive(const v1::LeaseKeepAliveRequest& request);
};

// How to reach the daemon.
struct ConnectOptions {
  // Used by Client::Connect only: "unix:/path/to.sock" or "host:port" (any gRPC target).
  // Empty = DefaultTarget(). A unix socket given here (or in DEVPLACE_ADDRESS) must pass
  // CheckUnixSocket() too, unless `trust_any_socket` is set.
  std::string address;
  // Skip CheckUnixSocket() for an explicit address (a socket owned by a dedicated daemon user).
  bool trust_any_socket = false;
  // Deadline of each unary call (ResolveDevice, GetInventory, ListBackends, RefreshInventory,
  // Health), measured from the call's start. Zero, negative or absl::InfiniteDuration() = none.
  absl::Duration timeout = absl::Seconds(5);
  // Deadline of a whole WatchInventory call; default none (a watch runs until stopped).
  absl::Duration watch_timeout = absl::InfiniteDuration();
  // How this program's users choose the daemon, as an unreachable daemon's message names it ("[devplace
  // target T (from ...); set DEVPLACE_ADDRESS or ... to choose the daemon]"): empty =
  // "ConnectOptions::address", the C++ way; the devplace CLI sets "--address".
  std::string address_option;

  // TLS to a daemon's tls:host:port listener. Each empty field is filled from its environment
  // variable (DEVPLACE_TLS_CA, DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY, DEVPLACE_TLS_SERVER_NAME) when
  // that is set and non-empty: a field set here wins over the environment. The channel uses TLS
  // when tls_ca or tls_cert (after that fill) is set, and only for host:port targets: unix:
  // targets stay plaintext (the daemon's unix sockets are; file permissions protect them).
  //
  // PEM bundle of the CAs that sign the daemon's certificate; empty = gRPC's default roots.
  std::string tls_ca;
  // PEM client certificate chain and its unencrypted PEM private key, for mutual TLS; both or
  // neither.
  std::string tls_cert;
  std::string tls_key;
  // The name the daemon's certificate must carry (SAN), when it differs from the target's host
  // (e.g. dialling 10.0.0.5:7466 for a certificate issued to node1); empty = the target's host.
  std::string tls_server_name;
};

// The daemon's address as a gRPC target, by the daemon's own defaults: env DEVPLACE_ADDRESS when
// set and non-empty; else the first of "unix:/run/devplace/devplace.sock",
// "unix:$XDG_RUNTIME_DIR/devplace.sock" and "unix:/tmp/devplace-<euid>/devplace.sock" that is a
// socket this process may read and write and that CheckUnixSocket() accepts; else
// "127.0.0.1:7465" (so a job outside the socket's group still reaches a root daemon over
// loopback TCP; Client::Connect then checks its owner with CheckLocalListener()). `notes`, when not null, receives one line per candidate passed over and why
// (e.g. "unix:/tmp/devplace-0/devplace.sock refused: directory ... is owned by uid 65534").
std::string DefaultTarget();
std::string DefaultTarget(std::vector<std::string>* notes);

// Whether a unix socket may be trusted as the daemon (so nobody can squat a path and answer in
// its place): the socket is owned by root or this process's effective uid, and its directory is
// owned by root or that uid and not writable by group or others unless it has the sticky bit.
// OK, NOT_FOUND when `path` does not exist, or FAILED_PRECONDITION saying what is wrong.
absl::Status CheckUnixSocket(const std::string& path);

// Whether the TCP listener on this host at `address` (a numeric loopback "127.0.0.1:7465" or
// "[::1]:7465") may be trusted as the daemon, so that an unprivileged user who binds the port while
// no daemon holds it cannot answer in its place: every listening socket that would receive the
// connection (/proc/net/tcp and tcp6: the same address, its wildcard, an IPv6 wildcard or
// v4-mapped address for IPv4) is owned by root or this process's effective uid. OK;
// NOT_FOUND when nothing listens there; FAILED_PRECONDITION naming the owner's uid; INVALID_ARGUMENT
// for anything but a numeric loopback host:port. Client::Connect applies it to the default
// 127.0.0.1:7465 only: an address named in ConnectOptions::address or DEVPLACE_ADDRESS is the
// caller's choice. The check happens before the channel connects (a listener that changes in
// between is not seen).
absl::Status CheckLocalListener(const std::string& address);

// A Connection over a gRPC channel to `target` ("unix:/path" or "host:port"), with the deadlines
// and TLS settings of `options` (options.address is ignored; TLS as described at
// ConnectOptions::tls_ca, environment included; plaintext otherwise). Never null and never
// blocks: the channel connects on the first call, and an unreachable target makes calls fail with
// UNAVAILABLE (calls fail fast; they do not wait for the daemon to come up). TLS files that cannot
// be used (see Client::Connect) make every call fail with that INVALID_ARGUMENT instead; a daemon
// that refuses the handshake (certificate not trusted, no or wrong client certificate, a plaintext
// port) makes calls fail with UNAVAILABLE.
std::shared_ptr<Connection> MakeGrpcConnection(const std::string& target,
                                               const ConnectOptions& options = {});

// What a job passes to ResolveDevice; see ResolveDeviceRequest in devplace.proto for each field.
struct ResolveOptions {
  // Required: WORKLOAD_TRAINING or WORKLOAD_INFERENCE (UNSPECIFIED is INVALID_ARGUMENT).
  v1::Workload workload = v1::WORKLOAD_UNSPECIFIED;
  // The library API to emulate; UNSPECIFIED = the workload's default.
  v1::Convention convention = v1::CONVENTION_UNSPECIFIED;
  // from_pretrained's device_map / pipeline's device: "auto", "cuda:1", "1", "" (None), ...
  std::string device_map;
  // TrainingArguments(use_cpu=True) / Accelerator(cpu=True).
  bool use_cpu = false;
  // The process's local rank (>= 0) and the job's process count (>= 1); unset = not given.
  std::optional<int32_t> local_rank;
  std::optional<int32_t> world_size;
  // The job's placement environment (visibility masks, ACCELERATE_*, ...). A key with an empty
  // value is "set but empty", which the rules treat differently from absent.
  std::map<std::string, std::string> env;
  // Backends the job's PyTorch can use ("cuda", "rocm", "xpu", ...); empty = assume all.
  std::vector<std::string> runtime_backends;
  // Accelerator /dev nodes the job can open. nullopt = unknown (all host nodes assumed visible);
  // an empty vector = the job sees no accelerator node (e.g. a container without GPU access).
  std::optional<std::vector<std::string>> job_device_nodes;
  // Turn hazards into FAILED_PRECONDITION instead of warnings.
  bool strict = false;
  // Model size in bytes, for `balanced` max_memory budgets.
  std::optional<uint64_t> model_size_bytes;
  // Library releases whose rules to emulate ("4.46.3", "1.14.0"); empty = the newest the daemon
  // knows. Malformed or older than supported: INVALID_ARGUMENT naming the field and the supported
  // range. Newer than the daemon's rules: its newest rules and a warning (rule V-SKEW; the
  // response's *_newer_than_rules), FAILED_PRECONDITION only with `strict`.
  std::string transformers_version;
  std::string accelerate_version;
  // The job's Python packages (ReadPythonEnvironment, AskPythonInterpreter); nullopt = not read.
  // The daemon fills empty runtime_backends / *_version from them (rules V-JOB-BUILD, V-JOB-VERSION).
  std::optional<v1::JobEnvironment> job_environment;
  // What Client::Resolve answers when it gets no answer from the daemon (UNAVAILABLE: not running,
  // not reachable, or no inventory yet; DEADLINE_EXCEEDED: no answer within the timeout). Not sent.
  //   "" or "none"  return that error (the default: a job that must not run on the wrong device
  //                 stops);
  //   "cpu"         answer device "cpu" (backend ROW_CPU, devices ["cpu"]) with a warning that
  //                 starts "devplace fallback:" and quotes the error, so the job still starts.
  // Any other value: Resolve returns INVALID_ARGUMENT naming DEVPLACE_FALLBACK and the accepted
  // values. FromEnvironment() reads it from env DEVPLACE_FALLBACK. Other errors (a bad request,
  // FAILED_PRECONDITION, a refused socket) are never replaced.
  std::string fallback;
  // The devices Kubernetes DRA allocated to the job (ReadDeviceAllocation); nullopt = not known.
  // The daemon treats exactly the ones it matches as the job's (rule P-DRA).
  std::optional<v1::DeviceAllocation> device_allocation;

  // The request message carrying these options.
  v1::ResolveDeviceRequest ToRequest() const;

  // Options describing the calling process: every variable of PlacementEnvironmentVariables()
  // that is set (empty values included) goes into `env`, except that LOCAL_RANK (an integer >= 0)
  // and WORLD_SIZE (an integer >= 1) fill `local_rank` / `world_size` instead; other values of
  // those two (malformed, out of range, Accelerate's "-1") stay in `env` verbatim so the daemon
  // applies its rules and reports INVALID_ARGUMENT where they are wrong. `job_device_nodes` is
  // JobDeviceNodes("/dev") (present even when empty: this process sees no accelerator);
  // `fallback` is env DEVPLACE_FALLBACK (unset = "").
  // `device_allocation` is ReadDeviceAllocation(kDraMetadataDir) when that directory exists (a
  // container of a Kubernetes pod with DRA claims), else nullopt. Other fields keep their
  // defaults; set `workload` before resolving.
  static ResolveOptions FromEnvironment();
  // The same, scanning `dev_dir` (a fake /dev tree in tests) for device nodes; the nodes are still
  // reported as "/dev/..." paths.
  static ResolveOptions FromEnvironment(const std::string& dev_dir);
  // Options for a job described by its caller (a scheduler), reading nothing of the calling
  // process: `workload`, the job's placement environment `job_env` (only the variables of
  // PlacementEnvironmentVariables() are kept; LOCAL_RANK / WORLD_SIZE are read as in
  // FromEnvironment()), and the job's accelerator /dev nodes (nullopt = unknown, every host node
  // assumed visible; empty = none).
  static ResolveOptions ForJob(v1::Workload workload, const std::map<std::string, std::string>& job_env,
                               std::optional<std::vector<std::string>> job_device_nodes = std::nullopt);
};

// The environment variables the daemon reads from ResolveDeviceRequest.env, in a fixed order:
// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES,
// ZE_AFFINITY_MASK, ZE_FLAT_DEVICE_HIERARCHY, ZE_ENABLE_PCI_ID_DEVICE_ORDER (Level Zero's device
// order, E-ORDER), ASCEND_RT_VISIBLE_DEVICES, MLU_VISIBLE_DEVICES, CN_VISIBLE_DEVICES,
// MUSA_VISIBLE_DEVICES, SDAA_VISIBLE_DEVICES, NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES,
// HABANA_VISIBLE_MODULES, HABANA_VISIBLE_DEVICES (the Gaudi container runtime's variable: only
// explained, H-HPU), TPU_VISIBLE_CHIPS, LOCAL_RANK, WORLD_SIZE, ACCELERATE_USE_CPU,
// ACCELERATE_TORCH_DEVICE, USE_TORCH_XLA, USE_TF, USE_TORCH (Transformers before 5.0 reads the last two:
// V-TF-USE-TF).
const std::vector<std::string>& PlacementEnvironmentVariables();

// Near misses of those variables (CUDA_VISIBLE_DEVICE, LOCAL_RANKS, cuda_visible_devices) are
// captured too, so the daemon can warn that nothing reads them (rule E-TYPO, decided by the
// daemon). PossiblePlacementTypo() is a cheap superset of the daemon's rule: `name` is printable
// ASCII, not exactly a placement variable, and for some placement variable of length n >= 8 (the
// daemon's targets; USE_TF is none) its length differs by at most 2 and at least n - 7 of that variable's upper-cased two-character pieces
// occur in it (an edit breaks at most 3 pieces, so 2 edits leave n - 1 - 6).
// FromEnvironment() and ForJob() put at most kMaxCapturedNearMisses such names, the first in byte
// order, into `env` with an empty value (the value is never read, and is not shared).
inline constexpr int kMaxCapturedNearMisses = 8;
bool PossiblePlacementTypo(const std::string& name);

// The Python distributions whose metadata describes a job, PEP 503-normalised: torch, its device
// plug-ins (torch-npu, torch-mlu, torch-musa, torch-sdaa, intel-extension-for-pytorch,
// habana-torch-plugin, torch-xla, torch-neuronx, torch-tpu), transformers,
// accelerate. The Python client's JOB_PYTHON_PACKAGES is generated from this list.
const std::vector<std::string>& JobPythonPackages();

// Reads those distributions' metadata (*.dist-info/METADATA, *.egg-info/PKG-INFO) in a Python
// environment without running anything, as the environment's Python would find it: `dir` is a
// site-packages directory itself (one holding *.dist-info or *.egg-info entries), or a prefix: a
// venv (its pyvenv.cfg's `version` names lib/python3.X; with `include-system-site-packages = true`
// the base environment's site directories follow the venv's, the base being the nearest of
// `home` and its parents holding lib/python3.X/os.py, else the directory above `home`), a conda
// prefix (conda-meta/python-3.X.*.json names lib/python3.X) or another prefix. A prefix's site
// directories are those CPython's site module adds, Debian's included: lib/python3.X/site-packages,
// lib64/python3.X/site-packages, local/lib/python3.X/dist-packages, lib/python3/dist-packages,
// lib/python3.X/dist-packages (without a known X: every lib/python3.*/site-packages, then
// lib/python3/dist-packages). The first of each name wins, in that order. Not read: the user's own
// site directory, .pth files, zip files.
//
// Bounded (docs/CLIENT.md, "What the clients read"): only entries named after a wanted
// distribution are opened; a metadata file must be a regular file, and of it only the headers in
// its first 64 KiB are read; the whole call reads at most 16 MiB within 5 s. What cannot be used
// becomes a line of `problems` (sent to the daemon, which warns), never an error: a package whose
// Version is not UTF-8, too long, or (transformers, accelerate) not a release is sent without one.
// INVALID_ARGUMENT when `dir` is not a directory or is none of the above.
absl::StatusOr<v1::JobEnvironment> ReadPythonEnvironment(const std::string& dir);

// Asks the interpreter `python` once (`python -I -c ...`, isolated: no user site, no PYTHON*
// variables; stdin /dev/null; in a process group of its own) for its sys.path, and reads those
// directories' packages as ReadPythonEnvironment reads a site directory (at most 256 entries;
// entries that are not directories, such as zip files, are skipped). Its stdout and stderr are
// drained together; it must answer within `timeout`, after which it and its process group are
// killed (DEADLINE_EXCEEDED); a child it leaves holding its output is killed 200 ms after it exits.
// INVALID_ARGUMENT when it cannot be run or exits non-zero (its stderr's last line in the message).
absl::StatusOr<v1::JobEnvironment> AskPythonInterpreter(const std::string& python,
                                                        absl::Duration timeout = absl::Seconds(10));

// Where the kubelet puts Kubernetes DRA Device Metadata inside a container (Kubernetes
// documentation, "Access DRA Device Metadata"; beta in Kubernetes 1.37).
inline constexpr char kDraMetadataDir[] = "/var/run/kubernetes.io/dra-device-attributes";

// The devices Kubernetes Dynamic Resource Allocation allocated to this container, for
// ResolveOptions::device_allocation (rule P-DRA): every `<claim>/<request>/<driver>-metadata.json`
// under `dir`/resourceclaims (claims the pod names) and `dir`/resourceclaimtemplates (claims made
// from a template, by the pod's claim name), in path order. Of each file, a stream of DeviceMetadata
// objects (one per API version, newest first), the first of apiVersion
// metadata.resource.k8s.io/v1alpha1 is read (what follows it is not): each requests[].devices[]
// entry becomes one AllocatedDevice with its scalar attributes as text (at most 64: the ones
// that identify the hardware, uuid, the PCI address, minor and index, plain or driver-qualified,
// first, then the others by name, with a problem naming the device when some are left out; each
// key and value at most 256 bytes; more than 1024 devices are cut, with a problem saying so).
// Claim and request directory names that are not UTF-8 are sent with their odd bytes written \xNN.
//
// Bounded (docs/CLIENT.md, "What the clients read"): a metadata file must be a regular file of at
// most 1 MiB holding strict JSON (RFC 8259: UTF-8, no NaN, numbers that fit a double, no name
// twice in an object, at most 32 levels deep); the first 1024 entries of a directory by name, 64
// values of a file, 16 MiB in all, within 5 s. A file that cannot be used (not a regular file,
// unreadable, too large, not such JSON, no object of that apiVersion, empty: a driver may write it
// after the container starts) is listed in `problems` ("<path under dir>: <why>", valid UTF-8, at
// most 64 of at most 1024 bytes), which the daemon warns about; nothing a file holds makes the
// request one the daemon refuses. NOT_FOUND when `dir` does not exist; INVALID_ARGUMENT when it is
// not a directory or cannot be read.
absl::StatusOr<v1::DeviceAllocation> ReadDeviceAllocation(const std::string& dir = kDraMetadataDir);

// The accelerator device nodes under `dev_dir` (default "/dev"), as sorted "/dev/..." paths:
// nvidia[0-9]*, dri/renderD*, dri/card*, neuron*, vfio/[0-9]*, accel* and accel/accel*,
// davinci[0-9]*, cambricon_dev*, mtgpu.*. Directories and names that are not UTF-8 are skipped; a
// missing `dev_dir` or subdirectory contributes nothing. At most 1024 (the daemon's bound), the
// first in path order, listed within 2 s.
std::vector<std::string> JobDeviceNodes(const std::string& dev_dir = "/dev");

// What a job asks PickDevices for on a shared host (rule P-PICK; the fields of PickDevicesRequest
// in devplace.proto say each one's range and errors).
struct PickOptions {
  // Devices wanted, 1 to 64.
  uint32_t count = 1;
  // Only devices with at least this much free memory; 0 = any.
  uint64_t min_free_bytes = 0;
  // Whether a device other processes already use may be picked (after the idle ones).
  bool allow_shared = false;
  // The row; ROW_UNSPECIFIED = the row of the job's ResolveDevice answer.
  v1::Row row = v1::ROW_UNSPECIFIED;
  // Who holds the lease (it ends when its holder does, and the devices go to the next pick):
  // UNSPECIFIED = the job, as JobLeaseHolder() says (this process's group when it leads it, else
  // this process with a warning), or a TTL lease when `ttl` is set (over TCP FAILED_PRECONDITION
  // without it); LEASE_HOLDER_PROCESS for this process only (the default before, without the
  // warning); LEASE_HOLDER_PARENT for a command whose parent (a shell) runs the job;
  // LEASE_HOLDER_PROCESS_GROUP for this process's group, which it must lead (held while any
  // member lives; FAILED_PRECONDITION when it does not lead it).
  v1::LeaseHolder holder = v1::LEASE_HOLDER_UNSPECIFIED;
  // LEASE_HOLDER_PARENT: the ancestor that holds the lease (0 = this process's parent).
  int holder_pid = 0;
  // A TTL lease's time to live (1 s to a day; zero = the daemon's 5 minutes).
  absl::Duration ttl = absl::ZeroDuration();
  // How long the daemon may wait for devices to be released (at most an hour; zero = not at all).
  absl::Duration wait = absl::ZeroDuration();
  // The job the devices are for; FromEnvironment() by default (its masks, /dev nodes and DRA
  // allocation bound the pick). Its workload may stay UNSPECIFIED (training is assumed).
  ResolveOptions job = ResolveOptions::FromEnvironment();

  v1::PickDevicesRequest ToRequest() const;
};

// The absl::Status payload (type URL) in which Connection::PickDevices returns the waiter id a
// waiting pick was given (PickDevicesRequest.waiter_id) when its call failed; Client::Pick sends it
// back when it asks again.
inline constexpr char kWaiterIdPayload[] = "type.googleapis.com/devplace.WaiterId";

// Who holds a lease for this job (Client::Pick with PickOptions::holder UNSPECIFIED and no ttl;
// Python's devplace.job_holder() chooses the same way). When this process leads its process group
// (its pid is its group id: a command typed at an interactive shell, a container's entrypoint, a
// process started with setsid), LEASE_HOLDER_PROCESS_GROUP and no warning: the lease lasts while
// any process of the group runs, so workers this process forks or spawns keep it when it is
// killed (SIGKILL, the OOM killer) and it ends with the last of them; a worker that leaves the
// group (setsid, setpgid) is not covered. Otherwise (a process in the group of the script, shell
// or srun task that started it, a group that is not this job's alone) LEASE_HOLDER_PROCESS, this
// process only, and `warning` says so and how to hold the lease for the workers too.
struct JobHolder {
  v1::LeaseHolder holder = v1::LEASE_HOLDER_PROCESS;
  std::string warning;  // empty for LEASE_HOLDER_PROCESS_GROUP
};
JobHolder JobLeaseHolder();

// Applies a pick's environment to this process (setenv for PickDevicesResponse.env, unsetenv for
// .unset), so that a runtime initialised afterwards (CUDA, ROCm, ...) sees exactly the picked
// devices: call it before anything initialises the device runtime.
void ApplyPickEnvironment(const v1::PickDevicesResponse& pick);

// The devplaced client: a cheap, copyable value over a shared Connection.
class Client {
 public:
  // A client over MakeGrpcConnection(options.address, or DefaultTarget() when empty). Does not
  // contact the daemon. INVALID_ARGUMENT for a malformed address (a "unix:" target without a
  // path), and for TLS files that cannot be used (unreadable, empty, tls_ca or tls_cert without a
  // "-----BEGIN CERTIFICATE-----" block, tls_key without a PEM private key, tls_cert without
  // tls_key or the other way round); that message starts with the option's name ("tls_ca=PATH: ")
  // or, when the value came from the environment, the variable's ("DEVPLACE_TLS_CA=PATH: ").
  // FAILED_PRECONDITION for an explicit unix socket CheckUnixSocket() refuses. Its calls'
  // UNAVAILABLE messages name the target, whether DEVPLACE_ADDRESS was set, and the default
  // sockets passed over and why.
  static absl::StatusOr<Client> Connect(ConnectOptions options = {});

  // A client over `connection` (e.g. a MockConnection in tests). `connection` must not be null.
  explicit Client(std::shared_ptr<Connection> connection);

  // ResolveDevice(options.ToRequest()): the device string, devices, explanation and warnings; when
  // the daemon gives no answer and options.fallback is "cpu", the fallback answer described there.
  absl::StatusOr<v1::ResolveDeviceResponse> Resolve(const ResolveOptions& options) const;
  // The current inventory snapshot.
  absl::StatusOr<v1::Inventory> Inventory() const;
  // The hardware table.
  absl::StatusOr<v1::ListBackendsResponse> Backends() const;
  // Re-probes the host now; the resulting inventory.
  absl::StatusOr<v1::Inventory> Refresh() const;
  // Connection::WatchInventory: blocks until `on_inventory` returns false, the stream ends or
  // `canceller` (optional) is cancelled from another thread; the statuses are listed there.
  absl::Status Watch(uint64_t known_revision, InventoryCallback on_inventory,
                     WatchCanceller* canceller = nullptr) const;
  // Whether the daemon reports SERVING.
  absl::StatusOr<bool> Health() const;
  // Shared hosts: picks and leases devices for a job (PickDevices); the environment to set is
  // in the answer (ApplyPickEnvironment). By default (PickOptions::holder UNSPECIFIED, no ttl) the
  // lease is held for the job as JobLeaseHolder() says, and its warning, if any, is the last of the
  // answer's warnings; over TCP such a pick is FAILED_PRECONDITION (a lease needs a ttl there).
  // A pick with a wait that fails UNAVAILABLE (the daemon is restarting: its socket is gone or
  // refused, or it answered "shutting down") is asked again until the wait ends: after 100 ms,
  // then twice as long each time up to 2 s (100, 200, 400, 800 ms, 1.6 s, 2 s, 2 s, ...), with the
  // time left as its wait and the waiter id the daemon gave it, so that a restarted daemon gives
  // it back its place in the queue (PickDevicesRequest.waiter_id). When the wait ends first, the
  // last UNAVAILABLE is returned as it was.
  absl::StatusOr<v1::PickDevicesResponse> Pick(const PickOptions& options) const;
  // Ends a lease now (LeaseRelease): its description as it was.
  absl::StatusOr<v1::LeaseInfo> ReleaseLease(const std::string& lease_id) const;
  // Extends a TTL lease to `ttl` from now (LeaseKeepAlive; zero = the daemon's 5 minutes).
  absl::StatusOr<v1::LeaseInfo> KeepLeaseAlive(const std::string& lease_id, absl::Duration ttl) const;

  // The underlying connection.
  const std::shared_ptr<Connection>& connection() const { return connection_; }

 private:
  std::shared_ptr<Connection> connection_;
};

}  // namespace devplace

#endif  // DEVPLACE_CLIENT_H_
