// The resolver: docs/SEMANTICS.md sections 4-8 and 10 as one pure function. Given the host inventory and a
// job's request it returns the device string the job should hand to PyTorch, in the job's own
// numbering, with the ordered explanation (rule ids T-*, I-*, E-*, P*), warnings and the host
// identity of every device used. No I/O, no locks: callers pass an immutable snapshot.
#ifndef DEVPLACE_SERVER_PLACEMENT_RESOLVER_H_
#define DEVPLACE_SERVER_PLACEMENT_RESOLVER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/versions.h"

namespace devplace::placement {

// Resolves `request` against `inventory`.
//
// Apple `mps` never appears in a Linux probe; the resolver takes it from the inventory like any
// other row (a Backend with row ROW_MPS and one device), so macOS hosts and tests inject it there.
//
// Errors:
//  - INVALID_ARGUMENT: workload unspecified; convention of the other workload; device_map given
//    for training; malformed device_map (grammar G1-G6, unknown keyword, negative int for
//    from_pretrained, `disk`); LOCAL_RANK / WORLD_SIZE not integers or disagreeing with the
//    fields, local_rank < 0, world_size < 1, local_rank >= world_size; ACCELERATE_USE_CPU not a truth
//    value, or USE_TORCH_XLA not one under an Accelerate release that reads it (0.28.0 on; older ones
//    ignore any value); malformed ACCELERATE_TORCH_DEVICE; transformers_version /
//    accelerate_version malformed or older than supported (Transformers 4.30.0, Accelerate 0.25.0;
//    a newer release than the rules know is a warning, V-SKEW), or Transformers >= 5 named with
//    Accelerate < 1.1.0; unknown
//    runtime_backends entry, or both "cuda" and "rocm"; a visibility variable the runtime rejects
//    (CUDA_DEVICE_ORDER other than FASTEST_FIRST / PCI_BUS_ID included); an explicit `hpu:N` with
//    N > 0, or pipeline device N > 0 on Gaudi (H-HPU: a process owns one module, `hpu`);
//    an oversized request (device_map over 256 bytes, more than 256 env entries or an env entry over
//    4096 bytes, more than 1024 runtime_backends or job device nodes).
//    The message names the field (`device_map`, `env.CUDA_VISIBLE_DEVICES`, ...) and the
//    accepted forms.
//  - FAILED_PRECONDITION: an explicit device (string or int) naming a row that is not available
//    to the job or an index it cannot see (the message lists what it sees); a local_rank beyond
//    the visible count under Accelerate < 0.33 (no modulo: the job's set_device fails); NEURON_RT_NUM_CORES
//    beyond the visible cores; TrainingArguments before Transformers 4.39 with torch_xla importable and a device
//    torch_xla cannot map, cpu included (V-TF-XLA-CPU: the job's RuntimeError); with `strict`, any hazard (rank
//    wrap-around, device_map="auto" leaving the Intel GPUs out because the Accelerate release cannot read their
//    memory (V-ACC-XPU-MEM rows), ACCELERATE_USE_CPU
//    ignored by TrainingArguments, XLA overriding use_cpu, torch_xla importable without a TPU (or, before Accelerate
//    0.28 / Transformers 4.39, torch_xla >= 2.0's PJRT CPU device found there), the job's xm.xla_device() raising
//    at start (T-XLA-PJRT: torch_xla 1.13 without a TPU, PJRT_SELECT_DEFAULT_DEVICE=0), a
//    present row the job cannot use when the choice was automatic, an available row the
//    convention never picks when the answer fell back to cpu, ranks of a distributed job sharing
//    the one MIG instance CUDA enumerates, E-MIG, a Transformers or Accelerate release newer than
//    the rules, V-SKEW).
//
// Warnings also name set visibility variables that cannot apply to the chosen row (H-FOREIGN) and
// HABANA_VISIBLE_DEVICES (the container runtime's variable). NVIDIA devices are numbered in the
// job's CUDA_DEVICE_ORDER (E-ORDER, docs/SEMANTICS.md section 3).
//  - UNAVAILABLE: the inventory is empty (no probe has completed yet).
absl::StatusOr<v1::ResolveDeviceResponse> Resolve(const v1::Inventory& inventory,
                                                  const v1::ResolveDeviceRequest& request);

// A library of the job whose release is newer than devplace's rules (V-SKEW): the answer applied
// NewestVersion(library)'s rules.
struct NewerLibrary {
  Library library;
  Version job;  // the job's release, suffixes dropped
};

// Resolve(), with the answer serialized into `*bytes` (replaced; untouched on an error) instead of
// returned as a message: what devplaced sends. The answer is built on a protobuf arena, so this
// costs fewer allocations than Resolve() followed by SerializeToString. Same errors as Resolve().
// `newer`, when not null, gets (replaced, on success) each library of the answer newer than the
// rules, the same facts as the response's *_newer_than_rules fields without parsing it back.
absl::Status ResolveSerialized(const v1::Inventory& inventory, const v1::ResolveDeviceRequest& request,
                               std::string* bytes, std::vector<NewerLibrary>* newer = nullptr);

}  // namespace devplace::placement

#endif  // DEVPLACE_SERVER_PLACEMENT_RESOLVER_H_
