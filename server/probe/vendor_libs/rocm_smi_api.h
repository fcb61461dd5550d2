// The part of the ROCm SMI C API (librocm_smi64, rocm_smi/rocm_smi.h of github.com/ROCm/rocm_smi_lib)
// that devplace calls, declared here so that nothing AMD is needed at build time: the library is
// loaded with dlopen at run time (server/probe/vendor_libs/rocm_smi_prober.cc). Values and
// signatures follow the header of ROCm SMI 5.2.3 (Debian 12's librocm-smi-dev) and are unchanged in
// the ROCm 6.x releases' header for the functions and the one structure used here. The fake ROCm
// SMI of the tests (tests/fakes/fake_rocm_smi.cc) defines the same functions from these
// declarations; the tests also load Debian's real library (librocm-smi64-1) on the fixture trees in
// a private mount namespace.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ROCM_SMI_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ROCM_SMI_API_H_

#include <cstddef>
#include <cstdint>

extern "C" {

// rsmi_status_t: the codes in the header's order (so their values), then the "unknown" code.
typedef enum {
  RSMI_STATUS_SUCCESS = 0,
  RSMI_STATUS_INVALID_ARGS = 1,
  RSMI_STATUS_NOT_SUPPORTED = 2,
  RSMI_STATUS_FILE_ERROR = 3,
  RSMI_STATUS_PERMISSION = 4,
  RSMI_STATUS_OUT_OF_RESOURCES = 5,
  RSMI_STATUS_INTERNAL_EXCEPTION = 6,
  RSMI_STATUS_INPUT_OUT_OF_BOUNDS = 7,
  RSMI_STATUS_INIT_ERROR = 8,
  RSMI_STATUS_NOT_YET_IMPLEMENTED = 9,
  RSMI_STATUS_NOT_FOUND = 10,
  RSMI_STATUS_INSUFFICIENT_SIZE = 11,
  RSMI_STATUS_INTERRUPT = 12,
  RSMI_STATUS_UNEXPECTED_SIZE = 13,
  RSMI_STATUS_NO_DATA = 14,
  RSMI_STATUS_UNEXPECTED_DATA = 15,
  RSMI_STATUS_BUSY = 16,
  RSMI_STATUS_REFCOUNT_OVERFLOW = 17,
  RSMI_STATUS_UNKNOWN_ERROR = -1,  // 0xFFFFFFFF
} rsmi_status_t;

// rsmi_memory_type_t: RSMI_MEM_TYPE_VRAM.
typedef enum { RSMI_MEM_TYPE_VRAM = 0 } rsmi_memory_type_t;

// One process using a GPU. rsmi_compute_process_info_get fills process_id and pasid only (ROCm SMI
// 5.2.3 leaves the rest 0); rsmi_compute_process_info_by_pid_get fills all: vram_usage is the bytes
// of device memory it holds on all the GPUs it uses together.
typedef struct {
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;
  uint64_t sdma_usage;  // microseconds
  uint32_t cu_occupancy;  // percent
} rsmi_process_info_t;

// init_flags 0: the AMD GPUs only.
rsmi_status_t rsmi_init(uint64_t init_flags);
rsmi_status_t rsmi_shut_down(void);
rsmi_status_t rsmi_num_monitor_devices(uint32_t* num_devices);
// ((domain & 0xffffffff) << 32) | (bus << 8) | (device << 3) | function.
rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t* bdfid);
rsmi_status_t rsmi_dev_name_get(uint32_t dv_ind, char* name, size_t len);
// The GPU's unique id (the KFD topology's unique_id; ROCm's "GPU-<16 hex digits>").
rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t* id);
// Bytes.
rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* total);
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* used);
// `procs` null: *num_items becomes the number of processes; else up to *num_items are written and
// *num_items becomes the number written (RSMI_STATUS_INSUFFICIENT_SIZE when there were more).
rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t* procs, uint32_t* num_items);
// One process's entry, with its VRAM (RSMI_STATUS_NOT_FOUND: no such process uses a GPU).
rsmi_status_t rsmi_compute_process_info_by_pid_get(uint32_t pid, rsmi_process_info_t* proc);
// The device indices process `pid` uses, the same way (null `dv_indices`: the count).
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* dv_indices, uint32_t* num_devices);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_ROCM_SMI_API_H_
