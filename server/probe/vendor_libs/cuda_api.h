// The CUDA driver API's public declarations (cuda.h of the CUDA toolkit, "CUDA Driver API" reference:
// Initialization, Device Management) for the few types, constants and functions devplace calls.
// They are declared here, faithfully to the library's public ABI, so that building devplace needs
// no CUDA header or library: libcuda.so.1 is loaded with dlopen at run time
// (server/probe/vendor_libs/cuda_prober.cc) and the functions are looked up by name with dlsym. The fake
// libcuda for the tests (tests/fakes/fake_cuda.cc) defines the same functions from these
// declarations.
//
// Only the global namespace and C linkage are used, as in cuda.h; do not include this header next
// to the real cuda.h.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_API_H_

extern "C" {

// Result codes (CUresult). Only those devplace tells apart are named; every other value is
// printed as a number.
typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_UNKNOWN = 999,
} CUresult;

// A device ordinal handle (cuDeviceGet's result).
typedef int CUdevice;

// cuInit(0): initialises the driver API. The CUDA runtime reads CUDA_DEVICE_ORDER and
// CUDA_VISIBLE_DEVICES here, once per process.
CUresult cuInit(unsigned int flags);
// The number of devices this process enumerates.
CUresult cuDeviceGetCount(int* count);
// The device at `ordinal` (0 .. count-1) in this process's enumeration order.
CUresult cuDeviceGet(CUdevice* device, int ordinal);
// "[domain]:[bus]:[device].[function]" in hexadecimal, NUL-terminated within `len` bytes
// (13 bytes suffice for "0000:00:00.0").
CUresult cuDeviceGetPCIBusId(char* pci_bus_id, int len, CUdevice device);
// The device's name, NUL-terminated within `len` bytes.
CUresult cuDeviceGetName(char* name, int len, CUdevice device);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CUDA_API_H_
