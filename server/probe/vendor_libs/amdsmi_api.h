// The part of the AMD SMI C API (libamd_smi.so) that devplace uses, declared here so that nothing
// AMD is needed at build time (the library is loaded with dlopen). Names, values and signatures
// follow AMD's public header amd_smi/amdsmi.h (ROCm 6.1-6.4, github.com/ROCm/amdsmi) and the AMD
// SMI C API reference. Structures whose layout changed between releases (amdsmi_asic_info_t,
// amdsmi_driver_info_t) are not declared: devplace reads only their first member, a NUL-terminated
// char array at offset 0 in every release, into a buffer larger than any release's structure.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_API_H_

#include <cstdint>

extern "C" {

// amdsmi_status_t: only the values devplace tells apart.
typedef enum {
  AMDSMI_STATUS_SUCCESS = 0,
  AMDSMI_STATUS_INVAL = 1,
  AMDSMI_STATUS_NOT_SUPPORTED = 2,
  AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3,
  AMDSMI_STATUS_FAIL_LOAD_MODULE = 4,
  AMDSMI_STATUS_FAIL_LOAD_SYMBOL = 5,
  AMDSMI_STATUS_DRM_ERROR = 6,
  AMDSMI_STATUS_API_FAILED = 7,
  AMDSMI_STATUS_TIMEOUT = 8,
  AMDSMI_STATUS_NO_PERM = 10,
  AMDSMI_STATUS_IO = 12,
  AMDSMI_STATUS_INIT_ERROR = 18,
  AMDSMI_STATUS_BUSY = 30,
  AMDSMI_STATUS_NOT_FOUND = 31,
  AMDSMI_STATUS_NOT_INIT = 32,
  AMDSMI_STATUS_DRIVER_NOT_LOADED = 34,
  AMDSMI_STATUS_NO_DATA = 40,
  AMDSMI_STATUS_INSUFFICIENT_SIZE = 41,
  AMDSMI_STATUS_UNKNOWN_ERROR = -1,  // 0xFFFFFFFF
} amdsmi_status_t;

// amdsmi_init_flags_t: AMDSMI_INIT_AMD_GPUS.
#define AMDSMI_INIT_AMD_GPUS (1u << 1)

// amdsmi_memory_type_t: AMDSMI_MEM_TYPE_VRAM.
typedef enum { AMDSMI_MEM_TYPE_VRAM = 0 } amdsmi_memory_type_t;

typedef void* amdsmi_socket_handle;
typedef void* amdsmi_processor_handle;

// amdsmi_bdf_t as its 64-bit word (as_uint): function in bits 0-2, device in 3-7, bus in 8-15,
// domain in 16-63.
typedef union {
  uint64_t as_uint;
} amdsmi_bdf_t;

// AMDSMI_GPU_UUID_SIZE: the UUID buffer size the header documents.
#define AMDSMI_GPU_UUID_SIZE 38
// The buffer devplace passes for the partition strings ("SPX", "NPS1") and for the structures
// read only by their first member (any release's amdsmi_asic_info_t / amdsmi_driver_info_t is
// smaller).
#define DEVPLACE_AMDSMI_BUFFER 4096

amdsmi_status_t amdsmi_init(uint64_t init_flags);
amdsmi_status_t amdsmi_shut_down(void);
amdsmi_status_t amdsmi_get_socket_handles(uint32_t* socket_count, amdsmi_socket_handle* socket_handles);
amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket_handle, uint32_t* processor_count,
                                             amdsmi_processor_handle* processor_handles);
amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle processor_handle, amdsmi_bdf_t* bdf);
amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle processor_handle, unsigned int* uuid_length,
                                           char* uuid);
// `info` is an amdsmi_asic_info_t; its first member is char market_name[] (the marketing name).
amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle processor_handle, void* info);
// `info` is an amdsmi_driver_info_t; its first member is char driver_version[].
amdsmi_status_t amdsmi_get_gpu_driver_info(amdsmi_processor_handle processor_handle, void* info);
// Bytes.
amdsmi_status_t amdsmi_get_gpu_memory_total(amdsmi_processor_handle processor_handle, amdsmi_memory_type_t mem_type,
                                            uint64_t* total);
amdsmi_status_t amdsmi_get_gpu_memory_usage(amdsmi_processor_handle processor_handle, amdsmi_memory_type_t mem_type,
                                            uint64_t* used);
// "SPX", "DPX", "TPX", "QPX", "CPX" / "NPS1", "NPS2", "NPS4", "NPS8".
amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle processor_handle, char* compute_partition,
                                                 uint32_t len);
amdsmi_status_t amdsmi_get_gpu_memory_partition(amdsmi_processor_handle processor_handle, char* memory_partition,
                                                uint32_t len);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_AMDSMI_API_H_
